//! Two brokers in one process, one partition replicated from broker 1 to broker 2: shared by
//! `tests/replication_metrics.rs` and the `replicated_pair` example (the browser tests' fixture).
//! The caller plays the controller: `replicate` calls `lead` / `follow`, and
//! `accept_isr_changes` accepts every ISR change of the current partition epoch.

use std::sync::Arc;

use streamforge_broker::partition::replica::{IsrChangeOutcome, LeaderAndIsr};
use streamforge_broker::partition::{AlterPartitionIntent, IsrChangeSink};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle, BrokerState};

/// A broker on free loopback ports (its dashboard too, if `dashboard`) with `topic` (1 partition).
pub async fn start_broker(
    dir: &std::path::Path,
    node_id: i32,
    replica_lag_ms: i64,
    dashboard: bool,
    topic: &str,
) -> BrokerHandle {
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: dashboard.then(|| "127.0.0.1:0".parse().unwrap()),
        data_dir: dir.to_path_buf(),
        node_id,
        log_tick_interval_ms: 100,
        replica_lag_time_max_ms: replica_lag_ms,
        ..BrokerConfig::default()
    };
    let b = Broker::start(config).await.expect("the broker starts");
    b.state()
        .replicas
        .create_topic(topic, 1, Default::default(), false)
        .expect("the topic is created");
    b
}

/// Accepts each ISR change whose partition epoch is current, as a controller would.
pub fn accept_isr_changes(leader: Arc<BrokerState>) -> IsrChangeSink {
    let epoch = Arc::new(parking_lot::Mutex::new(0));
    Arc::new(move |intent: AlterPartitionIntent| {
        let mut current = epoch.lock();
        if intent.change.partition_epoch != *current {
            return;
        }
        *current += 1;
        let (state, e) = (leader.clone(), *current);
        tokio::spawn(async move {
            if let Some(p) = state.replicas.partition(&intent.topic, intent.partition) {
                let committed = IsrChangeOutcome::Committed(intent.change.new_isr.clone(), e);
                p.complete_isr_change(&intent.change, committed);
            }
        });
    })
}

/// `leader` (broker 1) leads partition 0 of `topic` in epoch 1 with replicas and ISR 1, 2;
/// `follower` (broker 2) follows it.
pub fn replicate(leader: &BrokerHandle, follower: &BrokerHandle, topic: &str) {
    follower.state().fetchers.set_peer(1, leader.kafka_addr());
    let assignment = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    let sink = accept_isr_changes(leader.state());
    leader.state().lead(topic, 0, assignment, sink).unwrap();
    follower.state().follow(topic, 0, 1, 1).unwrap();
}

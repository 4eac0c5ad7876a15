//! Replication between brokers in one process, over their real Kafka listeners: acks=all
//! waits for the follower, the follower's log equals the leader's up to the high watermark,
//! a stopped follower drops out of the ISR (then acks=all with min.insync.replicas=2 gets
//! NOT_ENOUGH_REPLICAS), a restarted one catches up and rejoins, and after a leader change the
//! old leader's unreplicated tail is truncated. The test plays the controller: it drives the
//! roles and accepts the leader's ISR changes.

mod support {
    #![allow(dead_code)]
    pub mod group_client;
}

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::partition::replica::LeaderAndIsr;
use streamforge_broker::partition::{AlterPartitionIntent, IsrChangeSink};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle, BrokerState};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use support::group_client::RawClient;

const TOPIC: &str = "replicated";
const LAG_MS: i64 = 1_000;
/// Bound on every wait for replication to reach a state.
const WAIT_MAX: Duration = Duration::from_secs(30);

fn config(dir: &std::path::Path, node_id: i32) -> BrokerConfig {
    BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        node_id,
        http_listen: None,
        log_tick_interval_ms: 100,
        replica_lag_time_max_ms: LAG_MS,
        ..BrokerConfig::default()
    }
}

async fn start(dir: &std::path::Path, node_id: i32) -> BrokerHandle {
    let b = Broker::start(config(dir, node_id)).await.unwrap();
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
    // Created on each broker as today's single-broker create does (existing after a restart).
    let _ = b.state().replicas.create_topic(TOPIC, 1, configs, false);
    b
}

/// The test's controller: accepts every ISR change of the current leadership.
fn controller(leader: Arc<BrokerState>, partition_epoch: i32) -> IsrChangeSink {
    let epoch = Arc::new(parking_lot::Mutex::new(partition_epoch));
    Arc::new(move |intent: AlterPartitionIntent| {
        let leader = leader.clone();
        let epoch = epoch.clone();
        tokio::spawn(async move {
            let mut e = epoch.lock();
            if intent.change.partition_epoch == *e {
                *e += 1;
                let p = leader
                    .replicas
                    .partition(&intent.topic, intent.partition)
                    .unwrap();
                p.complete_isr_change(Some((intent.change.new_isr, *e)));
            }
        });
    })
}

async fn produce(client: &mut RawClient, acks: i16, timeout_ms: i32) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(build_simple(BatchSpec::default(), 5, 40)));
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.partition_data = vec![p];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = timeout_ms;
    request.topic_data = vec![t];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await;
    response.responses[0].partition_responses[0].error_code
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT_MAX, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn offsets(b: &BrokerHandle) -> streamforge_broker::partition::PartitionOffsets {
    b.state()
        .replicas
        .partition(TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
}

fn batch_ids(b: &BrokerHandle, up_to: i64) -> Vec<(i64, i64, i32, u32)> {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.batch_ids(up_to).unwrap()
}

/// The leader epoch `b`'s metadata image names for the partition, once `b` leads it there.
fn image_epoch(b: &BrokerHandle) -> Option<i32> {
    let image = b.state().replicas.image();
    if !image.is_unfenced(b.state().node_id()) {
        return None;
    }
    let p = image.topic_by_name(TOPIC)?.partitions.get(&0)?;
    (p.leader == b.state().node_id()).then_some(p.leader_epoch)
}

fn isr(b: &BrokerHandle) -> Vec<i32> {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.replica_status().map(|s| s.1).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_replicates_leaves_and_rejoins_the_isr_and_truncates_after_a_leader_change() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(dir_a.path(), 1).await;
    let mut b = start(dir_b.path(), 2).await;
    b.state().fetchers.set_peer(1, a.kafka_addr());
    let lead_1 = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    a.state()
        .lead(TOPIC, 0, lead_1.clone(), controller(a.state(), 0))
        .unwrap();
    b.state().follow(TOPIC, 0, 1, 1).unwrap();

    // acks=all succeeds once the follower has the batch; logs agree up to the HW.
    let mut client = RawClient::connect(a.kafka_addr()).await;
    for _ in 0..20 {
        assert_eq!(produce(&mut client, -1, 10_000).await, 0);
    }
    let hw = offsets(&a).high_watermark;
    assert_eq!(hw, 100);
    wait_for("the follower's HW", || offsets(&b).high_watermark == hw).await;
    assert_eq!(batch_ids(&a, hw), batch_ids(&b, hw));

    // The follower stops: after replica.lag.time.max.ms it leaves the ISR, and acks=all with
    // min.insync.replicas=2 is refused.
    b.shutdown().await;
    let waited = produce(&mut client, -1, 10_000).await;
    assert_eq!(waited, ResponseError::NotEnoughReplicasAfterAppend.code());
    assert_eq!(isr(&a), vec![1]);
    assert_eq!(
        produce(&mut client, -1, 10_000).await,
        ResponseError::NotEnoughReplicas.code()
    );
    assert_eq!(
        produce(&mut client, 1, 10_000).await,
        0,
        "acks=1 still works"
    );

    // It restarts, catches up and rejoins; acks=all works again. Its restart bumped the
    // leader epoch in its own (one-voter) metadata, so this test's "controller" moves both
    // brokers to that epoch, as a controller's election after a restart would.
    b = start(dir_b.path(), 2).await;
    wait_for("B's own election after its restart", || {
        image_epoch(&b)
            == Some(
                b.state()
                    .replicas
                    .partition(TOPIC, 0)
                    .unwrap()
                    .leader_epoch(),
            )
    })
    .await;
    let epoch = image_epoch(&b).unwrap().max(1);
    let relead = LeaderAndIsr {
        leader_epoch: epoch,
        partition_epoch: 5,
        replicas: vec![1, 2],
        isr: vec![1],
    };
    a.state()
        .lead(TOPIC, 0, relead, controller(a.state(), 5))
        .unwrap();
    b.state().fetchers.set_peer(1, a.kafka_addr());
    b.state().follow(TOPIC, 0, epoch, 1).unwrap();
    wait_for("the ISR to grow back", || isr(&a) == vec![1, 2]).await;
    assert_eq!(produce(&mut client, -1, 10_000).await, 0);
    let hw = offsets(&a).high_watermark;
    wait_for("the follower's HW", || offsets(&b).high_watermark == hw).await;

    // Leader change: B leads the next epoch; A, still believing it leads the old one, takes an
    // acks=1 batch B never sees. A then follows B and truncates that tail by epoch.
    let lead_2 = LeaderAndIsr {
        leader_epoch: epoch + 1,
        partition_epoch: 10,
        replicas: vec![1, 2],
        isr: vec![2, 1],
    };
    b.state()
        .lead(TOPIC, 0, lead_2, controller(b.state(), 10))
        .unwrap();
    assert_eq!(produce(&mut client, 1, 10_000).await, 0);
    let stale_end = offsets(&a).log_end_offset;
    a.state().fetchers.set_peer(2, b.kafka_addr());
    a.state().follow(TOPIC, 0, epoch + 1, 2).unwrap();
    let mut client_b = RawClient::connect(b.kafka_addr()).await;
    for _ in 0..3 {
        assert_eq!(produce(&mut client_b, 1, 10_000).await, 0);
    }
    let end = offsets(&b).log_end_offset;
    wait_for("A to replicate the new epoch", || {
        offsets(&a).log_end_offset == end
    })
    .await;
    assert_eq!(batch_ids(&a, end), batch_ids(&b, end));
    let epochs: Vec<i32> = batch_ids(&a, end).iter().map(|b| b.2).collect();
    assert!(
        epochs.contains(&(epoch + 1)) && stale_end > hw,
        "the stale tail was replaced"
    );
    a.shutdown().await;
    b.shutdown().await;
}

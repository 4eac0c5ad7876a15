//! Scaffolding shared by the integration tests: a raw-protocol client ([`group_client`]), a
//! broker whose peers are registered with its controller but not running, and two brokers in
//! one process replicating a partition while the test plays the controller.

#![allow(dead_code)]

pub mod group_client;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::partition::replica::{IsrChangeOutcome, LeaderAndIsr};
use streamforge_broker::partition::{AlterPartitionIntent, IsrChangeSink, PartitionOffsets};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle, BrokerState};
use streamforge_metadata::controller::{BrokerHeartbeat, BrokerRegistration, Event, Reply};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

use group_client::RawClient;

/// Bound on every wait for replication to reach a state.
pub const WAIT_MAX: Duration = Duration::from_secs(30);

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Broker `node_id` on a free loopback port, in `dir`, without the HTTP listener; the peers a
/// test registers never heartbeat, so their sessions outlast the test.
pub fn peer_config(dir: &Path, node_id: i32) -> BrokerConfig {
    BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        node_id,
        http_listen: None,
        broker_session_timeout_ms: 600_000,
        ..BrokerConfig::default()
    }
}

/// Starts `config` and registers (unfenced) the brokers `peers` with its controller.
pub async fn start_with_peers(config: BrokerConfig, peers: &[i32]) -> BrokerHandle {
    let broker = Broker::start(config).await.unwrap();
    for &id in peers {
        register_peer(&broker.state(), id);
    }
    broker
}

/// Register `id` with this broker's controller and unfence it.
pub fn register_peer(state: &BrokerState, id: i32) {
    let metadata = state.replicas.metadata();
    let registration = BrokerRegistration {
        broker_id: id,
        incarnation_id: uuid::Uuid::from_u128(id as u128 + 1),
        endpoints: Vec::new(),
        rack: None,
        previous_broker_epoch: -1,
    };
    let event = Event::BrokerRegistration(registration);
    let Reply::BrokerRegistration(Ok(broker_epoch)) = metadata.request(event, now_ms()).unwrap().0
    else {
        panic!("registration of broker {id} refused");
    };
    let heartbeat = BrokerHeartbeat {
        broker_id: id,
        broker_epoch,
        metadata_offset: i64::MAX,
        wants_fence: false,
        wants_shutdown: false,
    };
    let reply = metadata
        .request(Event::BrokerHeartbeat(heartbeat), now_ms())
        .unwrap()
        .0;
    assert!(matches!(reply, Reply::BrokerHeartbeat(Ok(r)) if !r.is_fenced));
}

/// Broker `node_id` for the replication tests: loopback, no HTTP listener, a log tick every
/// 100 ms (ISR checks and high-watermark checkpoints).
pub fn replica_config(dir: &Path, node_id: i32) -> BrokerConfig {
    BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        node_id,
        http_listen: None,
        log_tick_interval_ms: 100,
        ..BrokerConfig::default()
    }
}

/// Starts `config` and creates `topic` (one partition, `configs`) on it, as today's
/// single-broker create does (it exists already after a restart).
pub async fn start_with_topic(
    config: BrokerConfig,
    topic: &str,
    configs: BTreeMap<String, String>,
) -> BrokerHandle {
    let b = Broker::start(config).await.unwrap();
    let _ = b.state().replicas.create_topic(topic, 1, configs, false);
    b
}

/// The test's controller: accepts every ISR change of the current leadership, numbering
/// partition epochs on from `partition_epoch`.
pub fn controller(leader: Arc<BrokerState>, partition_epoch: i32) -> IsrChangeSink {
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
                let committed = IsrChangeOutcome::Committed(intent.change.new_isr.clone(), *e);
                p.complete_isr_change(&intent.change, committed);
            }
        });
    })
}

/// `leader` leads partition 0 of `topic` under `leader_epoch` (partition epoch 0, replicas
/// and ISR both brokers) and `follower` fetches it from there.
pub fn lead_and_follow(
    leader: &BrokerHandle,
    follower: &BrokerHandle,
    topic: &str,
    leader_epoch: i32,
) {
    let (leader_id, follower_id) = (leader.state().node_id(), follower.state().node_id());
    follower
        .state()
        .fetchers
        .set_peer(leader_id, leader.kafka_addr());
    let state = LeaderAndIsr {
        leader_epoch,
        partition_epoch: 0,
        replicas: vec![leader_id, follower_id],
        isr: vec![leader_id, follower_id],
    };
    leader
        .state()
        .lead(topic, 0, state, controller(leader.state(), 0))
        .unwrap();
    follower
        .state()
        .follow(topic, 0, leader_epoch, leader_id)
        .unwrap();
}

/// Produces one batch of 5 records to partition 0 of `topic`: the partition's error code.
pub async fn produce(client: &mut RawClient, topic: &str, acks: i16, timeout_ms: i32) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(build_simple(BatchSpec::default(), 5, 40)));
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![p];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = timeout_ms;
    request.topic_data = vec![t];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await;
    response.responses[0].partition_responses[0].error_code
}

/// Polls `done` until it holds (bounded by [`WAIT_MAX`]).
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT_MAX, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The offsets of partition 0 of `topic` on `b`.
pub fn offsets(b: &BrokerHandle, topic: &str) -> PartitionOffsets {
    let p = b.state().replicas.partition(topic, 0).unwrap();
    p.offsets().unwrap()
}

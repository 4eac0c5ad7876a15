//! KIP-392 over the real Kafka listeners of two brokers in one process, in racks `r1` (the
//! leader, with the rack-aware selector) and `r2` (the follower): a consumer Fetch with
//! `rack_id = r2` sent to the leader gets `preferred_read_replica = 2` and no records; the same
//! Fetch sent to the follower returns the records up to the follower's high watermark; one
//! from the leader's rack reads from the leader. The test plays the controller as
//! `tests/replication.rs` does, and registers the follower (with its rack) in the leader's
//! metadata as the cluster wiring will.

mod support {
    #![allow(dead_code)]
    pub mod group_client;
}

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, FetchRequest, FetchResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::partition::replica::LeaderAndIsr;
use streamforge_broker::partition::replica_selector::ReplicaSelectorKind;
use streamforge_broker::partition::{AlterPartitionIntent, IsrChangeSink};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle, BrokerState};
use streamforge_metadata::controller::{BrokerRegistration, Event};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use support::group_client::RawClient;

const TOPIC: &str = "racked";
/// Bound on every wait for replication to reach a state.
const WAIT_MAX: Duration = Duration::from_secs(30);
const EPOCH: i32 = 1;

async fn start(dir: &std::path::Path, node_id: i32, rack: &str) -> BrokerHandle {
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        node_id,
        http_listen: None,
        log_tick_interval_ms: 100,
        broker_rack: Some(rack.to_string()),
        replica_selector: ReplicaSelectorKind::RackAware,
        ..BrokerConfig::default()
    };
    let b = Broker::start(config).await.unwrap();
    let _ = b
        .state()
        .replicas
        .create_topic(TOPIC, 1, BTreeMap::new(), false);
    b
}

/// The test's controller: accepts every ISR change of the current leadership.
fn controller(leader: Arc<BrokerState>) -> IsrChangeSink {
    let epoch = Arc::new(parking_lot::Mutex::new(0));
    Arc::new(move |intent: AlterPartitionIntent| {
        let mut e = epoch.lock();
        if intent.change.partition_epoch == *e {
            *e += 1;
            let p = leader.replicas.partition(&intent.topic, 0).unwrap();
            p.complete_isr_change(Some((intent.change.new_isr, *e)));
        }
    })
}

async fn produce(client: &mut RawClient) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(build_simple(BatchSpec::default(), 5, 40)));
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.partition_data = vec![p];
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = 10_000;
    request.topic_data = vec![t];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await;
    response.responses[0].partition_responses[0].error_code
}

/// A consumer's Fetch of partition 0 from offset 0, from a client in `rack`.
async fn fetch(
    client: &mut RawClient,
    version: i16,
    rack: &str,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = 1 << 20;
    p.current_leader_epoch = EPOCH;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_static_str(TOPIC));
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    // A long poll that the redirect must not wait out.
    request.max_wait_ms = 10_000;
    request.min_bytes = 1;
    request.max_bytes = 1 << 20;
    request.rack_id = StrBytes::from_string(rack.to_string());
    request.topics = vec![t];
    let mut response: FetchResponse = client.call(ApiKey::Fetch, version, &request).await;
    response.responses.remove(0).partitions.remove(0)
}

/// The offset after the last record of the batches in `records`.
fn end_of(records: &Bytes) -> i64 {
    let mut pos = 0;
    let mut end = 0;
    while pos < records.len() {
        let h = streamforge_protocol::batch::RecordBatchHeader::parse(&records[pos..]).unwrap();
        end = h.last_offset() + 1;
        pos += h.total_bytes();
    }
    end
}

fn high_watermark(b: &BrokerHandle) -> i64 {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.offsets().unwrap().high_watermark
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT_MAX, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_is_sent_to_the_replica_in_its_rack_which_serves_it_to_its_high_watermark() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(dir_a.path(), 1, "r1").await;
    let b = start(dir_b.path(), 2, "r2").await;
    // The follower's registration, with its rack, in the leader's metadata.
    let registration = BrokerRegistration {
        broker_id: 2,
        incarnation_id: uuid::Uuid::from_u128(2),
        endpoints: Vec::new(),
        rack: Some("r2".to_string()),
    };
    let now_ms = a.state().clock.now_ms().max(0) as u64;
    a.state()
        .replicas
        .metadata()
        .request(Event::BrokerRegistration(registration), now_ms)
        .unwrap();
    b.state().fetchers.set_peer(1, a.kafka_addr());
    let state = LeaderAndIsr {
        leader_epoch: EPOCH,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    a.state()
        .lead(TOPIC, 0, state, controller(a.state()))
        .unwrap();
    b.state().follow(TOPIC, 0, EPOCH, 1).unwrap();

    let mut client_a = RawClient::connect(a.kafka_addr()).await;
    for _ in 0..10 {
        assert_eq!(produce(&mut client_a).await, 0);
    }
    let hw = high_watermark(&a);
    assert_eq!(hw, 50);
    wait_for("the follower's HW", || high_watermark(&b) == hw).await;

    // Each broker's rack, as Metadata / DescribeCluster show it.
    let cluster: DescribeClusterResponse = client_a
        .call(
            ApiKey::DescribeCluster,
            0,
            &DescribeClusterRequest::default(),
        )
        .await;
    let own = cluster.brokers.iter().find(|x| x.broker_id.0 == 1).unwrap();
    assert_eq!(own.rack.as_deref(), Some("r1"));
    let image = a.state().replicas.image();
    assert_eq!(image.broker(2).unwrap().rack.as_deref(), Some("r2"));

    // The leader sends a consumer in r2 to broker 2, with its offsets and no records, at once.
    let t0 = Instant::now();
    let sent = fetch(&mut client_a, 12, "r2").await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "answered without the long poll"
    );
    assert_eq!(sent.error_code, 0);
    assert_eq!(sent.preferred_read_replica.0, 2);
    assert_eq!(sent.high_watermark, hw);
    assert!(sent.records.as_ref().is_none_or(|r| r.is_empty()));
    // A consumer in the leader's rack, or in none, reads from the leader.
    for rack in ["r1", "", "r9"] {
        let here = fetch(&mut client_a, 12, rack).await;
        assert_eq!(here.preferred_read_replica.0, -1, "rack {rack:?}");
        assert_eq!(end_of(here.records.as_ref().unwrap()), hw);
    }

    // The follower serves the same Fetch, up to its high watermark.
    let mut client_b = RawClient::connect(b.kafka_addr()).await;
    let served = fetch(&mut client_b, 12, "r2").await;
    assert_eq!(served.error_code, 0);
    assert_eq!(served.preferred_read_replica.0, -1);
    assert_eq!(served.high_watermark, high_watermark(&b));
    assert_eq!(end_of(served.records.as_ref().unwrap()), hw);
    // Fetch v10 carries no client metadata: only the leader serves it.
    let old = fetch(&mut client_b, 10, "").await;
    assert_eq!(old.error_code, ResponseError::NotLeaderOrFollower.code());

    a.shutdown().await;
    b.shutdown().await;
}

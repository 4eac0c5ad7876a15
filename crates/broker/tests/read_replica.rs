//! KIP-392 over the real Kafka listeners of two brokers in one process, in racks `r1` (the
//! leader, with the rack-aware selector) and `r2` (the follower): a consumer Fetch with
//! `rack_id = r2` sent to the leader gets `preferred_read_replica = 2` and no records; the same
//! Fetch sent to the follower returns the records up to the follower's high watermark; one
//! from the leader's rack reads from the leader. The test plays the controller as
//! `tests/replication.rs` does, and registers the follower (with its rack) in the leader's
//! metadata as the cluster wiring will.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, FetchRequest, FetchResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::partition::replica_selector::ReplicaSelectorKind;
use streamforge_broker::{BrokerConfig, BrokerHandle};
use streamforge_metadata::controller::{BrokerRegistration, Event};
use support::group_client::RawClient;
use support::{lead_and_follow, replica_config, start_with_topic, wait_for};

const TOPIC: &str = "racked";
const EPOCH: i32 = 1;

async fn start(dir: &std::path::Path, node_id: i32, rack: &str) -> BrokerHandle {
    let config = BrokerConfig {
        broker_rack: Some(rack.to_string()),
        replica_selector: ReplicaSelectorKind::RackAware,
        ..replica_config(dir, node_id)
    };
    start_with_topic(config, TOPIC, BTreeMap::new()).await
}

async fn produce(client: &mut RawClient) -> i16 {
    support::produce(client, TOPIC, -1, 10_000).await
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
    support::offsets(b, TOPIC).high_watermark
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
        previous_broker_epoch: -1,
    };
    let now_ms = a.state().clock.now_ms().max(0) as u64;
    a.state()
        .replicas
        .metadata()
        .request(Event::BrokerRegistration(registration), now_ms)
        .unwrap();
    lead_and_follow(&a, &b, TOPIC, EPOCH);

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

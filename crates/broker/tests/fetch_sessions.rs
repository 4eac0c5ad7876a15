//! Follower fetches between two brokers of one cluster (a two-voter metadata quorum in this
//! process, over their real listeners): Fetch v15 with topic ids and `replica_state`, in
//! incremental fetch sessions (KIP-227). Replication works (acks=all batches are on both
//! brokers); once a session is open, the follower's requests name only the partitions whose
//! fetch state changed, not every partition it follows; the leader answers a stale broker
//! epoch, an unknown topic id and an unknown session as Kafka does.

mod support;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::metadata_cluster::{ClusterOptions, ProcessRoles};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use support::group_client::RawClient;
use support::wait_for;

const TOPIC: &str = "sessions";
const PARTITIONS: i32 = 12;

fn config(dir: &std::path::Path, node_id: i32, voters: &BTreeMap<u64, String>) -> BrokerConfig {
    BrokerConfig {
        cluster: Some(ClusterOptions {
            voters: voters.clone(),
            listen: voters[&(node_id as u64)].clone(),
            roles: ProcessRoles::Combined,
            security: Default::default(),
        }),
        ..support::replica_config(dir, node_id)
    }
}

/// Two brokers, both voters (each start waits for the quorum, so they start together).
async fn start_pair(dirs: [&std::path::Path; 2]) -> (BrokerHandle, BrokerHandle) {
    let ports: Vec<u16> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let voters: BTreeMap<u64, String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u64 + 1, format!("127.0.0.1:{p}")))
        .collect();
    let (a, b) = tokio::join!(
        Broker::start(config(dirs[0], 1, &voters)),
        Broker::start(config(dirs[1], 2, &voters))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    wait_for("both brokers registered and unfenced", || {
        [&a, &b]
            .iter()
            .all(|h| h.state().replicas.image().unfenced_brokers().count() == 2)
    })
    .await;
    (a, b)
}

async fn create_topic(addr: SocketAddr) {
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.num_partitions = PARTITIONS;
    t.replication_factor = 2;
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 10_000;
    let mut client = RawClient::connect(addr).await;
    let response: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 5, &request).await;
    assert_eq!(response.topics[0].error_code, 0);
}

/// The leader of each partition, from `b`'s image.
fn leaders(b: &BrokerHandle) -> BTreeMap<i32, i32> {
    let image = b.state().replicas.image();
    let Some(topic) = image.topic_by_name(TOPIC) else {
        return BTreeMap::new();
    };
    topic
        .partitions
        .iter()
        .map(|(&p, s)| (p, s.leader))
        .collect()
}

async fn produce(client: &mut RawClient, partition: i32) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = partition;
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

fn log_end(b: &BrokerHandle, partition: i32) -> i64 {
    let p = b.state().replicas.partition(TOPIC, partition).unwrap();
    p.offsets().unwrap().log_end_offset
}

/// A Fetch v15 as broker `replica_id` with broker epoch `replica_epoch`, of partition 0 of
/// `topic_id`, in session `session_id` at `session_epoch`.
fn fetch_v15(
    replica_id: i32,
    replica_epoch: i64,
    topic_id: uuid::Uuid,
    session: (i32, i32),
) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic_id = topic_id;
    t.partitions = vec![p];
    let mut state = ReplicaState::default();
    state.replica_id = BrokerId(replica_id);
    state.replica_epoch = replica_epoch;
    let mut request = FetchRequest::default();
    request.replica_state = state;
    request.max_wait_ms = 0;
    request.max_bytes = 1 << 20;
    request.session_id = session.0;
    request.session_epoch = session.1;
    request.topics = vec![t];
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_fetch_in_incremental_sessions_naming_only_changed_partitions() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = start_pair([dir_a.path(), dir_b.path()]).await;
    create_topic(a.kafka_addr()).await;
    wait_for("every partition led", || {
        let l = leaders(&a);
        l.len() == PARTITIONS as usize && l.values().all(|&id| id == 1 || id == 2)
    })
    .await;
    let leaders = leaders(&a);
    let on_a: Vec<i32> = leaders
        .iter()
        .filter(|(_, l)| **l == 1)
        .map(|(&p, _)| p)
        .collect();
    // Two or more, so a request naming every followed partition would name more than one.
    assert!(on_a.len() >= 2, "broker 1 leads partitions: {leaders:?}");
    let mut clients = [
        RawClient::connect(a.kafka_addr()).await,
        RawClient::connect(b.kafka_addr()).await,
    ];
    // Replication works: acks=all on every partition, the follower has each batch.
    for (&p, &leader) in &leaders {
        let client = &mut clients[(leader - 1) as usize];
        assert_eq!(produce(client, p).await, 0, "partition {p}");
    }
    for &p in leaders.keys() {
        wait_for("both replicas at the same log end", || {
            log_end(&a, p) == 5 && log_end(&b, p) == 5
        })
        .await;
    }

    // Broker 2 follows `on_a` from broker 1 in one session.
    let sessions = || a.state().fetch_sessions.lock().stats();
    wait_for("broker 2's fetches to broker 1 are incremental", || {
        sessions().incremental > 3
    })
    .await;
    let before = sessions();
    // Batches to one partition only: each makes the follower's next request name it.
    let hot = on_a[0];
    for _ in 0..20 {
        assert_eq!(produce(&mut clients[0], hot).await, 0);
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = sessions();
    let requests = after.requests - before.requests;
    let incremental = after.incremental - before.incremental;
    let named = after.partitions_named - before.partitions_named;
    assert!(requests >= 20, "{requests} fetches for 20 acks=all batches");
    assert_eq!(incremental, requests, "every fetch in the session");
    // A full fetch names every followed partition; these name the hot one at most.
    assert!(
        named <= requests,
        "{named} partitions named in {requests} requests (following {})",
        on_a.len()
    );
    assert!(
        (after.request_bytes - before.request_bytes) / requests < 120,
        "bytes per request: {}",
        (after.request_bytes - before.request_bytes) / requests
    );
    wait_for("the follower has every batch", || {
        log_end(&b, hot) == log_end(&a, hot)
    })
    .await;

    // Kafka's answers to what a follower must not send.
    let image = a.state().replicas.image();
    let topic_id = image.topic_by_name(TOPIC).unwrap().id;
    let epoch_of_2 = image.broker(2).unwrap().epoch;
    let partition_error = |r: &FetchResponse| r.responses[0].partitions[0].error_code;
    let stale: FetchResponse = clients[0]
        .call(
            ApiKey::Fetch,
            15,
            &fetch_v15(2, epoch_of_2 - 1, topic_id, (0, -1)),
        )
        .await;
    assert_eq!(
        partition_error(&stale),
        ResponseError::NotLeaderOrFollower.code()
    );
    let unknown: FetchResponse = clients[0]
        .call(
            ApiKey::Fetch,
            15,
            &fetch_v15(2, epoch_of_2, uuid::Uuid::from_u128(7), (0, -1)),
        )
        .await;
    assert_eq!(
        partition_error(&unknown),
        ResponseError::UnknownTopicId.code()
    );
    let no_session: FetchResponse = clients[0]
        .call(
            ApiKey::Fetch,
            15,
            &fetch_v15(2, epoch_of_2, topic_id, (12345, 3)),
        )
        .await;
    assert_eq!(
        no_session.error_code,
        ResponseError::FetchSessionIdNotFound.code()
    );
    assert!(no_session.responses.is_empty());

    b.shutdown().await;
    a.shutdown().await;
}

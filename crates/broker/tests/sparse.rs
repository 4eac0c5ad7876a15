//! A broker hosting only some partitions of a topic, through its real Kafka listener: node 2
//! of three hosts partitions 1 and 3 of 4. Produce, Fetch, ListOffsets, OffsetForLeaderEpoch
//! and DeleteRecords answer NOT_LEADER_OR_FOLLOWER for the partitions other brokers host and
//! UNKNOWN_TOPIC_OR_PARTITION past the last one; Metadata lists all four with their leaders.
//! Brokers 1 and 3 are registered with the controller, their processes are not needed.

mod support;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use support::group_client::RawClient;
use support::{peer_config, start_with_peers};

const TOPIC: &str = "sparse";
const NODE: i32 = 2;
/// Replicas by partition: node 2 hosts 1 and 3.
const PLACEMENT: [i32; 4] = [1, 2, 3, 2];
/// Partitions asked for in every request: the four, and one past the end.
const ASKED: [i32; 5] = [0, 1, 2, 3, 4];

fn expected_codes() -> Vec<i16> {
    let not_here = ResponseError::NotLeaderOrFollower.code();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    vec![not_here, 0, not_here, 0, unknown]
}

fn name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

async fn create_topic(client: &mut RawClient) {
    let mut t = CreatableTopic::default();
    t.name = name();
    t.num_partitions = -1;
    t.replication_factor = -1;
    t.assignments = (0..)
        .zip(PLACEMENT)
        .map(|(p, node)| {
            let mut a = CreatableReplicaAssignment::default();
            a.partition_index = p;
            a.broker_ids = vec![BrokerId(node)];
            a
        })
        .collect();
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 10_000;
    let response: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 5, &request).await;
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

async fn produce_codes(client: &mut RawClient) -> Vec<i16> {
    let mut t = TopicProduceData::default();
    t.name = name();
    t.partition_data = ASKED
        .iter()
        .map(|&p| {
            let mut d = PartitionProduceData::default();
            d.index = p;
            d.records = Some(Bytes::from(build_simple(BatchSpec::default(), 3, 20)));
            d
        })
        .collect();
    let mut request = ProduceRequest::default();
    request.acks = 1;
    request.timeout_ms = 10_000;
    request.topic_data = vec![t];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await;
    let r = &response.responses[0].partition_responses;
    r.iter().map(|p| p.error_code).collect()
}

async fn fetch_codes(client: &mut RawClient) -> Vec<i16> {
    let mut t = FetchTopic::default();
    t.topic = name();
    t.partitions = ASKED
        .iter()
        .map(|&p| {
            let mut f = FetchPartition::default();
            f.partition = p;
            f.partition_max_bytes = 1 << 20;
            f
        })
        .collect();
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_wait_ms = 0;
    request.max_bytes = 1 << 20;
    request.topics = vec![t];
    let response: FetchResponse = client.call(ApiKey::Fetch, 12, &request).await;
    let r = &response.responses[0].partitions;
    r.iter().map(|p| p.error_code).collect()
}

async fn list_offsets_codes(client: &mut RawClient) -> Vec<i16> {
    let mut t = ListOffsetsTopic::default();
    t.name = name();
    t.partitions = ASKED
        .iter()
        .map(|&p| {
            let mut l = ListOffsetsPartition::default();
            l.partition_index = p;
            l.timestamp = -1;
            l.current_leader_epoch = -1;
            l
        })
        .collect();
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t];
    let response: ListOffsetsResponse = client.call(ApiKey::ListOffsets, 7, &request).await;
    let r = &response.topics[0].partitions;
    r.iter().map(|p| p.error_code).collect()
}

async fn offset_for_leader_epoch_codes(client: &mut RawClient) -> Vec<i16> {
    let mut t = OffsetForLeaderTopic::default();
    t.topic = name();
    t.partitions = ASKED
        .iter()
        .map(|&p| {
            let mut o = OffsetForLeaderPartition::default();
            o.partition = p;
            o.current_leader_epoch = -1;
            o.leader_epoch = 0;
            o
        })
        .collect();
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t];
    let response: OffsetForLeaderEpochResponse =
        client.call(ApiKey::OffsetForLeaderEpoch, 4, &request).await;
    let r = &response.topics[0].partitions;
    r.iter().map(|p| p.error_code).collect()
}

async fn delete_records_codes(client: &mut RawClient) -> Vec<i16> {
    let mut t = DeleteRecordsTopic::default();
    t.name = name();
    t.partitions = ASKED
        .iter()
        .map(|&p| {
            let mut d = DeleteRecordsPartition::default();
            d.partition_index = p;
            d.offset = 1;
            d
        })
        .collect();
    let mut request = DeleteRecordsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 10_000;
    let response: DeleteRecordsResponse = client.call(ApiKey::DeleteRecords, 2, &request).await;
    let r = &response.topics[0].partitions;
    r.iter().map(|p| p.error_code).collect()
}

/// Leader and replicas of every partition Metadata lists, by partition.
async fn metadata_placement(client: &mut RawClient) -> Vec<(i32, i32, Vec<i32>)> {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name());
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![t]);
    let response: MetadataResponse = client.call(ApiKey::Metadata, 12, &request).await;
    let topic = &response.topics[0];
    assert_eq!(topic.error_code, 0);
    let mut placement: Vec<_> = topic
        .partitions
        .iter()
        .map(|p| {
            let replicas = p.replica_nodes.iter().map(|r| r.0).collect();
            (p.partition_index, p.leader_id.0, replicas)
        })
        .collect();
    placement.sort();
    placement
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_hosted_by_another_broker_answers_not_leader_or_follower() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_with_peers(peer_config(dir.path(), NODE), &[1, 3]).await;
    let mut client = RawClient::connect(broker.kafka_addr()).await;
    create_topic(&mut client).await;

    let placement = metadata_placement(&mut client).await;
    let expected: Vec<_> = (0..).zip(PLACEMENT).map(|(p, n)| (p, n, vec![n])).collect();
    assert_eq!(placement, expected, "every partition, with its leader");

    assert_eq!(
        produce_codes(&mut client).await,
        expected_codes(),
        "Produce"
    );
    assert_eq!(fetch_codes(&mut client).await, expected_codes(), "Fetch");
    let codes = list_offsets_codes(&mut client).await;
    assert_eq!(codes, expected_codes(), "ListOffsets");
    let codes = offset_for_leader_epoch_codes(&mut client).await;
    assert_eq!(codes, expected_codes(), "OffsetForLeaderEpoch");
    let codes = delete_records_codes(&mut client).await;
    assert_eq!(codes, expected_codes(), "DeleteRecords");
    let hosted: Vec<i32> = (0..4)
        .filter(|p| dir.path().join(format!("{TOPIC}-{p}")).exists())
        .collect();
    assert_eq!(hosted, [1, 3], "only this broker's logs exist");
    broker.shutdown().await;
}

//! The real broker binary over raw sockets: what a partition answers about its offsets —
//! ListOffsets and OffsetForLeaderEpoch check the client's leader epoch (FENCED_LEADER_EPOCH /
//! UNKNOWN_LEADER_EPOCH with Kafka's codes), and DeleteRecords follows Kafka's rules.

mod support;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use support::{BrokerProc, Conn, batch, create_topic, name};

const TOPIC: &str = "epochs";

fn produce(c: &mut Conn, n: usize) {
    let records: Vec<(String, String)> =
        (0..n).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let mut p = PartitionProduceData::default();
    p.records = Some(batch(&records, Compression::None));
    let mut t = TopicProduceData::default();
    t.name = name(TOPIC);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

/// `(error_code, offset, leader_epoch)` of ListOffsets v7 for `timestamp`.
fn list_offset(c: &mut Conn, timestamp: i64, current_leader_epoch: i32) -> (i16, i64, i32) {
    let mut p = ListOffsetsPartition::default();
    p.timestamp = timestamp;
    p.current_leader_epoch = current_leader_epoch;
    let mut t = ListOffsetsTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset, p.leader_epoch)
}

/// `(error_code, leader_epoch, end_offset)` of OffsetForLeaderEpoch v4.
fn end_offset(c: &mut Conn, leader_epoch: i32, current_leader_epoch: i32) -> (i16, i32, i64) {
    let mut p = OffsetForLeaderPartition::default();
    p.leader_epoch = leader_epoch;
    p.current_leader_epoch = current_leader_epoch;
    let mut t = OffsetForLeaderTopic::default();
    t.topic = name(TOPIC);
    t.partitions = vec![p];
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let r: OffsetForLeaderEpochResponse = c.call(ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// `(error_code, low_watermark)` of DeleteRecords v2.
fn delete_records(c: &mut Conn, offset: i64) -> (i16, i64) {
    let mut p = DeleteRecordsPartition::default();
    p.offset = offset;
    let mut t = DeleteRecordsTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut req = DeleteRecordsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: DeleteRecordsResponse = c.call(ApiKey::DeleteRecords, 2, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

#[test]
fn offset_queries_check_the_clients_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, TOPIC, 1);
    produce(&mut c, 10);
    // The leader epoch is 0: -1 (unchecked) and 0 are served, with the epoch.
    assert_eq!(list_offset(&mut c, -1, -1), (0, 10, 0));
    assert_eq!(list_offset(&mut c, -2, 0), (0, 0, 0));
    // A newer epoch than the broker knows: UNKNOWN_LEADER_EPOCH (75), as Kafka answers.
    let unknown = ResponseError::UnknownLeaderEpoch.code();
    assert_eq!(list_offset(&mut c, -1, 1).0, unknown);
    assert_eq!(end_offset(&mut c, 0, 1).0, unknown);
    assert_eq!(end_offset(&mut c, 0, -1), (0, 0, 10));
    assert_eq!(end_offset(&mut c, 0, 0), (0, 0, 10));
}

#[test]
fn delete_records_follows_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, TOPIC, 1);
    produce(&mut c, 10);
    let out_of_range = ResponseError::OffsetOutOfRange.code();
    assert_eq!(delete_records(&mut c, 11).0, out_of_range, "past the HW");
    assert_eq!(delete_records(&mut c, -5).0, out_of_range, "negative");
    assert_eq!(delete_records(&mut c, 4), (0, 4));
    assert_eq!(delete_records(&mut c, 2), (0, 4), "never moves back");
    assert_eq!(delete_records(&mut c, -1), (0, 10), "-1: up to the HW");
    assert_eq!(list_offset(&mut c, -2, -1).1, 10);
}

/// `(error_code, preferred_read_replica, record bytes)` of a consumer's Fetch v12 from 0.
fn consumer_fetch(c: &mut Conn, current_leader_epoch: i32, rack: &str) -> (i16, i32, usize) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let mut p = FetchPartition::default();
    p.partition_max_bytes = 1 << 20;
    p.current_leader_epoch = current_leader_epoch;
    let mut t = FetchTopic::default();
    t.topic = name(TOPIC);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_bytes = 1 << 20;
    req.rack_id = StrBytes::from_string(rack.to_string());
    req.topics = vec![t];
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
    let p = &r.responses[0].partitions[0];
    let bytes = p.records.as_ref().map_or(0, |r| r.len());
    (p.error_code, p.preferred_read_replica.0, bytes)
}

#[test]
fn fetch_checks_the_consumers_leader_epoch_and_shows_the_broker_rack() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--broker-rack", "r1", "--replica-selector", "rack-aware"];
    let b = BrokerProc::start(&dir.path().join("d"), &flags);
    let mut c = b.connect();
    create_topic(&mut c, TOPIC, 1);
    produce(&mut c, 10);
    let (code, preferred, bytes) = consumer_fetch(&mut c, 0, "r2");
    assert_eq!(
        (code, preferred),
        (0, -1),
        "a lone leader names no other replica"
    );
    assert!(bytes > 0);
    assert_eq!(consumer_fetch(&mut c, -1, "").0, 0);
    let unknown = ResponseError::UnknownLeaderEpoch.code();
    assert_eq!(consumer_fetch(&mut c, 1, "r2"), (unknown, -1, 0));
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert_eq!(r.brokers[0].rack.as_deref(), Some("r1"));
}

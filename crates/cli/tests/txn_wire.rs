//! Transactions over raw sockets against the real `streamforge broker` binary: KIP-890 part 1
//! (a transactional Produce to a partition not in the transaction is INVALID_TXN_STATE) and
//! part 2 (`transaction.version` 2 in ApiVersions; Produce v12 adds the partition, EndTxn v5
//! bumps the epoch and answers it; the old epoch is fenced; `--transaction-version 0` keeps
//! the KIP-98 versions).

mod support;

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use support::{BrokerProc, Conn, now_ms};

const TOPIC: &str = "txn-wire";

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut Conn) {
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = 2;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0);
}

fn init(c: &mut Conn, id: &str) -> (i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(tid(id));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    // The first call creates __transaction_state; CONCURRENT_TRANSACTIONS is retriable.
    for _ in 0..50 {
        let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
        if r.error_code == 0 {
            return (r.producer_id.0, r.producer_epoch);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("InitProducerId kept failing");
}

fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let ts = now_ms();
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: ts,
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.freeze()
}

fn produce(c: &mut Conn, version: i16, id: &str, partition: i32, records: Bytes) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(TOPIC);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(tid(id));
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, version, &req);
    r.responses[0].partition_responses[0].error_code
}

fn add_partition(c: &mut Conn, id: &str, pid: i64, epoch: i16, partition: i32) -> i16 {
    add_partition_v(c, 3, id, pid, epoch, partition)
}

fn add_partition_v(
    c: &mut Conn,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    partition: i32,
) -> i16 {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![partition];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = tid(id);
    req.v3_and_below_producer_id = ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, version, &req);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end_txn(
    c: &mut Conn,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> EndTxnResponse {
    let mut req = EndTxnRequest::default();
    req.transactional_id = tid(id);
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.committed = commit;
    c.call(ApiKey::EndTxn, version, &req)
}

/// The open transaction's partitions, as DescribeTransactions reports them.
fn txn_partitions(c: &mut Conn, id: &str) -> (String, Vec<i32>) {
    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = vec![tid(id)];
    let r: DescribeTransactionsResponse = c.call(ApiKey::DescribeTransactions, 0, &req);
    let s = &r.transaction_states[0];
    let parts = s.topics.iter().flat_map(|t| t.partitions.clone()).collect();
    (s.transaction_state.to_string(), parts)
}

fn api_versions(c: &mut Conn) -> ApiVersionsResponse {
    let mut req = ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("txn-wire");
    req.client_software_version = StrBytes::from_static_str("1");
    c.call(ApiKey::ApiVersions, 3, &req)
}

fn max_version(r: &ApiVersionsResponse, key: ApiKey) -> i16 {
    r.api_keys
        .iter()
        .find(|k| k.api_key == key as i16)
        .map(|k| k.max_version)
        .unwrap()
}

fn transaction_version(r: &ApiVersionsResponse) -> Option<i16> {
    r.finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map(|f| f.max_version_level)
}

#[test]
fn a_transactional_produce_to_a_partition_not_in_the_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c);
    let (pid, epoch) = init(&mut c, "verify");
    let code = produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 0, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
    assert_eq!(add_partition(&mut c, "verify", pid, epoch, 0), 0);
    assert_eq!(
        produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 0, 3)),
        0
    );
    // Partition 1 is still not in the transaction.
    let code = produce(&mut c, 11, "verify", 1, txn_batch(pid, epoch, 0, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
    // After the commit the transaction is closed: the next batch needs adding again.
    assert_eq!(end_txn(&mut c, 4, "verify", pid, epoch, true).error_code, 0);
    let code = produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 3, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
}

#[test]
fn transaction_version_2_bumps_the_epoch_at_every_end_txn() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    let versions = api_versions(&mut c);
    assert_eq!(transaction_version(&versions), Some(2));
    assert!(versions.finalized_features_epoch >= 0);
    assert_eq!(max_version(&versions, ApiKey::EndTxn), 5);
    assert_eq!(max_version(&versions, ApiKey::Produce), 12);
    create_topic(&mut c);
    let (pid, e0) = init(&mut c, "tv2");
    // Produce v12 adds the partition itself.
    assert_eq!(produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0, 0, 2)), 0);
    assert_eq!(
        txn_partitions(&mut c, "tv2"),
        ("Ongoing".to_string(), vec![1])
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0, true);
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, pid, e0 + 1)
    );
    // A retry under the old epoch gets the same answer.
    let r = end_txn(&mut c, 5, "tv2", pid, e0, true);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 1));
    // The old epoch is fenced (the coordinator's PRODUCER_FENCED is INVALID_PRODUCER_EPOCH on
    // a Produce, as Kafka's leader reports it); the new one starts at sequence 0.
    let code = produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0, 2, 2));
    assert_eq!(code, ResponseError::InvalidProducerEpoch.code());
    assert_eq!(
        produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0 + 1, 0, 2)),
        0
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0 + 1, false);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 2));
    // The epoch survives a restart (the state records are Kafka's v1 value).
    drop(c);
    broker.terminate();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    assert_eq!(
        produce(&mut c, 12, "tv2", 0, txn_batch(pid, e0 + 2, 0, 2)),
        0
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0 + 2, true);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 3));
}

#[test]
fn transaction_version_0_advertises_the_kip_98_versions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &["--transaction-version", "0"]);
    let mut c = broker.connect();
    let versions = api_versions(&mut c);
    assert_eq!(transaction_version(&versions), None);
    assert_eq!(max_version(&versions, ApiKey::EndTxn), 4);
    assert_eq!(max_version(&versions, ApiKey::Produce), 11);
    assert_eq!(max_version(&versions, ApiKey::TxnOffsetCommit), 4);
}

#[test]
fn versions_before_kip_588_get_invalid_producer_epoch_for_a_fenced_producer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c);
    let (pid, e0) = init(&mut c, "kip588");
    let (pid1, e1) = init(&mut c, "kip588");
    assert_eq!(
        (pid1, e1),
        (pid, e0 + 1),
        "the second producer fences the first"
    );
    let fenced = ResponseError::ProducerFenced.code();
    let old_code = ResponseError::InvalidProducerEpoch.code();
    // EndTxn and AddPartitionsToTxn: v0/v1 predate PRODUCER_FENCED, v2+ get it.
    assert_eq!(
        end_txn(&mut c, 1, "kip588", pid, e0, true).error_code,
        old_code
    );
    assert_eq!(
        end_txn(&mut c, 3, "kip588", pid, e0, true).error_code,
        fenced
    );
    assert_eq!(add_partition_v(&mut c, 1, "kip588", pid, e0, 0), old_code);
    assert_eq!(add_partition_v(&mut c, 2, "kip588", pid, e0, 0), fenced);
}

//! The real `streamforge broker` binary refuses batches whose header and CRC are fine but whose
//! records are not (issue D3): each gets Kafka's error code with `record_errors` and an
//! `error_message`, nothing is appended (the log end offset stays put), and a normal producer
//! is served afterwards.

mod support;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use streamforge_protocol::decompress::{CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD};
use streamforge_protocol::malformed;
use support::{BrokerProc, Conn, batch};

const TOPIC: &str = "validated";
const COMPACTED: &str = "validated-compacted";
/// Holds a 1 GiB gzip bomb (~1.08 MB compressed).
const MAX_MESSAGE_BYTES: &str = "2097152";

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut Conn, topic: &str, configs: &[(&str, &str)]) {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = 1;
    t.replication_factor = 1;
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k.to_string());
            c.value = Some(StrBytes::from_string(v.to_string()));
            c
        })
        .collect();
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0, "create {topic}");
}

fn produce(c: &mut Conn, version: i16, topic: &str, records: Vec<u8>) -> PartitionProduceResponse {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(records));
    let mut t = TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, version, &req);
    r.responses[0].partition_responses[0].clone()
}

fn log_end_offset(c: &mut Conn, topic: &str) -> i64 {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -1; // latest
    let mut t = ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// Produce a good batch of 3 records with `compression`; returns its base offset.
fn produce_good(c: &mut Conn, topic: &str, compression: Compression) -> i64 {
    let records: Vec<(String, String)> =
        (0..3).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let r = produce(c, 9, topic, batch(&records, compression).to_vec());
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.base_offset
}

/// (what, batch, error code, index of the record named in `record_errors`).
fn bad_batches() -> Vec<(String, Vec<u8>, i16, i32)> {
    // Where random bytes first fail depends on the bytes: ask the validator itself.
    let random = malformed::random_records(0, 500, 3);
    let view = streamforge_protocol::batch::RecordBatch::parse(&random).unwrap();
    let random_index =
        streamforge_protocol::validate::validate_batch(&view, Default::default(), &mut Vec::new())
            .unwrap_err()
            .record_index
            .unwrap();
    let mut cases = vec![
        (
            "count below records".into(),
            malformed::count_below_records(),
            87,
            2,
        ),
        (
            "count above records".into(),
            malformed::count_above_records(),
            87,
            3,
        ),
        (
            "lastOffsetDelta mismatch".into(),
            malformed::last_offset_delta_mismatch(),
            87,
            2,
        ),
        (
            "one record claiming 2^31-1".into(),
            malformed::claims_max_records(),
            87,
            1,
        ),
        (
            "random bytes as records".into(),
            random.clone(),
            87,
            random_index,
        ),
        (
            "1 GiB gzip bomb".into(),
            malformed::gzip_bomb(1 << 30),
            87,
            0,
        ),
        (
            "zstd ratio bomb".into(),
            malformed::zstd_ratio_bomb(9 << 20),
            87,
            0,
        ),
    ];
    for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
        let label = format!("codec {codec} over garbage");
        cases.push((label, malformed::random_records(codec, 500, 5), 2, 0));
    }
    cases
}

#[test]
fn batches_with_bad_records_are_refused_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, TOPIC, &[("max.message.bytes", MAX_MESSAGE_BYTES)]);
    assert_eq!(produce_good(&mut c, TOPIC, Compression::None), 0);
    let end = log_end_offset(&mut c, TOPIC);
    assert_eq!(end, 3);
    for (what, bytes, code, index) in bad_batches() {
        let r = produce(&mut c, 9, TOPIC, bytes);
        assert_eq!(r.error_code, code, "{what}: {:?}", r.error_message);
        let message = r.error_message.as_deref().unwrap_or_default().to_string();
        assert!(!message.is_empty(), "{what}: error_message");
        assert_eq!(r.record_errors.len(), 1, "{what}: record_errors");
        assert_eq!(r.record_errors[0].batch_index, index, "{what}: {message}");
        assert!(r.record_errors[0].batch_index_error_message.is_some());
        assert_eq!(r.base_offset, -1, "{what}");
        assert_eq!(
            log_end_offset(&mut c, TOPIC),
            end,
            "{what}: nothing appended"
        );
    }
    // Produce v7 has no record_errors field: the same refusal still encodes.
    let r = produce(&mut c, 7, TOPIC, malformed::claims_max_records());
    assert_eq!(r.error_code, 87);
    assert!(b.is_running(), "broker died:\n{}", b.log());
    // A normal producer, on the same connection and a new one, with every codec.
    let mut fresh = b.connect();
    let mut next = end;
    for compression in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        assert_eq!(produce_good(&mut c, TOPIC, compression), next);
        assert_eq!(produce_good(&mut fresh, TOPIC, compression), next + 3);
        next += 6;
    }
    assert_eq!(log_end_offset(&mut fresh, TOPIC), next);
}

#[test]
fn compacted_topics_refuse_keyless_records_even_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, COMPACTED, &[("cleanup.policy", "compact")]);
    for codec in [0, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
        let r = produce(&mut c, 9, COMPACTED, malformed::good(codec, 3, 10));
        assert_eq!(r.error_code, 87, "codec {codec}: {:?}", r.error_message);
        assert_eq!(r.record_errors.len(), 1);
        assert_eq!(r.record_errors[0].batch_index, 0);
        assert_eq!(log_end_offset(&mut c, COMPACTED), 0);
    }
    assert_eq!(produce_good(&mut c, COMPACTED, Compression::Zstd), 0);
}

//! The real `streamforge broker` binary over raw sockets: APIs, pipelining, long polls, every
//! bad-input case from issue 3 (each followed by a healthy client), and restarts.

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use support::{BrokerProc, Conn, WAIT_MAX, batch, batch_at, now_ms};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A normal client still works: ApiVersions and Metadata on a new connection.
fn assert_healthy(b: &mut BrokerProc) {
    assert!(b.is_running(), "broker died:\n{}", b.log());
    let mut c = b.connect();
    let mut req = ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("wire-test");
    req.client_software_version = StrBytes::from_static_str("1");
    let r: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &req);
    assert_eq!(r.error_code, 0);
    let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &MetadataRequest::default());
    assert_eq!(m.brokers.len(), 1);
}

fn create_topic(
    c: &mut Conn,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreateTopicsResponse {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
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
    c.call(ApiKey::CreateTopics, 7, &req)
}

fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = acks;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    req
}

fn produce(c: &mut Conn, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    let r: ProduceResponse = c.call(
        ApiKey::Produce,
        9,
        &produce_request(topic, partition, records, -1),
    );
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch_request(topic: &str, partition: i32, offset: i64, max_wait_ms: i32) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 50 << 20;
    req.topics = vec![t];
    req
}

/// Fetch and decode all records: (offset, key, value).
fn fetch_records(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (i16, i64, Vec<(i64, String, String)>) {
    let r: FetchResponse = c.call(
        ApiKey::Fetch,
        12,
        &fetch_request(topic, partition, offset, 0),
    );
    let p = &r.responses[0].partitions[0];
    let mut out = Vec::new();
    if let Some(mut records) = p.records.clone() {
        while !records.is_empty() {
            let set = RecordBatchDecoder::decode(&mut records).unwrap();
            for rec in set.records {
                let k = String::from_utf8(rec.key.unwrap().to_vec()).unwrap();
                let v = String::from_utf8(rec.value.unwrap().to_vec()).unwrap();
                out.push((rec.offset, k, v));
            }
        }
    }
    (p.error_code, p.high_watermark, out)
}

fn kv(prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{i}"), format!("{prefix}-{i}")))
        .collect()
}

fn list_offset(c: &mut Conn, topic: &str, partition: i32, timestamp: i64) -> (i16, i64) {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    let mut t = ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

#[test]
fn api_versions_advertises_routes_and_answers_newer_versions_in_v0() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    let r: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default());
    let produce = r.api_keys.iter().find(|k| k.api_key == 0).unwrap();
    assert_eq!((produce.min_version, produce.max_version), (0, 12));
    // A version we do not know: v0 body, UNSUPPORTED_VERSION, our ApiVersions range.
    let id = c.send(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default());
    let raw = {
        let mut frame = c
            .frame(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default())
            .1
            .to_vec();
        frame[6..8].copy_from_slice(&77i16.to_be_bytes()); // api_version = 77
        frame
    };
    let _: ApiVersionsResponse = c.recv(ApiKey::ApiVersions, 4, id);
    c.send_raw(&raw).unwrap();
    let (_, mut body) = c.recv_frame(ApiKey::ApiVersions, 0).unwrap();
    let v0 =
        <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 0).unwrap();
    assert_eq!(v0.error_code, 35);
    assert_eq!(v0.api_keys.len(), 1);
    assert_eq!(
        (v0.api_keys[0].min_version, v0.api_keys[0].max_version),
        (0, 4)
    );
    assert_healthy(&mut b);
}

#[test]
fn produce_fetch_and_list_offsets_round_trip_with_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "rt", 2, &[]).topics[0].error_code, 0);
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut expected = Vec::new();
    let base_ts = now_ms() - 60_000;
    for (i, codec) in codecs.iter().enumerate() {
        let records = kv(&format!("c{i}"), 10);
        let (err, base) = produce(
            &mut c,
            "rt",
            1,
            batch_at(&records, *codec, base_ts + 100 * i as i64),
        );
        assert_eq!(err, 0);
        assert_eq!(base, (i * 10) as i64);
        for (j, (k, v)) in records.into_iter().enumerate() {
            expected.push(((i * 10 + j) as i64, k, v));
        }
    }
    let (err, hw, got) = fetch_records(&mut c, "rt", 1, 0);
    assert_eq!((err, hw), (0, 50));
    assert_eq!(got, expected);
    // Mid-batch offset: the whole containing batch comes back.
    let (_, _, got) = fetch_records(&mut c, "rt", 1, 15);
    assert_eq!(got.first().unwrap().0, 10);
    // Out of range.
    let (err, _, _) = fetch_records(&mut c, "rt", 1, 51);
    assert_eq!(err, 1);
    assert_eq!(list_offset(&mut c, "rt", 1, -1), (0, 50));
    assert_eq!(list_offset(&mut c, "rt", 1, -2), (0, 0));
    // First record whose timestamp is >= the target (records are stamped base + index).
    assert_eq!(list_offset(&mut c, "rt", 1, base_ts + 5), (0, 5));
    assert_eq!(list_offset(&mut c, "rt", 1, now_ms() + 60_000), (0, -1));
    assert_eq!(list_offset(&mut c, "rt", 0, -1), (0, 0));
    assert_eq!(list_offset(&mut c, "nope", 0, -1).0, 3);
}

#[test]
fn fetch_long_poll_returns_when_data_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, "lp", 1, &[]);
    let id = c.send(ApiKey::Fetch, 12, &fetch_request("lp", 0, 0, 10_000));
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut other = b.connect();
    assert_eq!(
        produce(&mut other, "lp", 0, batch(&kv("x", 3), Compression::None)).0,
        0
    );
    let r: FetchResponse = c.recv(ApiKey::Fetch, 12, id);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "long poll did not wake up"
    );
    assert!(
        r.responses[0].partitions[0]
            .records
            .as_ref()
            .is_some_and(|r| !r.is_empty())
    );
    // With nothing to read, max_wait_ms is honoured.
    let started = Instant::now();
    let _: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_request("lp", 0, 3, 400));
    assert!(started.elapsed() >= Duration::from_millis(350));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, "pipe", 1, &[]);
    let mut all = BytesMut::new();
    let mut ids = Vec::new();
    for i in 0..200 {
        // Interleave slow (long poll at the end) and fast requests.
        let (id, frame) = if i == 3 {
            c.frame(ApiKey::Fetch, 12, &fetch_request("pipe", 0, 0, 300))
        } else if i % 2 == 0 {
            c.frame(
                ApiKey::Produce,
                9,
                &produce_request("pipe", 0, batch(&kv("p", 2), Compression::None), 1),
            )
        } else {
            c.frame(ApiKey::Metadata, 12, &MetadataRequest::default())
        };
        ids.push((id, i));
        all.put_slice(&frame);
    }
    c.stream.write_all(&all).unwrap();
    let mut last_base = -1;
    for (id, i) in ids {
        let key = if i == 3 {
            ApiKey::Fetch
        } else if i % 2 == 0 {
            ApiKey::Produce
        } else {
            ApiKey::Metadata
        };
        let (got, mut body) = c
            .recv_frame(key, if key == ApiKey::Produce { 9 } else { 12 })
            .unwrap();
        assert_eq!(got, id, "response {i} out of order");
        if key == ApiKey::Produce {
            // Appends happen in request order: base offsets grow with the request sequence.
            let r = <ProduceResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 9)
                .unwrap();
            let base = r.responses[0].partition_responses[0].base_offset;
            assert!(
                base > last_base,
                "request {i} appended at {base}, before {last_base}"
            );
            last_base = base;
        }
    }
}

/// Raw bytes that must make the broker close that one connection (and nothing else).
fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn bad_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut unknown_key = BytesMut::new();
    unknown_key.put_i32(10);
    unknown_key.put_i16(9999);
    unknown_key.put_i16(0);
    unknown_key.put_i32(1);
    unknown_key.put_i16(-1);
    let mut bad_version = BytesMut::new();
    bad_version.put_i32(10);
    bad_version.put_i16(3); // Metadata
    bad_version.put_i16(99);
    bad_version.put_i32(2);
    bad_version.put_i16(-1);
    let mut absurd_count = BytesMut::new();
    absurd_count.put_i32(14);
    absurd_count.put_i16(3); // Metadata v1, topics array of i32::MAX entries
    absurd_count.put_i16(1);
    absurd_count.put_i32(3);
    absurd_count.put_i16(-1);
    absurd_count.put_i32(i32::MAX);
    let mut absurd_compact = BytesMut::new();
    absurd_compact.put_i32(16);
    absurd_compact.put_i16(3); // Metadata v12 (flexible), compact array of u32::MAX entries
    absurd_compact.put_i16(12);
    absurd_compact.put_i32(4);
    absurd_compact.put_i16(-1);
    absurd_compact.put_u8(0); // header tagged fields
    absurd_compact.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    // Found by the fuzzer: kafka-protocol stops a varint after five bytes even if the fifth
    // says "more", so this count (~2^32) once slipped past the guard and aborted the broker.
    let mut absurd_compact_5 = BytesMut::new();
    absurd_compact_5.put_i32(16);
    absurd_compact_5.put_i16(3); // Metadata v12 (flexible)
    absurd_compact_5.put_i16(12);
    absurd_compact_5.put_i32(5);
    absurd_compact_5.put_i16(-1);
    absurd_compact_5.put_u8(0); // header tagged fields
    absurd_compact_5.put_slice(&[0xff, 0xff, 0xff, 0xff, 0xff]);
    // Found by the fuzzer: an assignments count of 0x41000000 whose 0/1 replacements consume the
    // same bytes (two empty configs vs one assignment), once a 61 GB allocation.
    let compensated = hex_bytes(
        "0000000100000000000000004100000000000002000000000000000000000000000200000000000000000000010001150000003f0e",
    );
    let mut absurd_compensated = BytesMut::new();
    absurd_compensated.put_i32(10 + compensated.len() as i32);
    absurd_compensated.put_i16(19); // CreateTopics v3
    absurd_compensated.put_i16(3);
    absurd_compensated.put_i32(6);
    absurd_compensated.put_i16(-1);
    absurd_compensated.put_slice(&compensated);
    // Found by the fuzzer: broker id counts hidden among runs of int32s (runs with 0 and 1 read
    // alike), once a 4 GB allocation.
    let aliased = hex_bytes(
        "0000000200000300220100000000000000000000000000000000000000000008000000000000000000000000401a000000230000000000000000000000000000000000000000000000000000000000010000000000003900000000130003fffffa13000000000000000200000300220100000000000000000000000000000000000000000008000000000000000000000000000000000000000000000000002300000000000000000000000000000000000000000000000000000000000000000000ffff077200",
    );
    let mut absurd_aliased = BytesMut::new();
    absurd_aliased.put_i32(10 + aliased.len() as i32);
    absurd_aliased.put_i16(19); // CreateTopics v4
    absurd_aliased.put_i16(4);
    absurd_aliased.put_i32(7);
    absurd_aliased.put_i16(-1);
    absurd_aliased.put_slice(&aliased);
    let mut short_header = BytesMut::new();
    short_header.put_i32(3);
    short_header.put_slice(&[0, 3, 0]);
    let mut bad_client_id = BytesMut::new();
    bad_client_id.put_i32(10);
    bad_client_id.put_i16(18);
    bad_client_id.put_i16(0);
    bad_client_id.put_i32(5);
    bad_client_id.put_i16(500); // client id longer than the frame
    vec![
        (
            "over socket.request.max.bytes",
            (200 * 1024 * 1024i32).to_be_bytes().to_vec(),
        ),
        ("negative size", (-5i32).to_be_bytes().to_vec()),
        ("zero size", 0i32.to_be_bytes().to_vec()),
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("unknown api key", unknown_key.to_vec()),
        ("unsupported version", bad_version.to_vec()),
        ("absurd classic array count", absurd_count.to_vec()),
        ("absurd compact array count", absurd_compact.to_vec()),
        (
            "absurd compact count, continued fifth byte",
            absurd_compact_5.to_vec(),
        ),
        ("header shorter than 8 bytes", short_header.to_vec()),
        ("client id past the end", bad_client_id.to_vec()),
    ]
}

#[test]
fn every_bad_input_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("d"), &[]);
    // A client that stays connected throughout must keep working.
    let mut bystander = b.connect();
    create_topic(&mut bystander, "keep", 1, &[]);
    for (case, bytes) in bad_frames() {
        let mut c = b.connect();
        c.send_raw(&bytes).unwrap();
        assert!(c.closed_by_peer(), "{case}: connection not closed");
        assert_healthy(&mut b);
        assert_eq!(
            produce(
                &mut bystander,
                "keep",
                0,
                batch(&kv(case, 1), Compression::None)
            )
            .0,
            0,
            "{case}"
        );
    }
    // Truncated frame: the client announces 100 bytes, sends 10 and hangs up.
    let mut c = b.connect();
    let mut frame = 100i32.to_be_bytes().to_vec();
    frame.extend_from_slice(&[0, 18, 0, 3, 0, 0, 0, 1, 0, 0]);
    c.send_raw(&frame).unwrap();
    drop(c);
    assert_healthy(&mut b);
    let log = b.log();
    assert!(
        log.contains("closing connection"),
        "bad input is logged:\n{log}"
    );
}

#[test]
fn bad_crc_and_oversized_batches_get_kafka_error_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, "crc", 1, &[("max.message.bytes", "2000")]);
    let mut corrupt = batch(&kv("crc", 5), Compression::None).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(
        produce(&mut c, "crc", 0, Bytes::from(corrupt)).0,
        2,
        "CORRUPT_MESSAGE"
    );
    let big = vec![(String::from("k"), "x".repeat(5000))];
    assert_eq!(
        produce(&mut c, "crc", 0, batch(&big, Compression::None)).0,
        10,
        "MESSAGE_TOO_LARGE"
    );
    assert_eq!(
        produce(&mut c, "crc", 0, Bytes::from_static(b"short")).0,
        87,
        "INVALID_RECORD"
    );
    assert_eq!(
        produce(&mut c, "nope", 0, batch(&kv("a", 1), Compression::None)).0,
        3
    );
    // Clients may not write the broker's internal topics.
    assert_eq!(
        produce(
            &mut c,
            "__consumer_offsets",
            0,
            batch(&kv("a", 1), Compression::None)
        )
        .0,
        17
    );
    // Nothing was stored by the rejected batches.
    assert_eq!(
        produce(&mut c, "crc", 0, batch(&kv("ok", 1), Compression::None)),
        (0, 0)
    );
    assert_healthy(&mut b);
}

#[test]
fn slow_and_idle_clients_are_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(
        &dir.path().join("d"),
        &[
            "--connections-max-idle-ms",
            "1500",
            "--request-read-timeout-ms",
            "500",
        ],
    );
    // Starts a frame and never finishes it.
    let mut slow = b.connect();
    slow.send_raw(&[0, 0, 0, 50, 0, 18]).unwrap();
    let started = Instant::now();
    assert!(slow.closed_by_peer());
    assert!(started.elapsed() < Duration::from_secs(5));
    // Sends nothing at all.
    let mut idle = b.connect();
    let started = Instant::now();
    assert!(idle.closed_by_peer());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    assert_healthy(&mut b);
}

#[test]
fn connections_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("d"), &["--max-connections", "3"]);
    // Take the 3 slots; the start-up probe connection may hold one for a moment.
    let mut held: Vec<Conn> = Vec::new();
    let deadline = Instant::now() + WAIT_MAX;
    while held.len() < 3 {
        let mut c = b.connect();
        let id = c.send(ApiKey::Metadata, 12, &MetadataRequest::default());
        if c.recv_frame(ApiKey::Metadata, 12)
            .is_ok_and(|(got, _)| got == id)
        {
            held.push(c);
        } else {
            assert!(Instant::now() < deadline, "could not open 3 connections");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let mut extra = b.connect();
    assert!(extra.closed_by_peer());
    drop(held);
    // Slots free up once the held connections close.
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let mut c = b.connect();
        let id = c.send(ApiKey::Metadata, 12, &MetadataRequest::default());
        if c.recv_frame(ApiKey::Metadata, 12)
            .is_ok_and(|(got, _)| got == id)
        {
            break;
        }
        assert!(Instant::now() < deadline, "connection slots never freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(b.is_running());
}

#[test]
fn create_topics_reports_kafka_error_codes() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &["--num-partitions", "4"]);
    let mut c = b.connect();
    let r = create_topic(&mut c, "t", -1, &[("retention.ms", "1000")]);
    assert_eq!((r.topics[0].error_code, r.topics[0].num_partitions), (0, 4));
    assert_eq!(create_topic(&mut c, "t", 1, &[]).topics[0].error_code, 36);
    assert_eq!(
        create_topic(&mut c, "bad/name", 1, &[]).topics[0].error_code,
        17
    );
    assert_eq!(create_topic(&mut c, "t2", 0, &[]).topics[0].error_code, 37);
    assert_eq!(
        create_topic(&mut c, "t3", 1, &[("retention.ms", "soon")]).topics[0].error_code,
        40
    );
    assert_eq!(
        create_topic(&mut c, "t4", 1, &[("no.such", "1")]).topics[0].error_code,
        40
    );
    let mut t = CreatableTopic::default();
    t.name = name("t5");
    t.num_partitions = 1;
    t.replication_factor = 3;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 38);
    // validate_only creates nothing.
    let mut t = CreatableTopic::default();
    t.name = name("t6");
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.validate_only = true;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0);
    let mut m = MetadataRequest::default();
    let mut mt = MetadataRequestTopic::default();
    mt.name = Some(name("t6"));
    m.topics = Some(vec![mt]);
    m.allow_auto_topic_creation = false;
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &m);
    assert_eq!(r.topics[0].error_code, 3);
}

fn restart_keeps_acknowledged_data(kill: bool) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut b = BrokerProc::start(&data, &[]);
    let mut c = b.connect();
    create_topic(&mut c, "durable", 2, &[]);
    let all_topics = {
        let mut m = MetadataRequest::default();
        m.topics = None;
        m
    };
    let topic_id = {
        let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &all_topics);
        r.topics[0].topic_id
    };
    let mut acked = Vec::new();
    for i in 0..20 {
        let records = kv(&format!("r{i}"), 5);
        let (err, base) = produce(&mut c, "durable", i % 2, batch(&records, Compression::Lz4));
        assert_eq!(err, 0);
        acked.push((i % 2, base, records));
    }
    if kill {
        b.kill();
    } else {
        b.terminate();
        assert!(b.log().contains("broker stopped"));
    }
    let b2 = BrokerProc::start(&data, &[]);
    let mut c = b2.connect();
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &all_topics);
    assert_eq!(r.topics[0].topic_id, topic_id, "topic id survives restarts");
    for p in 0..2 {
        let (err, hw, got) = fetch_records(&mut c, "durable", p, 0);
        assert_eq!((err, hw), (0, 50), "{}", b2.log());
        let want: Vec<(i64, String, String)> = acked
            .iter()
            .filter(|(pp, _, _)| *pp == p)
            .flat_map(|(_, base, recs)| {
                recs.iter()
                    .enumerate()
                    .map(move |(j, (k, v))| (base + j as i64, k.clone(), v.clone()))
            })
            .collect();
        assert_eq!(got, want);
        // Offsets continue after the restart.
        assert_eq!(
            produce(
                &mut c,
                "durable",
                p,
                batch(&kv("after", 1), Compression::None)
            ),
            (0, 50)
        );
    }
}

#[test]
fn restart_after_sigterm_keeps_acknowledged_data() {
    restart_keeps_acknowledged_data(false);
}

#[test]
fn restart_after_sigkill_keeps_acknowledged_data() {
    restart_keeps_acknowledged_data(true);
}

#[test]
fn wait_bound_is_sane() {
    assert!(WAIT_MAX >= Duration::from_secs(5));
}

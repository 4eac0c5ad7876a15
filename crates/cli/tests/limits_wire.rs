//! The broker's resource limits, through the real binary over raw sockets: Fetch response caps
//! and duplicate partitions, the partition limit, all-or-nothing topic creation, the per-request
//! auto-create cap, topic name collisions, ApiVersions validation, the topic metadata journal
//! (and the previous release's `topics.json`), and the storage-error counter.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use support::{Conn, WAIT_MAX, batch};

/// The broker under test: `STREAMFORGE_BIN` if set (to run these tests against another
/// build), else this package's binary.
fn binary() -> std::path::PathBuf {
    std::env::var_os("STREAMFORGE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_streamforge").into())
}

fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A broker child process (killed by pid on drop), started through `sh` so a test can set
/// resource limits first (`shell_prefix`, e.g. `ulimit -n 400 &&`).
struct Broker {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    log_path: std::path::PathBuf,
}

impl Broker {
    fn start(data: &std::path::Path, extra: &[&str]) -> Broker {
        Broker::start_with(data, "", extra)
    }

    fn start_with(data: &std::path::Path, shell_prefix: &str, extra: &[&str]) -> Broker {
        let addr = free_addr();
        let log_path = data.with_extension(format!("{}.log", addr.port()));
        let log = std::fs::File::create(&log_path).unwrap();
        let http_off: &[&str] = if extra.contains(&"--http-listen") {
            &[]
        } else {
            &["--http-listen", "off"]
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{shell_prefix} exec \"$0\" \"$@\""))
            .arg(binary())
            .args(["broker", "--listen", &addr.to_string(), "--data-dir"])
            .arg(data)
            .args(http_off)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let b = Broker {
            child,
            addr,
            log_path,
        };
        let deadline = Instant::now() + WAIT_MAX;
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "broker did not start:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(
    c: &mut Conn,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> (i16, Option<String>) {
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
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    let t = &r.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

fn create_partitions(c: &mut Conn, topic: &str, count: i32) -> (i16, Option<String>) {
    let mut t = CreatePartitionsTopic::default();
    t.name = name(topic);
    t.count = count;
    t.assignments = None;
    let mut req = CreatePartitionsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreatePartitionsResponse = c.call(ApiKey::CreatePartitions, 3, &req);
    let t = &r.results[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// Metadata v12 for `topics`, auto-creating: (name, error code, partitions) per topic.
fn metadata(c: &mut Conn, topics: &[String]) -> Vec<(String, i16, usize)> {
    let mut m = MetadataRequest::default();
    m.topics = Some(
        topics
            .iter()
            .map(|t| {
                let mut mt = MetadataRequestTopic::default();
                mt.name = Some(name(t));
                mt
            })
            .collect(),
    );
    m.allow_auto_topic_creation = true;
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &m);
    r.topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
                t.partitions.len(),
            )
        })
        .collect()
}

fn produce(c: &mut Conn, topic: &str, partition: i32, records: Bytes) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req);
    r.responses[0].partition_responses[0].error_code
}

/// Partition directories of `topic` in the data dir.
fn partition_dirs(data_dir: &std::path::Path, topic: &str) -> usize {
    let prefix = format!("{topic}-");
    std::fs::read_dir(data_dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.strip_prefix(&prefix)
                        .is_some_and(|rest| rest.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}

/// One Fetch naming `topic`-0 `copies` times with the largest max_bytes: the response frame's
/// length and decoded body.
fn fetch_duplicated(
    c: &mut Conn,
    topic: &str,
    copies: usize,
    replica_id: i32,
) -> (usize, FetchResponse) {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = i32::MAX;
    let mut t = FetchTopic::default();
    t.topic = name(topic);
    t.partitions = (0..copies).map(|_| p.clone()).collect();
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(replica_id);
    req.max_wait_ms = 0;
    req.min_bytes = 1;
    req.max_bytes = i32::MAX;
    req.topics = vec![t.clone(), t];
    let id = c.send(ApiKey::Fetch, 12, &req);
    let (got, mut body) = c.recv_frame(ApiKey::Fetch, 12).expect("fetch response");
    assert_eq!(got, id);
    let len = body.len();
    let r = <FetchResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 12).unwrap();
    (len, r)
}

/// D7: `fetch.max.bytes` caps a consumer's response whatever its max_bytes, the replica
/// settings cap a follower's, and a partition named 8,600 times is answered once.
#[test]
fn fetch_responses_are_capped_and_name_each_partition_once() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "big", 1, &[]).0, 0);
    // 40 batches of about 20 KB: 800 KB in the partition.
    let value = "v".repeat(1000);
    for i in 0..40 {
        let recs: Vec<(String, String)> = (0..20)
            .map(|j| (format!("{i}-{j}"), value.clone()))
            .collect();
        assert_eq!(
            produce(&mut c, "big", 0, batch(&recs, Compression::None)),
            0
        );
    }
    // Default settings: a partition named 200 times is read once (it was 200 copies of the
    // partition, 160 MB; 8,600 copies overflowed the i32 length).
    let (_, r) = fetch_duplicated(&mut c, "big", 100, -1);
    assert_eq!(r.responses.len(), 1, "one topic entry");
    assert_eq!(r.responses[0].partitions.len(), 1, "one partition entry");
    let records = r.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    assert!(
        records.len() > 800_000 && records.len() < 900_000,
        "{}",
        records.len()
    );
    drop(c);
    drop(b);
    let b = Broker::start(
        &dir.path().join("d"),
        &[
            "--fetch-max-bytes",
            "300000",
            "--replica-fetch-max-bytes",
            "100000",
            "--replica-fetch-response-max-bytes",
            "200000",
        ],
    );
    let mut c = b.connect();
    // 2 topic entries x 4,300 copies of partition 0 (a 280 KB request).
    let (len, r) = fetch_duplicated(&mut c, "big", 4300, -1);
    assert_eq!(r.responses.len(), 1, "one topic entry");
    assert_eq!(r.responses[0].partitions.len(), 1, "one partition entry");
    let records = r.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    assert!(records.len() > 100_000, "{} record bytes", records.len());
    assert!(
        records.len() <= 300_000,
        "{} record bytes over fetch.max.bytes",
        records.len()
    );
    assert!(len < 300_000 + 1024, "response of {len} bytes");
    // A fetch naming a replica id that is not a replica of the partition: Kafka's leader
    // answers NOT_LEADER_OR_FOLLOWER ("Received fetch request from non-replica"), no records.
    // (The replica caps apply to real followers: crates/broker/tests/replication.rs.)
    let (_, r) = fetch_duplicated(&mut c, "big", 10, 2);
    let p = &r.responses[0].partitions[0];
    assert_eq!(
        p.error_code,
        kafka_protocol::ResponseError::NotLeaderOrFollower.code()
    );
    assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));
    // A cap below one batch still returns the first batch (Kafka's min-one-message rule).
    drop(c);
    drop(b);
    let b = Broker::start(&dir.path().join("d"), &["--fetch-max-bytes", "1000"]);
    let mut c = b.connect();
    let (_, r) = fetch_duplicated(&mut c, "big", 2, -1);
    let records = r.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    assert!(
        records.len() > 1000 && records.len() < 25_000,
        "{}",
        records.len()
    );
}

/// D4: a frame of several MiB, reserved chunk by chunk as it arrives, is read whole.
#[test]
fn multi_mebibyte_frames_are_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "wide", 4, &[]).0, 0);
    // 4 batches of about 900 KB in one 3.6 MB Produce frame.
    let value = "x".repeat(9000);
    let mut t = TopicProduceData::default();
    t.name = name("wide");
    for partition in 0..4 {
        let recs: Vec<(String, String)> =
            (0..100).map(|i| (format!("{i}"), value.clone())).collect();
        let mut p = PartitionProduceData::default();
        p.index = partition;
        p.records = Some(batch(&recs, Compression::None));
        t.partition_data.push(p);
    }
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let (id, frame) = c.frame(ApiKey::Produce, 9, &req);
    assert!(frame.len() > 3_500_000, "{}", frame.len());
    // In pieces, with pauses, as a slow network would deliver it.
    for piece in frame.chunks(700_000) {
        c.send_raw(piece).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let r: ProduceResponse = c.recv(ApiKey::Produce, 9, id);
    let codes: Vec<i16> = r.responses[0]
        .partition_responses
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes, [0, 0, 0, 0]);
}

/// D8: `--max-partitions` refuses CreateTopics, CreatePartitions and auto-creation past it,
/// with INVALID_PARTITIONS and a message (auto-creation: UNKNOWN_TOPIC_OR_PARTITION), and the
/// refused topics leave nothing on disk.
#[test]
fn the_partition_limit_refuses_creations_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    // `__consumer_offsets` (created at start-up) takes 1 of the 12.
    let b = Broker::start(
        &data,
        &["--max-partitions", "12", "--offsets-topic-partitions", "1"],
    );
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "eight", 8, &[]).0, 0);
    let (code, msg) = create_topic(&mut c, "five", 5, &[]);
    assert_eq!(code, 37, "{msg:?}");
    assert!(msg.unwrap().contains("limit of 12 partitions"));
    assert_eq!(partition_dirs(&data, "five"), 0);
    let (code, msg) = create_partitions(&mut c, "eight", 12);
    assert_eq!(code, 37, "{msg:?}");
    assert_eq!(create_partitions(&mut c, "eight", 9).0, 0);
    let md = metadata(&mut c, &["auto1".into(), "auto2".into(), "auto3".into()]);
    assert_eq!((md[0].1, md[1].1, md[2].1), (0, 0, 3), "{md:?}");
    assert_eq!(partition_dirs(&data, "auto3"), 0);
}

/// D8: a creation that fails half-way (EMFILE under a low fd limit) removes every partition
/// directory it made, answers KAFKA_STORAGE_ERROR with a message, and the broker goes on.
#[test]
fn a_failed_creation_leaves_no_partitions_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let b = Broker::start_with(&data, "ulimit -n 400 &&", &["--max-partitions", "100000"]);
    let mut c = b.connect();
    // 4 descriptors per partition: 200 partitions need 800 of the 400.
    let (code, msg) = create_topic(&mut c, "huge", 200, &[]);
    assert_eq!(code, 56, "{msg:?}");
    assert!(msg.unwrap().contains("none were created"));
    assert_eq!(
        partition_dirs(&data, "huge"),
        0,
        "partition dirs left behind"
    );
    assert_eq!(create_topic(&mut c, "small", 3, &[]).0, 0);
    assert_eq!(
        produce(
            &mut c,
            "small",
            2,
            batch(&[("k".into(), "v".into())], Compression::None)
        ),
        0
    );
    let md = metadata(&mut c, &["huge".into()]);
    assert_eq!(
        md[0].1, 0,
        "auto-created afterwards with the default 1 partition: {md:?}"
    );
}

/// D8: one Metadata request auto-creates at most 100 topics; the rest are LEADER_NOT_AVAILABLE
/// and the client's retry creates them.
#[test]
fn auto_creation_is_capped_per_metadata_request() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    let names: Vec<String> = (0..150).map(|i| format!("auto-{i:03}")).collect();
    let md = metadata(&mut c, &names);
    let created = md.iter().filter(|t| t.1 == 0).count();
    let pending = md.iter().filter(|t| t.1 == 5).count();
    assert_eq!((created, pending), (100, 50), "{md:?}");
    let md = metadata(&mut c, &names);
    assert!(md.iter().all(|t| t.1 == 0 && t.2 == 1), "{md:?}");
}

/// D10: `a.b` and `a_b` collide (INVALID_TOPIC_EXCEPTION), in CreateTopics and auto-creation.
#[test]
fn colliding_topic_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "a.b", 1, &[]).0, 0);
    let (code, msg) = create_topic(&mut c, "a_b", 1, &[]);
    assert_eq!(code, 17);
    assert!(msg.unwrap().contains("collides with existing topic"));
    let md = metadata(&mut c, &["a_b".into(), "a.b".into()]);
    assert_eq!((md[0].1, md[1].1), (17, 0), "{md:?}");
    assert_eq!(
        create_topic(&mut c, "a.b", 1, &[]).0,
        36,
        "the same name stays TOPIC_ALREADY_EXISTS"
    );
}

/// D10: ApiVersions v3+ with an illegal client software name or version is INVALID_REQUEST
/// (the connection stays open); legal ones get the api list.
#[test]
fn api_versions_checks_the_client_software_fields() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    for (sw, ver, ok) in [
        ("librdkafka", "2.3.0", true),
        ("confluent-kafka-python", "2.3.0-rdkafka-2.3.0", true),
        ("bad name", "1", false),
        ("-x", "1", false),
        ("x", "1.0_", false),
        ("", "", false),
    ] {
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str(sw);
        req.client_software_version = StrBytes::from_static_str(ver);
        let r: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &req);
        if ok {
            assert_eq!(r.error_code, 0, "{sw} {ver}");
            assert!(r.api_keys.len() > 10);
        } else {
            assert_eq!(r.error_code, 42, "{sw:?} {ver:?}");
            assert!(r.api_keys.is_empty());
        }
    }
}

/// The upgrade from a release before the metadata log: its `topics.json`, `topics.journal`
/// (one more topic, one deleted) and producer-id block file are imported into the metadata log
/// once, with every topic id, partition count and config; later changes go to the metadata log
/// only (the old files are not written again), and everything survives a restart.
#[test]
fn an_earlier_releases_topic_registry_is_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    std::fs::create_dir_all(&data).unwrap();
    // As the previous release wrote them.
    let topics_json = r#"{
  "topics": [
    {"name": "legacy", "id": "0123456789abcdef0123456789abcdef", "partitions": 2,
     "configs": {"retention.ms": "3600000"}},
    {"name": "gone", "id": "00000000000000000000000000000abc", "partitions": 1}
  ]
}"#;
    std::fs::write(data.join("topics.json"), topics_json).unwrap();
    std::fs::write(
        data.join("topics.journal"),
        concat!(
            r#"{"put":{"name":"journaled","id":"0000000000000000000000000000def0","partitions":3}}"#,
            "\n",
            r#"{"delete":"gone"}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::write(data.join("producer-id-block"), "5000\n").unwrap();
    let b = Broker::start(&data, &[]);
    let mut c = b.connect();
    let md = metadata(&mut c, &["legacy".into(), "journaled".into()]);
    assert_eq!(md[0], ("legacy".into(), 0, 2));
    assert_eq!(md[1], ("journaled".into(), 0, 3));
    for i in 0..20 {
        assert_eq!(create_topic(&mut c, &format!("new-{i}"), 1, &[]).0, 0);
    }
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = None;
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    assert_eq!(r.error_code, 0);
    assert!(
        r.producer_id.0 >= 5000,
        "no id of an earlier block: {:?}",
        r.producer_id
    );
    assert!(data.join("__cluster_metadata-0").join("log").exists());
    assert!(
        !std::fs::read_to_string(data.join("topics.json"))
            .unwrap()
            .contains("new-0"),
        "the old files are not written after the import"
    );
    drop(c);
    drop(b);
    let b = Broker::start(&data, &[]);
    let mut c = b.connect();
    let mut m = MetadataRequest::default();
    m.topics = None;
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &m);
    assert_eq!(
        r.topics.len(),
        23,
        "20 new, legacy, journaled, __consumer_offsets"
    );
    let gone = r
        .topics
        .iter()
        .filter(|t| t.name.as_ref().unwrap().0.as_str() == "gone");
    assert_eq!(gone.count(), 0, "deleted in the journal");
    let legacy = r
        .topics
        .iter()
        .find(|t| t.name.as_ref().unwrap().0.as_str() == "legacy")
        .unwrap();
    assert_eq!(
        legacy.topic_id.simple().to_string(),
        "0123456789abcdef0123456789abcdef"
    );
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT_MAX)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// D9: appends failing with a storage error are counted in /metrics and logged at warn, once
/// per partition per 10 s. The failure: the partition's directory vanishes under a log that
/// rolls on every append (segment.bytes=14), so the next segment cannot be created.
#[test]
fn storage_errors_are_counted_and_logged_once_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let b = Broker::start(&data, &["--http-listen", &http.to_string()]);
    let mut c = b.connect();
    assert_eq!(
        create_topic(&mut c, "doomed", 1, &[("segment.bytes", "14")]).0,
        0
    );
    let one = || batch(&[("k".into(), "v".into())], Compression::None);
    assert_eq!(produce(&mut c, "doomed", 0, one()), 0);
    std::fs::remove_dir_all(data.join("doomed-0")).unwrap();
    let mut failures = 0;
    for _ in 0..20 {
        let code = produce(&mut c, "doomed", 0, one());
        assert_ne!(code, 0);
        if code == 56 {
            failures += 1;
        }
    }
    assert!(failures > 0, "no KAFKA_STORAGE_ERROR");
    let deadline = Instant::now() + WAIT_MAX;
    let line = loop {
        let metrics = http_get(http, "/metrics");
        if let Some(line) = metrics
            .lines()
            .find(|l| l.starts_with("streamforge_storage_errors_total") && l.contains("doomed"))
        {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no storage error counter:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(count, failures as f64, "{line}");
    let warned = b
        .log()
        .lines()
        .filter(|l| {
            l.contains("WARN")
                && l.contains("append failed with a storage error")
                && l.contains("doomed")
        })
        .count();
    assert_eq!(warned, 1, "{}", b.log());
}

/// `--default-replication-factor` reaches the controller: a topic created without a replication
/// factor gets it, so above the live brokers it is INVALID_REPLICATION_FACTOR (38), while an
/// explicit factor of 1 is placed; Metadata names this broker as the controller and lists the
/// partition's leader, replicas and ISR from the metadata image.
#[test]
fn the_default_replication_factor_is_the_controllers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let b = Broker::start(
        &data,
        &["--default-replication-factor", "2", "--node-id", "7"],
    );
    let mut c = b.connect();
    let mut t = CreatableTopic::default();
    t.name = name("defaulted");
    t.num_partitions = 1;
    t.replication_factor = -1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(
        r.topics[0].error_code, 38,
        "{:?}",
        r.topics[0].error_message
    );
    assert_eq!(create_topic(&mut c, "explicit", 2, &[]).0, 0);
    let mut m = MetadataRequest::default();
    let mut mt = MetadataRequestTopic::default();
    mt.name = Some(name("explicit"));
    m.topics = Some(vec![mt]);
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &m);
    assert_eq!(r.controller_id.0, 7);
    assert_eq!(r.brokers.len(), 1);
    let p = &r.topics[0].partitions[1];
    assert_eq!((p.leader_id.0, p.leader_epoch), (7, 0));
    assert_eq!((p.replica_nodes[0].0, p.isr_nodes[0].0), (7, 7));
}

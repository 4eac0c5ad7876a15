//! The real broker binary over raw sockets: DescribeLogDirs (35) v1–v4 answers the one log dir
//! (the data dir) with each hosted partition's local size, as Kafka does for one log dir.

mod support;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResult;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use support::{BrokerProc, Conn, batch};

const TOPIC: &str = "sized";

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut Conn, partitions: i32) {
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0);
}

fn produce(c: &mut Conn, partition: i32, n: usize) {
    let records: Vec<(String, String)> =
        (0..n).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let mut p = PartitionProduceData::default();
    p.index = partition;
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

fn describe(
    c: &mut Conn,
    version: i16,
    topics: Option<Vec<(&str, Vec<i32>)>>,
) -> DescribeLogDirsResult {
    let mut req = DescribeLogDirsRequest::default();
    req.topics = topics.map(|ts| {
        ts.into_iter()
            .map(|(t, ps)| {
                let mut d = DescribableLogDirTopic::default();
                d.topic = name(t);
                d.partitions = ps;
                d
            })
            .collect()
    });
    let mut r: DescribeLogDirsResponse = c.call(ApiKey::DescribeLogDirs, version, &req);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.results.len(), 1, "one log dir");
    r.results.remove(0)
}

/// `(partition, size)` of `TOPIC` in a result, sorted by partition.
fn sizes(dir: &DescribeLogDirsResult) -> Vec<(i32, i64)> {
    let mut out: Vec<(i32, i64)> = dir
        .topics
        .iter()
        .filter(|t| t.name.as_str() == TOPIC)
        .flat_map(|t| t.partitions.iter())
        .inspect(|p| assert!(p.offset_lag == 0 && !p.is_future_key))
        .map(|p| (p.partition_index, p.partition_size))
        .collect();
    out.sort();
    out
}

#[test]
fn describe_log_dirs_reports_partition_sizes_and_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(&dir.path().join("data"), &[]);
    let mut c = b.connect();
    create_topic(&mut c, 3);
    produce(&mut c, 0, 20);
    produce(&mut c, 2, 5);

    for version in 1..=4 {
        let d = describe(&mut c, version, None);
        assert_eq!(d.error_code, 0);
        let want_dir = std::fs::canonicalize(dir.path().join("data")).unwrap();
        assert_eq!(d.log_dir.as_str(), want_dir.to_str().unwrap());
        let s = sizes(&d);
        assert_eq!(
            s.iter().map(|p| p.0).collect::<Vec<_>>(),
            [0, 1, 2],
            "v{version}"
        );
        assert!(
            s[0].1 > s[2].1 && s[2].1 > 0,
            "20 records > 5 records > 0: {s:?}"
        );
        assert_eq!(s[1].1, 0, "empty partition");
        if version >= 4 {
            assert!(d.total_bytes > 0 && (0..=d.total_bytes).contains(&d.usable_bytes));
        }
    }
    // Only the partitions asked for; an unknown topic or partition is simply absent.
    let d = describe(
        &mut c,
        4,
        Some(vec![(TOPIC, vec![2, 7]), ("nope", vec![0])]),
    );
    assert_eq!(d.topics.len(), 1);
    assert_eq!(sizes(&d).iter().map(|p| p.0).collect::<Vec<_>>(), [2]);
    let d = describe(&mut c, 4, Some(vec![]));
    assert!(d.topics.is_empty());
    // v0 is not served (Kafka 4 removed it): the connection is closed.
    let mut v0 = Vec::new();
    v0.extend_from_slice(&14i32.to_be_bytes()); // size of what follows
    v0.extend_from_slice(&35i16.to_be_bytes()); // api key
    v0.extend_from_slice(&0i16.to_be_bytes()); // version
    v0.extend_from_slice(&9i32.to_be_bytes()); // correlation id
    v0.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    v0.extend_from_slice(&(-1i32).to_be_bytes()); // null topics
    c.send_raw(&v0).unwrap();
    assert!(c.closed_by_peer());
    b.terminate();
}

/// The `topic partition offset` lines of `<data>/replication-offset-checkpoint`.
fn hw_checkpoint(data: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(data.join("replication-offset-checkpoint")).ok()
}

#[test]
fn the_high_watermark_checkpoint_is_written_periodically_and_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flag = ["--replica-high-watermark-checkpoint-interval-ms", "100"];
    let mut b = BrokerProc::start(&data, &flag);
    let mut c = b.connect();
    create_topic(&mut c, 2);
    produce(&mut c, 0, 20);
    // The housekeeping tick (every second) writes it once the interval has passed.
    let t0 = std::time::Instant::now();
    while !hw_checkpoint(&data).is_some_and(|t| t.contains("\nsized 0 20\n")) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "no checkpoint with HW 20: {:?}",
            hw_checkpoint(&data)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let text = hw_checkpoint(&data).unwrap();
    assert!(text.starts_with("0\n"), "version line: {text}");
    assert!(text.contains("\nsized 1 0\n"), "{text}");
    produce(&mut c, 1, 5);
    b.terminate();
    let text = hw_checkpoint(&data).unwrap();
    assert!(
        text.contains("\nsized 0 20\n") && text.contains("\nsized 1 5\n"),
        "{text}"
    );
    let count: usize = text.lines().nth(1).unwrap().parse().unwrap();
    assert_eq!(count, text.lines().count() - 2, "{text}");
    // The broker starts again from it (partitions alone in their ISR keep HW = LEO).
    let b = BrokerProc::start(&data, &flag);
    let mut c = b.connect();
    produce(&mut c, 1, 1);
}

//! The CLI tools end to end against the real broker binary: topics, produce from stdin,
//! consume back, cluster, dump-log, and a small `streamforge bench` whose JSON is checked.
mod client_support;

use std::io::Write;
use std::process::{Command, Stdio};

use client_support::{BrokerProcess, binary};
use serde_json::Value;

fn sf(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run streamforge");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let (success, out, err) = sf(args, stdin);
    assert!(success, "streamforge {args:?} failed:\n{out}\n{err}");
    out
}

#[test]
fn produce_from_stdin_and_consume_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let bs = b.bootstrap();
    let bs = bs.as_str();
    ok(
        &[
            "topics",
            "create",
            "lines",
            "--partitions",
            "3",
            "--config",
            "retention.ms=86400000",
            "--bootstrap",
            bs,
        ],
        None,
    );
    let (dup, _, err) = sf(
        &[
            "topics",
            "create",
            "lines",
            "--partitions",
            "3",
            "--bootstrap",
            bs,
        ],
        None,
    );
    assert!(!dup && err.contains("TopicAlreadyExists"), "{err}");
    let list: Value =
        serde_json::from_str(&ok(&["topics", "list", "--json", "--bootstrap", bs], None)).unwrap();
    assert!(list.as_array().unwrap().iter().any(|t| t == "lines"));
    let desc: Value = serde_json::from_str(&ok(
        &["topics", "describe", "lines", "--json", "--bootstrap", bs],
        None,
    ))
    .unwrap();
    assert_eq!(desc[0]["partitions"].as_array().unwrap().len(), 3);
    assert!(
        desc[0]["configs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "retention.ms" && c["value"] == "86400000")
    );
    let human = ok(&["topics", "describe", "lines", "--bootstrap", bs], None);
    assert!(
        human.contains("PARTITION") && human.contains("retention.ms=86400000"),
        "{human}"
    );

    let input: String = (0..500)
        .map(|i| format!("key{}:value number {i}\n", i % 7))
        .collect();
    let produced: Value = serde_json::from_str(&ok(
        &[
            "produce",
            "lines",
            "--key-separator",
            ":",
            "--header",
            "source=cli",
            "--json",
            "--bootstrap",
            bs,
        ],
        Some(&input),
    ))
    .unwrap();
    assert_eq!(produced["records"], 500);

    let out = ok(
        &[
            "consume",
            "lines",
            "--from",
            "beginning",
            "-n",
            "500",
            "--format",
            "kv",
            "--key-separator",
            ":",
            "--bootstrap",
            bs,
        ],
        None,
    );
    let mut got: Vec<&str> = out.lines().collect();
    let mut want: Vec<&str> = input.lines().collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "consumed lines equal produced lines");

    // JSON format carries partition, offset, timestamp and headers.
    let out = ok(
        &[
            "consume",
            "lines",
            "--from",
            "beginning",
            "-n",
            "5",
            "--partition",
            "0",
            "--json",
            "--bootstrap",
            bs,
        ],
        None,
    );
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["partition"], 0);
        assert_eq!(v["headers"]["source"], "cli");
        assert!(v["timestamp"].as_i64().unwrap() > 0);
    }
    // From an offset.
    let out = ok(
        &[
            "consume",
            "lines",
            "--from",
            "offset:3",
            "--partition",
            "1",
            "-n",
            "1",
            "--json",
            "--bootstrap",
            bs,
        ],
        None,
    );
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["offset"], 3);
    // From the end with an idle timeout: nothing new arrives.
    let out = ok(
        &[
            "consume",
            "lines",
            "--from",
            "end",
            "--idle-timeout-ms",
            "500",
            "--bootstrap",
            bs,
        ],
        None,
    );
    assert!(out.is_empty());

    // A group consumes 200 of the 500 records and commits exactly those: describe shows lag 300.
    ok(
        &[
            "topics",
            "create",
            "glines",
            "--partitions",
            "1",
            "--bootstrap",
            bs,
        ],
        None,
    );
    ok(&["produce", "glines", "--bootstrap", bs], Some(&input));
    let out = ok(
        &[
            "consume",
            "glines",
            "--group",
            "cli-group",
            "--from",
            "beginning",
            "-n",
            "200",
            "--bootstrap",
            bs,
        ],
        None,
    );
    assert_eq!(out.lines().count(), 200);
    let g: Value = serde_json::from_str(&ok(
        &[
            "groups",
            "describe",
            "cli-group",
            "--json",
            "--bootstrap",
            bs,
        ],
        None,
    ))
    .unwrap();
    assert_eq!(g["total_lag"], 300, "{g}");
    let human = ok(
        &["groups", "describe", "cli-group", "--bootstrap", bs],
        None,
    );
    assert!(
        human.contains("LAG") && human.contains("Total lag: 300"),
        "{human}"
    );
    let groups: Value =
        serde_json::from_str(&ok(&["groups", "list", "--json", "--bootstrap", bs], None)).unwrap();
    assert!(
        groups
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group_id"] == "cli-group")
    );
    ok(
        &[
            "groups",
            "reset-offsets",
            "cli-group",
            "--topic",
            "glines",
            "--to-earliest",
            "--execute",
            "--bootstrap",
            bs,
        ],
        None,
    );
    let g: Value = serde_json::from_str(&ok(
        &[
            "groups",
            "describe",
            "cli-group",
            "--json",
            "--bootstrap",
            bs,
        ],
        None,
    ))
    .unwrap();
    assert_eq!(g["total_lag"], 500, "{g}");
    ok(&["groups", "delete", "cli-group", "--bootstrap", bs], None);

    let cluster: Value =
        serde_json::from_str(&ok(&["cluster", "--json", "--bootstrap", bs], None)).unwrap();
    assert_eq!(cluster["brokers"].as_array().unwrap().len(), 1);
    assert_eq!(cluster["controller_id"], cluster["brokers"][0]["node_id"]);
    assert_eq!(cluster["brokers"][0]["fenced"], false, "{cluster}");
    // The one-voter metadata quorum, led by this broker, with nothing to catch up.
    assert_eq!(
        cluster["quorum"]["leader_id"], cluster["controller_id"],
        "{cluster}"
    );
    assert_eq!(cluster["quorum"]["voters"][0]["lag"], 0, "{cluster}");
    assert!(
        cluster["quorum"]["high_watermark"].as_i64().unwrap() > 0,
        "{cluster}"
    );
    assert_eq!(
        cluster["under_replicated_partitions"],
        serde_json::json!([])
    );
    assert_eq!(cluster["offline_partitions"], serde_json::json!([]));
    let text = ok(&["cluster", "--bootstrap", bs], None);
    assert!(text.contains("Metadata quorum: leader 1"), "{text}");
    assert!(text.contains("Under-replicated partitions: none"), "{text}");

    ok(
        &[
            "topics",
            "alter",
            "lines",
            "--set",
            "retention.ms=1000000",
            "--partitions",
            "4",
            "--bootstrap",
            bs,
        ],
        None,
    );
    let desc: Value = serde_json::from_str(&ok(
        &["topics", "describe", "lines", "--json", "--bootstrap", bs],
        None,
    ))
    .unwrap();
    assert_eq!(desc[0]["partitions"].as_array().unwrap().len(), 4);
    // Each partition's size on disk (DescribeLogDirs): bytes exactly where there are records,
    // and the 500 records of about 20 bytes each are all somewhere.
    let parts = desc[0]["partitions"].as_array().unwrap();
    for p in parts {
        let size = p["size_bytes"].as_i64().unwrap();
        let hw = p["high_watermark"].as_i64().unwrap();
        assert_eq!(size > 0, hw > 0, "{p}");
    }
    assert_eq!(parts[3]["size_bytes"], 0, "the new partition is empty");
    let total: i64 = parts
        .iter()
        .map(|p| p["size_bytes"].as_i64().unwrap())
        .sum();
    assert!(total > 500 * 20, "{total}");
    let human = ok(&["topics", "describe", "lines", "--bootstrap", bs], None);
    assert!(human.contains("HIGH-WATERMARK  SIZE"), "{human}");

    // dump-log works offline on the data dir once the broker is stopped.
    b.stop();
    let seg = dir
        .path()
        .join("data")
        .join("lines-0")
        .join("00000000000000000000.log");
    let out = ok(
        &[
            "dump-log",
            seg.to_str().unwrap(),
            "--records",
            "--index",
            "--json",
        ],
        None,
    );
    let summary: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(summary["crc_errors"], 0);
    let records_in_p0 = out
        .lines()
        .filter(|l| l.contains("\"type\":\"record\""))
        .count();
    assert!(records_in_p0 > 0);
    assert_eq!(summary["records"].as_u64().unwrap() as usize, records_in_p0);
    // Flip one byte in the last batch: dump-log reports it and fails.
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let (good, out, _) = sf(&["dump-log", seg.to_str().unwrap()], None);
    assert!(!good);
    assert!(out.contains("isValid: false"), "{out}");
}

#[test]
fn small_bench_reports_sane_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &[
            "bench",
            "--messages",
            "20000",
            "--partitions",
            "4",
            "--batch-size",
            "500",
            "--latency-messages",
            "2000",
            "--latency-rate",
            "2000",
            "--latency-seconds",
            "1",
            "--json",
            "--quiet",
            "--data-dir",
            dir.path().join("bench").to_str().unwrap(),
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    for k in ["producer", "consumer"] {
        assert!(v[k]["msgs_per_sec"].as_f64().unwrap() > 0.0, "{k}: {v}");
        assert!(v[k]["mb_per_sec"].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    assert_eq!(v["producer"]["messages"], 20000);
    // End to end, and the producer's ack latency of each phase (one sample per record).
    for (k, samples) in [
        ("latency_ms", None),
        ("latency_at_rate_ms", None),
        ("produce_ack_latency_ms", Some(20_000)),
        ("ack_latency_ms", Some(2_000)),
        ("ack_latency_at_rate_ms", Some(2_000)),
    ] {
        let l = &v[k];
        if let Some(n) = samples {
            assert_eq!(l["samples"], n, "{k}: {l}");
        }
        let p = |q: &str| l[q].as_f64().unwrap();
        assert!(
            p("p50") > 0.0
                && p("p50") <= p("p95")
                && p("p95") <= p("p99")
                && p("p99") <= p("p999")
                && p("p999") <= p("max"),
            "{k}: {l}"
        );
    }
    assert!(v["recovery"]["ms"].as_f64().unwrap() > 0.0);
    assert!(
        v["recovery"]["validated_messages"].as_u64().unwrap() >= 24_000,
        "{v}"
    );
    assert_eq!(v["workload"]["embedded"], true, "{v}");
}

/// `bench --brokers 3`: three brokers of one cluster in the bench's process; the topic gets
/// three replicas, every acks=all message is produced and consumed, and there is no recovery
/// phase (it crashes one broker).
#[test]
fn bench_runs_an_embedded_three_broker_cluster_with_replication() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &[
            "bench",
            "--brokers",
            "3",
            "--replication-factor",
            "3",
            "--acks",
            "all",
            "--messages",
            "10000",
            "--partitions",
            "3",
            "--batch-size",
            "500",
            "--latency-messages",
            "0",
            "--latency-rate",
            "0",
            "--json",
            "--quiet",
            "--data-dir",
            dir.path().join("cluster").to_str().unwrap(),
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["workload"]["brokers"], 3, "{v}");
    assert_eq!(v["workload"]["replication_factor"], 3, "{v}");
    assert_eq!(v["workload"]["embedded"], true, "{v}");
    assert_eq!(v["producer"]["messages"], 10000, "{v}");
    assert_eq!(v["consumer"]["messages"], 10000, "{v}");
    assert!(v["recovery"].is_null(), "{v}");
    // Each broker kept its own data dir.
    for id in 1..=3 {
        assert!(dir.path().join(format!("cluster/broker-{id}")).is_dir());
    }
    let (success, _, err) = sf(&["bench", "--brokers", "0"], None);
    assert!(!success && err.contains("at least 1"), "{err}");
}

/// An idempotent producer must put a partition's batches on the wire in sequence order: when
/// requests raced each other, a later sequence could reach a new producer id first and the
/// earlier batch was then refused (OUT_OF_ORDER_SEQUENCE_NUMBER) until its retries ran out.
#[test]
fn idempotent_bench_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &[
            "bench",
            "--messages",
            "200000",
            "--partitions",
            "10",
            "--batch-size",
            "2000",
            "--acks",
            "all",
            "--idempotence",
            "--latency-messages",
            "0",
            "--latency-rate",
            "0",
            "--json",
            "--quiet",
            "--data-dir",
            dir.path().join("bench").to_str().unwrap(),
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["producer"]["messages"], 200000, "{v}");
    assert_eq!(v["consumer"]["messages"], 200000, "{v}");
    assert_eq!(v["recovery"]["validated_messages"], 200000, "{v}");
}

#[test]
fn bench_against_a_running_broker() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let out = ok(
        &[
            "bench",
            "--bootstrap",
            &b.bootstrap(),
            "--messages",
            "5000",
            "--partitions",
            "2",
            "--latency-messages",
            "0",
            "--latency-rate",
            "0",
            "--compression",
            "lz4",
            "--json",
            "--quiet",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["consumer"]["messages"].as_u64().unwrap() >= 5000);
    assert!(
        v["recovery"].is_null(),
        "no crash phase against an external broker"
    );
    let table = ok(
        &[
            "bench",
            "--bootstrap",
            &b.bootstrap(),
            "--messages",
            "2000",
            "--latency-messages",
            "0",
            "--latency-rate",
            "0",
            "--quiet",
        ],
        None,
    );
    assert!(
        table.contains("Producer Throughput") && table.contains("Consumer Throughput"),
        "{table}"
    );
    // Plain about where the broker ran, no implementation notes in the result.
    assert!(
        table.contains("(another process), over TCP") && table.contains("bench client only"),
        "{table}"
    );
    assert!(!table.contains("send_batch"), "{table}");
    assert_eq!(v["workload"]["embedded"], false);
    assert!(v.get("method").is_none(), "{v}");
    // Each run deleted the topic it created; --keep-topic keeps it.
    let bs = b.bootstrap();
    let topics = || -> Vec<String> {
        let out = ok(
            &["topics", "list", "--exclude-internal", "--json", "-b", &bs],
            None,
        );
        serde_json::from_str(&out).unwrap()
    };
    assert!(topics().is_empty(), "{:?}", topics());
    let kept: Value = serde_json::from_str(&ok(
        &[
            "bench",
            "--bootstrap",
            &bs,
            "--messages",
            "1000",
            "--latency-messages",
            "0",
            "--latency-rate",
            "0",
            "--keep-topic",
            "--json",
            "--quiet",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(
        topics(),
        vec![kept["workload"]["topic"].as_str().unwrap().to_string()]
    );
}

//! The dashboard's JSON API, SSE and `/metrics` against the real `streamforge broker` binary,
//! driven by the project's Kafka client: every endpoint answers with real data, and the
//! Prometheus families exist and move after produce and consume.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use streamforge_client::{
    ClientConfig, Consumer, ConsumerConfig, Header, OffsetReset, Producer, ProducerConfig,
    ProducerRecord,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(30);

struct BrokerProcess {
    child: Child,
    kafka: SocketAddr,
    http: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_broker() -> BrokerProcess {
    let dir = tempfile::tempdir().unwrap();
    let kafka: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.path().join("broker.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args([
            "broker",
            "--listen",
            &kafka.to_string(),
            "--advertised-listener",
            &kafka.to_string(),
        ])
        .args(["--http-listen", &http.to_string(), "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let broker = BrokerProcess {
        child,
        kafka,
        http,
        _dir: dir,
    };
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Ok((200, _)) = try_http(http, "GET", "/healthz", None).await {
            return broker;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("dashboard did not come up on {http}");
}

async fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .map_err(std::io::Error::other)??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest.get(size + 2..).unwrap_or("");
    }
    out
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = try_http(addr, "GET", path, None).await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
    )
}

async fn metrics(addr: SocketAddr) -> BTreeMap<String, f64> {
    let (status, text) = try_http(addr, "GET", "/metrics", None).await.unwrap();
    assert_eq!(status, 200);
    parse_prometheus(&text)
}

/// Parses the text format strictly enough to catch malformed output: every non-comment line is
/// `series value`, every series belongs to a family declared with `# TYPE`.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            families.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample line: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in: {line}")),
        };
        let name = series.split('{').next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|base| families.get(*base).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(
            families.contains_key(family),
            "sample without # TYPE: {line}"
        );
        samples.insert(series.to_string(), value);
    }
    for (name, _) in families {
        samples.entry(format!("# family {name}")).or_insert(1.0);
    }
    samples
}

fn family(samples: &BTreeMap<String, f64>, name: &str) -> bool {
    samples.contains_key(&format!("# family {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_api_against_the_real_broker() {
    let broker = start_broker().await;
    let http = broker.http;
    let bootstrap = broker.kafka.to_string();

    // Cluster.
    let (status, cluster) = get_json(http, "/api/cluster").await;
    assert_eq!(status, 200);
    assert_eq!(cluster["brokers"][0]["port"], broker.kafka.port());
    assert_eq!(cluster["controller_id"], cluster["node_id"]);
    assert!(cluster["cluster_id"].as_str().unwrap().len() >= 16);

    let before = metrics(http).await;
    assert!(family(&before, "streamforge_connections"));
    assert!(family(&before, "process_resident_memory_bytes"));
    assert!(family(&before, "streamforge_under_replicated_partitions"));
    // Kafka's controller gauges: this one broker is the active controller of a live cluster.
    assert_eq!(
        before.get("streamforge_active_controller_count"),
        Some(&1.0)
    );
    assert_eq!(
        before.get("streamforge_controller_active_brokers"),
        Some(&1.0)
    );
    assert_eq!(
        before.get("streamforge_controller_fenced_brokers"),
        Some(&0.0)
    );
    assert_eq!(
        before.get("streamforge_controller_offline_partitions"),
        Some(&0.0)
    );
    assert_eq!(cluster["brokers"][0]["fenced"], false);
    assert_eq!(cluster["quorum"]["leader_id"], cluster["node_id"]);

    // Create a topic through the API.
    let (status, body) = try_http(
        http,
        "POST",
        "/api/topics",
        Some(r#"{"name":"dash-api","partitions":2}"#),
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let (status, _) = try_http(
        http,
        "POST",
        "/api/topics",
        Some(r#"{"name":"dash-api","partitions":2}"#),
    )
    .await
    .unwrap();
    assert_eq!(status, 409);

    // Produce 30 keyed messages with a header to partition 0 through the Kafka protocol.
    let producer = Producer::new(ProducerConfig {
        client: ClientConfig::new(&bootstrap),
        ..Default::default()
    })
    .await
    .unwrap();
    let headers = [Header {
        key: "trace".into(),
        value: Some(bytes::Bytes::from_static(b"abc")),
    }];
    let mut deliveries = Vec::new();
    for i in 0..30 {
        let key = format!("k{i}");
        let value = format!("value {i}");
        let record = ProducerRecord::new("dash-api", value.as_bytes())
            .key(key.as_bytes())
            .partition(0)
            .headers(&headers);
        deliveries.push(producer.send(record).await.unwrap());
    }
    for d in deliveries {
        d.wait().await.unwrap();
    }

    let (_, topics) = get_json(http, "/api/topics").await;
    let topic = topics
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "dash-api")
        .unwrap();
    assert_eq!(topic["partition_count"], 2);
    assert_eq!(topic["messages"], 30);
    assert!(topic["size_bytes"].as_u64().unwrap() > 0);

    let (status, detail) = get_json(http, "/api/topics/dash-api").await;
    assert_eq!(status, 200);
    assert_eq!(detail["partitions"][0]["high_watermark"], 30);
    assert!(
        detail["configs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "retention.ms")
    );
    let (status, part) = get_json(http, "/api/topics/dash-api/partitions/0").await;
    assert_eq!((status, part["messages"].as_i64()), (200, Some(30)));

    // Browse: by offset, by timestamp, from the end, hex.
    let (status, page) = get_json(
        http,
        "/api/topics/dash-api/partitions/0/messages?offset=5&limit=10",
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let messages = page["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 10);
    assert_eq!(messages[0]["offset"], 5);
    assert_eq!(messages[0]["key"]["data"], "k5");
    assert_eq!(messages[0]["value"]["data"], "value 5");
    assert_eq!(messages[0]["headers"][0]["key"], "trace");
    assert_eq!(messages[0]["headers"][0]["value"]["data"], "abc");
    assert_eq!(page["next_offset"], 15);
    let ts = messages[0]["timestamp_ms"].as_i64().unwrap();
    let (_, page) = get_json(
        http,
        &format!("/api/topics/dash-api/partitions/0/messages?timestamp={ts}&limit=1"),
    )
    .await;
    assert!(page["messages"][0]["offset"].as_i64().unwrap() <= 5);
    let (_, page) = get_json(
        http,
        "/api/topics/dash-api/partitions/0/messages?from=latest&limit=3&format=hex",
    )
    .await;
    let offsets: Vec<i64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, vec![27, 28, 29]);
    assert_eq!(page["messages"][0]["key"]["data"], "6b3237");
    let (status, _) = get_json(http, "/api/topics/nope/partitions/0/messages").await;
    assert_eq!(status, 404);
    let (status, err) = get_json(http, "/api/topics/dash-api/partitions/0/messages?limit=-3").await;
    assert_eq!(status, 400);
    assert!(err["error"].as_str().unwrap().contains("limit"));

    // Consume as a group, commit, then produce 7 more: the group's lag is 7.
    let mut consumer = Consumer::new(ConsumerConfig {
        client: ClientConfig::new(&bootstrap),
        group_id: Some("dash-api-group".into()),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        ..Default::default()
    });
    consumer.subscribe(&["dash-api".to_string()]).unwrap();
    let mut consumed = 0;
    let deadline = Instant::now() + WAIT;
    while consumed < 30 && Instant::now() < deadline {
        consumed += consumer
            .poll(Duration::from_millis(500))
            .await
            .unwrap()
            .len();
    }
    assert_eq!(consumed, 30);
    consumer.commit().await.unwrap();
    for i in 0..7 {
        producer
            .send(ProducerRecord::new("dash-api", format!("more {i}").as_bytes()).partition(0))
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
    }

    let (status, groups) = get_json(http, "/api/groups").await;
    assert_eq!(status, 200);
    let group = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == "dash-api-group")
        .expect("group listed");
    assert_eq!(group["total_lag"], 7, "{group}");
    let (status, group) = get_json(http, "/api/groups/dash-api-group").await;
    assert_eq!(status, 200);
    assert_eq!(group["state"], "Stable", "{group}");
    assert_eq!(group["member_count"], 1);
    let p0 = group["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["partition"] == 0)
        .unwrap();
    assert_eq!(
        (p0["committed_offset"].as_i64(), p0["lag"].as_i64()),
        (Some(30), Some(7)),
        "{group}"
    );
    let assigned: Vec<i64> = group["members"][0]["assignment"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect();
    assert_eq!(assigned, vec![0, 1]);
    let (status, _) = get_json(http, "/api/groups/no-such-group").await;
    assert_eq!(status, 404);

    // Live numbers: the sampler saw the traffic within a couple of seconds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, live) = get_json(http, "/api/live").await;
    let history = live["history"].as_array().unwrap();
    assert!(
        history
            .iter()
            .any(|s| s["messages_in_per_sec"].as_f64().unwrap() > 0.0),
        "{live}"
    );
    assert!(history.iter().any(|s| {
        s["apis"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["api"] == "Produce")
    }));

    // Metrics moved.
    let after = metrics(http).await;
    for name in [
        "streamforge_messages_in_total",
        "streamforge_bytes_in_total",
        "streamforge_messages_out_total",
        "streamforge_bytes_out_total",
        "streamforge_requests_total",
        "streamforge_request_duration_seconds",
        "streamforge_partitions",
        "streamforge_log_size_bytes",
        "streamforge_groups",
        "streamforge_group_lag",
        "process_cpu_seconds_total",
    ] {
        assert!(family(&after, name), "missing family {name}");
    }
    assert_eq!(
        after.get("streamforge_messages_in_total{topic=\"dash-api\"}"),
        Some(&37.0)
    );
    assert!(
        after
            .get("streamforge_messages_out_total{topic=\"dash-api\"}")
            .is_some_and(|v| *v >= 30.0)
    );
    assert_eq!(
        after.get(
            "streamforge_group_lag{group=\"dash-api-group\",topic=\"dash-api\",partition=\"0\"}"
        ),
        Some(&7.0)
    );
    assert_eq!(
        after.get("streamforge_partitions{topic=\"dash-api\"}"),
        Some(&2.0)
    );
    let produce_count = after
        .get("streamforge_request_duration_seconds_count{api=\"Produce\"}")
        .copied()
        .unwrap_or(0.0);
    assert!(produce_count >= 1.0, "Produce latency histogram");
    assert!(!before.contains_key("streamforge_messages_in_total{topic=\"dash-api\"}"));

    consumer.close().await.unwrap();
    producer.close().await.unwrap();

    // Delete needs the confirmation parameter.
    let (status, _) = try_http(http, "DELETE", "/api/topics/dash-api", None)
        .await
        .unwrap();
    assert_eq!(status, 400);
    let (status, _) = try_http(
        http,
        "DELETE",
        "/api/topics/dash-api?confirm=dash-api",
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let (status, _) = get_json(http, "/api/topics/dash-api").await;
    assert_eq!(status, 404);
}

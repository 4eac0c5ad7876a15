//! The JSON API, SSE, static UI and `/metrics` over real HTTP against an in-memory cluster view.
//! (The same endpoints against the real broker are tested in the cli crate.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use streamforge_http::*;
use support::client::{http, json_of};
use support::{FakeBench, MemView, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;

/// Create a topic through the API (the setup most tests share).
async fn create_topic(a: std::net::SocketAddr, name: &str, partitions: i32) {
    let body = format!(r#"{{"name":"{name}","partitions":{partitions}}}"#);
    let (s, v) = json_of(a, "POST", "/api/topics", Some(&body)).await;
    assert!(s == 200 || s == 201, "create {name}: {s} {v}");
}

#[tokio::test]
async fn topics_create_browse_delete() {
    let server = start().await;
    let a = server.local_addr();

    let (s, v) = json_of(
        a,
        "POST",
        "/api/topics",
        Some(r#"{"name":"orders","partitions":1}"#),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = json_of(
        a,
        "POST",
        "/api/topics",
        Some(r#"{"name":"orders","partitions":1}"#),
    )
    .await;
    assert_eq!(s, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("already exists"));

    let (s, v) = json_of(a, "GET", "/api/topics", None).await;
    assert_eq!(s, 200);
    assert_eq!(v[0]["name"], "orders");
    assert_eq!(v[0]["messages"], 3);
    assert_eq!(v[0]["partition_count"], 1);

    let (s, v) = json_of(a, "GET", "/api/topics/orders", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["configs"][0]["name"], "retention.ms");
    assert_eq!(v["partitions"][0]["high_watermark"], 3);

    let (s, v) = json_of(a, "GET", "/api/topics/orders/partitions/0", None).await;
    assert_eq!((s, v["messages"].as_i64()), (200, Some(3)));
    let (s, _) = json_of(a, "GET", "/api/topics/orders/partitions/7", None).await;
    assert_eq!(s, 404);

    let (s, v) = json_of(
        a,
        "GET",
        "/api/topics/orders/partitions/0/messages?offset=0&limit=10",
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0]["key"]["data"], "k0");
    assert_eq!(
        messages[0]["value"],
        json!({"encoding": "text", "data": "value 0", "size_bytes": 7, "truncated": false})
    );
    assert_eq!(messages[0]["headers"][0]["key"], "h");
    assert_eq!(messages[2]["value"]["encoding"], "hex");
    assert_eq!(messages[2]["value"]["data"], "009fff");
    assert_eq!(v["next_offset"], 3);

    let (_, v) = json_of(
        a,
        "GET",
        "/api/topics/orders/partitions/0/messages?timestamp=1001&format=hex",
        None,
    )
    .await;
    assert_eq!(v["messages"][0]["offset"], 1);
    assert_eq!(v["messages"][0]["key"]["data"], "6b31");
    let (_, v) = json_of(
        a,
        "GET",
        "/api/topics/orders/partitions/0/messages?from=latest&limit=1",
        None,
    )
    .await;
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(v["messages"][0]["offset"], 2);

    let (s, v) = json_of(a, "DELETE", "/api/topics/orders", None).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("confirm"));
    let (s, _) = json_of(a, "DELETE", "/api/topics/orders?confirm=orders", None).await;
    assert_eq!(s, 200);
    let (s, _) = json_of(a, "GET", "/api/topics/orders", None).await;
    assert_eq!(s, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn bad_parameters_get_400_with_a_message() {
    let server = start().await;
    let a = server.local_addr();
    create_topic(a, "t", 1).await;
    let cases = [
        (
            "GET",
            "/api/topics/t/partitions/x/messages",
            None,
            "partition",
        ),
        ("GET", "/api/topics/t/partitions/-1", None, "partition"),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?limit=0",
            None,
            "limit",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?limit=99999",
            None,
            "limit",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?offset=abc",
            None,
            "offset",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?offset=1&timestamp=2",
            None,
            "only one",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?format=xml",
            None,
            "format",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?from=middle",
            None,
            "from",
        ),
        (
            "GET",
            "/api/topics/t/partitions/0/messages?bogus=1",
            None,
            "unknown parameter",
        ),
        (
            "POST",
            "/api/topics",
            Some("{not json"),
            "invalid request body",
        ),
        (
            "POST",
            "/api/topics",
            Some(r#"{"name":"bad name","partitions":1}"#),
            "contains",
        ),
        (
            "POST",
            "/api/topics",
            Some(r#"{"name":"ok","partitions":0}"#),
            "partitions",
        ),
        ("POST", "/api/bench", Some(r#"{"messages":0}"#), "messages"),
        ("POST", "/api/bench", Some(r#"{"acks":"some"}"#), "acks"),
        (
            "POST",
            "/api/bench",
            Some(r#"{"turbo":true}"#),
            "invalid request body",
        ),
        ("GET", "/api/bench/abc", None, "benchmark id"),
    ];
    for (method, path, body, needle) in cases {
        let (s, v) = json_of(a, method, path, body).await;
        assert_eq!(s, 400, "{method} {path}: {v}");
        let message = v["error"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{method} {path}: '{message}' should mention '{needle}'"
        );
    }
    let (s, v) = json_of(a, "GET", "/api/nope", None).await;
    assert_eq!(s, 404, "{v}");
    server.shutdown().await;
}

#[tokio::test]
async fn cluster_groups_live_and_ui() {
    let server = start().await;
    let a = server.local_addr();
    let (s, v) = json_of(a, "GET", "/api/cluster", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["cluster_id"], "mem-cluster");
    assert_eq!(v["brokers"][0]["node_id"], 1);
    assert!(v["uptime_ms"].as_i64().unwrap() > 0);
    assert_eq!(v["group_count"], 1);

    let (_, v) = json_of(a, "GET", "/api/groups", None).await;
    assert_eq!(v[0]["group_id"], "g1");
    assert_eq!(v[0]["total_lag"], 2);
    let (s, v) = json_of(a, "GET", "/api/groups/g1", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["offsets"][0]["lag"], 2);
    assert_eq!(v["members"][0]["assignment"][0]["topic"], "t");
    let (s, _) = json_of(a, "GET", "/api/groups/none", None).await;
    assert_eq!(s, 404);

    let (s, v) = json_of(a, "GET", "/api/live", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["interval_ms"], 1000);

    // SSE: the first event arrives within about a second.
    let mut stream = tokio::net::TcpStream::connect(a).await.unwrap();
    stream
        .write_all(b"GET /api/live/stream HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen.contains("event: live") && tokio::time::Instant::now() < deadline {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    assert!(
        seen.contains("event: live") && seen.contains("messages_in_per_sec"),
        "{seen}"
    );

    for page in [
        "/",
        "/topics/x",
        "/topics/x/partitions/0",
        "/groups",
        "/groups/g1",
        "/bench",
    ] {
        let (s, body) = http(a, "GET", page, None).await;
        assert_eq!(s, 200, "{page}");
        assert!(body.contains("<title>StreamForge"), "{page}");
    }
    for asset in [
        "/static/app.js",
        "/static/style.css",
        "/static/vendor/uPlot.iife.min.js",
        "/static/vendor/uPlot.LICENSE",
    ] {
        let (s, body) = http(a, "GET", asset, None).await;
        assert_eq!(s, 200, "{asset}");
        assert!(!body.is_empty());
    }
    let (s, _) = http(a, "GET", "/nothing-here", None).await;
    assert_eq!(s, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn benchmark_runs_and_is_kept_in_history() {
    let dir = std::env::temp_dir().join(format!("sf-bench-hist-{}", std::process::id()));
    let path = dir.join("history.json");
    let options = HttpOptions {
        bench_runner: Some(Arc::new(FakeBench)),
        bench_history_path: Some(path.clone()),
        metrics: None,
        ..Default::default()
    };
    let server = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemView::default()),
        options,
    )
    .await
    .unwrap();
    let a = server.local_addr();
    let (s, v) = json_of(
        a,
        "POST",
        "/api/bench",
        Some(r#"{"messages":1000,"partitions":2,"batch_size":100,"message_size":10,"acks":"all"}"#),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    let id = v["id"].as_u64().unwrap();
    let mut run = Value::Null;
    for _ in 0..100 {
        run = json_of(a, "GET", &format!("/api/bench/{id}"), None).await.1;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["params"]["acks"], -1);
    assert_eq!(run["report"]["rows"][0]["value"], 123.0);
    // The run used its own topic, which is gone afterwards.
    assert!(
        run["report"]["details"]["topic"]
            .as_str()
            .unwrap()
            .starts_with("streamforge-bench-1-")
    );
    let (_, topics) = json_of(a, "GET", "/api/topics", None).await;
    assert_eq!(topics.as_array().unwrap().len(), 0, "{topics}");
    assert_eq!(run["progress"]["messages_done"], 1000);
    assert!(!run["progress_series"].as_array().unwrap().is_empty());
    let (_, list) = json_of(a, "GET", "/api/bench", None).await;
    assert_eq!(list["available"], true);
    assert_eq!(list["runs"][0]["id"], id);
    server.shutdown().await;

    // The history survives a restart.
    let options = HttpOptions {
        bench_runner: None,
        bench_history_path: Some(path),
        metrics: None,
        ..Default::default()
    };
    let server = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemView::default()),
        options,
    )
    .await
    .unwrap();
    let (_, list) = json_of(server.local_addr(), "GET", "/api/bench", None).await;
    assert_eq!(list["available"], false);
    assert_eq!(list["runs"][0]["id"], id);
    let (s, v) = json_of(server.local_addr(), "POST", "/api/bench", Some("{}")).await;
    assert_eq!(s, 501, "{v}");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn metrics_are_prometheus_text_and_move_with_traffic() {
    let server = start().await;
    let a = server.local_addr();
    create_topic(a, "m", 1).await;
    metrics::counter!("streamforge_messages_in_total", "topic" => "m").increment(10);
    metrics::histogram!("streamforge_request_duration_seconds", "api" => "Produce").record(0.001);
    let (s, text) = http(a, "GET", "/metrics", None).await;
    assert_eq!(s, 200);
    let families = parse_families(&text);
    for family in [
        "streamforge_messages_in_total",
        "streamforge_request_duration_seconds",
        "streamforge_connections",
        "streamforge_partitions",
        "streamforge_log_size_bytes",
        "streamforge_under_replicated_partitions",
        "streamforge_under_min_isr_partitions",
        "streamforge_partition_isr_size",
        "streamforge_partition_under_replicated",
        "streamforge_partition_under_min_isr",
        "streamforge_partition_at_min_isr",
        "streamforge_isr_shrinks_total",
        "streamforge_isr_expands_total",
        "streamforge_group_lag",
        "process_resident_memory_bytes",
    ] {
        assert!(families.contains_key(family), "missing {family} in\n{text}");
    }
    assert_eq!(
        sample(&text, "streamforge_messages_in_total{topic=\"m\"}"),
        Some(10.0)
    );
    assert_eq!(
        sample(
            &text,
            "streamforge_partition_isr_size{topic=\"m\",partition=\"0\"}"
        ),
        Some(1.0)
    );
    // A lone leader (RF=1) is at its min ISR of 1, as in Kafka, and never under it.
    for (family, value) in [
        ("under_replicated", 0.0),
        ("under_min_isr", 0.0),
        ("at_min_isr", 1.0),
    ] {
        let series = format!("streamforge_partition_{family}{{topic=\"m\",partition=\"0\"}}");
        assert_eq!(sample(&text, &series), Some(value), "{series}");
    }
    assert_eq!(
        sample(
            &text,
            "streamforge_group_lag{group=\"g1\",topic=\"t\",partition=\"0\"}"
        ),
        Some(2.0)
    );
    metrics::counter!("streamforge_messages_in_total", "topic" => "m").increment(5);
    let (_, text) = http(a, "GET", "/metrics", None).await;
    assert_eq!(
        sample(&text, "streamforge_messages_in_total{topic=\"m\"}"),
        Some(15.0)
    );
    server.shutdown().await;
}

/// Family name -> type, checking every line is a comment or `name{labels} value`.
fn parse_families(text: &str) -> BTreeMap<String, String> {
    let mut families = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with('#') {
            let (_, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {line}"));
            assert!(
                value.parse::<f64>().is_ok() || value.ends_with("Inf") || value == "NaN",
                "bad value in {line}"
            );
        }
    }
    families
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

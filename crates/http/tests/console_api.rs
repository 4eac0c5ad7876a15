//! The console endpoints over real HTTP against the in-memory view: Kafka errors by name with
//! the fitting status, the actions a view does not offer (501), the all-partition search with
//! its filters and bounds, and the broker-kept lag history. (Through the real broker and real
//! clicks: tests/browser/test/console.test.mjs.)

use std::time::Duration;

use support::client::json_of;
use support::start;

mod support;

#[tokio::test]
async fn kafka_errors_are_named_and_unoffered_actions_say_so() {
    let server = start().await;
    let a = server.local_addr();
    let (s, v) = json_of(a, "DELETE", "/api/groups/g1?confirm=g1", None).await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["kafka_error"], "NON_EMPTY_GROUP");
    assert_eq!(v["kafka_code"], 68);
    assert!(v["error"].as_str().unwrap().contains("not empty"));
    let (s, v) = json_of(a, "DELETE", "/api/groups/g1", None).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("confirm"));

    let body = r#"{"configs": [{"name": "retention.ms", "value": "an hour"}]}"#;
    let (s, v) = json_of(a, "PATCH", "/api/topics/t/configs", Some(body)).await;
    assert_eq!(
        (s, v["kafka_error"].as_str()),
        (400, Some("INVALID_CONFIG"))
    );
    let (s, _) = json_of(
        a,
        "PATCH",
        "/api/topics/t/configs",
        Some(r#"{"configs": []}"#),
    )
    .await;
    assert_eq!(s, 400);

    let (s, v) = json_of(
        a,
        "POST",
        "/api/topics/t/messages",
        Some(r#"{"value": "x"}"#),
    )
    .await;
    assert_eq!(s, 501, "{v}");
    assert!(v["error"].as_str().unwrap().contains("not available"));
    let bad = r#"{"topic": "t", "to": "offset", "value": -1}"#;
    let (s, v) = json_of(a, "POST", "/api/groups/g1/reset-offsets", Some(bad)).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("non-negative"));
    let (s, _) = json_of(
        a,
        "POST",
        "/api/groups/g1/reset-offsets",
        Some(r#"{"topic": "t", "to": "sideways"}"#),
    )
    .await;
    assert_eq!(s, 400);
    server.shutdown().await;
}

#[tokio::test]
async fn search_filters_on_key_value_header_and_time() {
    let server = start().await;
    let a = server.local_addr();
    let (s, _) = json_of(
        a,
        "POST",
        "/api/topics",
        Some(r#"{"name": "t", "partitions": 1}"#),
    )
    .await;
    assert_eq!(s, 201);
    let count = |v: &serde_json::Value| v["messages"].as_array().unwrap().len();
    let (s, v) = json_of(a, "GET", "/api/topics/t/messages?key=K1", None).await;
    assert_eq!((s, count(&v)), (200, 1), "{v}");
    assert_eq!(v["messages"][0]["partition"], 0);
    assert_eq!(v["messages"][0]["offset"], 1);
    let (_, v) = json_of(a, "GET", "/api/topics/t/messages?value=value", None).await;
    assert_eq!(count(&v), 2);
    let (_, v) = json_of(a, "GET", "/api/topics/t/messages?header=h%3Dv", None).await;
    assert_eq!(count(&v), 3);
    let (_, v) = json_of(a, "GET", "/api/topics/t/messages?header=nope", None).await;
    assert_eq!(count(&v), 0);
    let (_, v) = json_of(a, "GET", "/api/topics/t/messages?until=1000", None).await;
    assert_eq!(count(&v), 1);
    let (_, v) = json_of(a, "GET", "/api/topics/t/messages?from=latest&limit=2", None).await;
    assert_eq!(v["messages"][0]["offset"], 1);
    assert_eq!(v["scanned_messages"], 3);
    assert_eq!(v["scan_limited"], false);
    for bad in ["limit=0", "from=middle", "until=-3", "colour=red"] {
        let (s, v) = json_of(a, "GET", &format!("/api/topics/t/messages?{bad}"), None).await;
        assert_eq!(s, 400, "{bad}: {v}");
    }
    let (s, _) = json_of(a, "GET", "/api/topics/nope/messages", None).await;
    assert_eq!(s, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn lag_history_is_kept_by_the_server() {
    let server = start().await;
    let a = server.local_addr();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (s, v) = json_of(a, "GET", "/api/groups/g1/lag-history", None).await;
        assert_eq!(s, 200);
        assert_eq!(v["interval_ms"], 10_000);
        assert_eq!(v["points_max"], 360);
        if let Some(p) = v["points"].as_array().and_then(|p| p.first()) {
            assert!(p["ts_ms"].as_i64().unwrap() > 0);
            assert!(p["total_lag"].as_i64().is_some());
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lag point recorded: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, v) = json_of(a, "GET", "/api/groups/unknown/lag-history", None).await;
    assert_eq!(v["points"].as_array().unwrap().len(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn transactions_on_a_view_without_them_are_empty_and_abort_is_unoffered() {
    let server = start().await;
    let a = server.local_addr();
    let (s, v) = json_of(a, "GET", "/api/transactions", None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v, serde_json::json!([]));
    let (s, _) = json_of(a, "GET", "/api/transactions/tx", None).await;
    assert_eq!(s, 404);
    let (s, v) = json_of(a, "POST", "/api/transactions/tx/abort", Some("{}")).await;
    assert_eq!(s, 501, "{v}");
    let (s, _) = json_of(a, "POST", "/api/transactions/tx/abort", Some("not json")).await;
    assert_eq!(s, 400);
    server.shutdown().await;
}

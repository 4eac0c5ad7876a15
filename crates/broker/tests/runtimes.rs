//! Two brokers in one process share no runtime: each has its own log runtime (flusher and
//! reaper threads, clock) and its own metrics hub, and stopping one stops only its threads.

mod support {
    // Shared with groups.rs; this test only needs `RawClient::call`.
    #![allow(dead_code)]
    pub mod group_client;
}

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use streamforge_broker::{Broker, BrokerConfig};
use streamforge_http::MetricsHub;
use streamforge_protocol::clock::ManualClock;
use support::group_client::RawClient;

const START_MS: i64 = 1_700_000_000_000;
/// Bound on waiting for a stopped broker's threads to end.
const STOP_WAIT_MAX: Duration = Duration::from_secs(20);

fn config(dir: &std::path::Path, clock: Arc<ManualClock>, hub: Arc<MetricsHub>) -> BrokerConfig {
    BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        http_listen: None,
        clock,
        metrics: Some(hub),
        ..BrokerConfig::default()
    }
}

fn requests_counted(hub: &MetricsHub) -> u64 {
    hub.tap
        .api_stats()
        .iter()
        .map(|(_, s)| s.requests.load(Ordering::Relaxed))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_in_one_process_share_no_runtime() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (clock_a, clock_b) = (
        ManualClock::new(START_MS),
        ManualClock::new(START_MS + 3_600_000),
    );
    let (hub_a, hub_b) = (MetricsHub::new(), MetricsHub::new());
    let a = Broker::start(config(dir_a.path(), clock_a.clone(), hub_a.clone()))
        .await
        .unwrap();
    let b = Broker::start(config(dir_b.path(), clock_b.clone(), hub_b.clone()))
        .await
        .unwrap();

    // Own log runtimes, each reading its broker's clock.
    let rt_a = Arc::clone(&a.state().replicas.log_defaults().runtime);
    let rt_b = Arc::clone(&b.state().replicas.log_defaults().runtime);
    assert!(!Arc::ptr_eq(&rt_a, &rt_b));
    clock_a.advance(Duration::from_secs(5));
    assert_eq!(rt_a.now_ms(), START_MS + 5_000);
    assert_eq!(a.state().clock.now_ms(), START_MS + 5_000);
    assert_eq!(rt_b.now_ms(), START_MS + 3_600_000);
    let (threads_a, threads_b) = (rt_a.threads_running(), rt_b.threads_running());
    assert_eq!(threads_a.load(Ordering::SeqCst), 2, "flusher + reaper");
    assert_eq!(threads_b.load(Ordering::SeqCst), 2, "flusher + reaper");
    drop(rt_a);

    // Own metrics: a request to A is counted by A's hub only.
    let mut client = RawClient::connect(a.kafka_addr()).await;
    let resp: ApiVersionsResponse = client
        .call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
        .await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(a.state().connections.load(Ordering::Relaxed), 1);
    assert_eq!(hub_a.tap.connections(), 1.0);
    assert_eq!(hub_b.tap.connections(), 0.0);
    assert!(requests_counted(&hub_a) >= 1);
    assert_eq!(requests_counted(&hub_b), 0);
    drop(client);

    // Stopping A ends A's log threads; B's keep running.
    a.shutdown().await;
    let t0 = Instant::now();
    while threads_a.load(Ordering::SeqCst) != 0 {
        assert!(
            t0.elapsed() < STOP_WAIT_MAX,
            "broker A's log threads still run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(threads_b.load(Ordering::SeqCst), 2);
    b.shutdown().await;
}

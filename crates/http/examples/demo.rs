//! Serves the dashboard over an in-memory cluster with simulated traffic, to look at the UI
//! without a broker: `cargo run -p streamforge-http --example demo -- 127.0.0.1:8080`.

use std::sync::Arc;
use std::time::Duration;

use streamforge_http::{ClusterView, CreateTopic, HttpOptions, install_metrics, serve};

#[path = "../tests/support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    install_metrics();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let view = Arc::new(support::MemView::default());
    for name in ["orders", "payments", "clickstream"] {
        let request = CreateTopic {
            name: name.into(),
            partitions: 1,
            replication_factor: 1,
            configs: Default::default(),
        };
        view.create_topic(request)
            .await
            .map_err(std::io::Error::other)?;
    }
    let options = HttpOptions {
        bench_runner: Some(Arc::new(support::FakeBench)),
        bench_history_path: None,
        metrics: None,
        ..Default::default()
    };
    let server = serve(addr.parse().map_err(std::io::Error::other)?, view, options).await?;
    eprintln!("dashboard demo on http://{}", server.local_addr());
    metrics::gauge!("streamforge_connections").set(4.0);
    let mut tick = 0u64;
    loop {
        tick += 1;
        let wave = ((tick as f64) / 8.0).sin().abs();
        for (i, topic) in ["orders", "payments", "clickstream"].iter().enumerate() {
            let n = (200.0 * (i as f64 + 1.0) * (0.5 + wave)) as u64;
            metrics::counter!("streamforge_messages_in_total", "topic" => *topic).increment(n);
            metrics::counter!("streamforge_bytes_in_total", "topic" => *topic).increment(n * 120);
            metrics::counter!("streamforge_messages_out_total", "topic" => *topic)
                .increment(n * 9 / 10);
            metrics::counter!("streamforge_bytes_out_total", "topic" => *topic).increment(n * 108);
        }
        for (api, base) in [("Produce", 0.0008), ("Fetch", 0.004), ("Metadata", 0.0002)] {
            for k in 0..20 {
                metrics::counter!("streamforge_requests_total", "api" => api).increment(1);
                metrics::histogram!("streamforge_request_duration_seconds", "api" => api)
                    .record(base * (1.0 + k as f64 / 10.0));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

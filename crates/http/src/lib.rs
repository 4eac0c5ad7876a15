#![forbid(unsafe_code)]
//! The StreamForge dashboard: an axum server inside the broker process with a JSON API,
//! server-sent live numbers, an embedded web UI and Prometheus `/metrics`.
//!
//! The broker implements [`ClusterView`] (reads plus the explicit actions) and calls
//! [`serve`]. Benchmarks are plugged in through [`BenchRunner`]. Call [`install_metrics`] early
//! in the process so every metric recorded by the broker reaches `/metrics` and the live view.

mod api_browse;
mod api_cluster;
mod api_console;
mod api_groups;
mod api_topics;
pub mod auth;
pub mod bench;
pub mod console;
pub mod facade;
mod kafka_error;
mod lag;
mod lag_history;
pub mod live;
mod metrics_tap;
mod payload;
pub mod prom_replication;
mod prom_text;
mod routes;
pub mod transactions;
mod ui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use api_topics::validate_topic_name;
pub use bench::{
    BenchFuture, BenchParams, BenchProgress, BenchProgressSink, BenchReport, BenchRow, BenchRunner,
    BenchTarget, LatencyPoint,
};
pub use console::*;
pub use facade::*;
pub use metrics_tap::{InHub, MetricsHub, install_metrics};
pub use transactions::TransactionInfo;

/// Optional parts of the dashboard.
#[derive(Default, Clone)]
pub struct HttpOptions {
    /// Runs benchmarks started from the UI; without it the benchmark page says it is unavailable.
    pub bench_runner: Option<Arc<dyn BenchRunner>>,
    /// Where the benchmark history is kept across restarts (JSON); in memory only when None.
    pub bench_history_path: Option<PathBuf>,
    /// The broker's metrics, served at `/metrics` and in the live view; the process default
    /// ([`install_metrics`]) when None.
    pub metrics: Option<Arc<MetricsHub>>,
    /// The login (session cookie or Basic auth against the broker's users); None = no login,
    /// every request is `User:ANONYMOUS`.
    pub auth: Option<auth::HttpAuth>,
    /// Asked before every action; None = [`auth::allow_all`].
    pub authorizer: Option<auth::AuthorizeFn>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field(
                "bench_runner",
                &self.bench_runner.as_ref().map(|_| "BenchRunner"),
            )
            .field("bench_history_path", &self.bench_history_path)
            .field("metrics", &self.metrics)
            .field("auth", &self.auth)
            .field(
                "authorizer",
                &self.authorizer.as_ref().map(|_| "AuthorizeFn"),
            )
            .finish()
    }
}

/// A running dashboard server.
pub struct HttpServer {
    local_addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    sampler: tokio::task::JoinHandle<()>,
    lag_sampler: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, ends the SSE streams at once, lets open requests finish, and waits
    /// (at most [`SHUTDOWN_GRACE_MS`]).
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        self.sampler.abort();
        self.lag_sampler.abort();
        if tokio::time::timeout(
            std::time::Duration::from_millis(SHUTDOWN_GRACE_MS),
            &mut self.server,
        )
        .await
        .is_err()
        {
            self.server.abort();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.sampler.abort();
        self.lag_sampler.abort();
        self.server.abort();
    }
}

/// Longest wait at shutdown for in-flight dashboard requests (SSE streams end at once).
pub const SHUTDOWN_GRACE_MS: u64 = 2_000;

/// Binds `addr` and serves the dashboard in the background.
pub async fn serve(
    addr: SocketAddr,
    view: Arc<dyn ClusterView>,
    options: HttpOptions,
) -> std::io::Result<HttpServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, view, options)
}

/// Serves the dashboard on a listener bound earlier (the broker binds every listener before
/// it opens the data directory, so a taken port fails start-up before anything is created).
pub fn serve_on(
    listener: tokio::net::TcpListener,
    view: Arc<dyn ClusterView>,
    options: HttpOptions,
) -> std::io::Result<HttpServer> {
    let local_addr = listener.local_addr()?;
    let metrics = options.metrics.clone().unwrap_or_else(install_metrics);
    let live = live::LiveSampler::new(Arc::clone(&metrics.tap));
    let sampler = live.spawn();
    let lag_history = Arc::new(lag_history::LagHistory::default());
    let lag_sampler = lag_history.spawn(Arc::clone(&view));
    let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let mut graceful = shutdown_rx.clone();
    let state = routes::AppState {
        shutdown: shutdown_rx,
        view,
        lag_history,
        metrics,
        live,
        auth: Arc::new(auth::AuthState::new(options.auth, options.authorizer)),
        bench: Arc::new(bench::BenchHub::new(
            options.bench_runner,
            options.bench_history_path,
        )),
    };
    let app = routes::router(state);
    let server = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = graceful.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(error) = result {
            tracing::error!(%error, "dashboard server stopped");
        }
    });
    tracing::info!(addr = %local_addr, "dashboard listening");
    Ok(HttpServer {
        local_addr,
        shutdown,
        server,
        sampler,
        lag_sampler,
    })
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

//! The accept loop (connection limit, graceful shutdown) and the housekeeping timer.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::{BrokerState, connection, ms};

/// Accept connections until shutdown; then drain connections and close the logs.
pub async fn run(
    state: Arc<BrokerState>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    housekeeping: JoinHandle<()>,
) {
    let mut conns = JoinSet::new();
    let hub = state.metrics.clone();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let open = state.connections.load(Ordering::Relaxed);
                    let max = state.dynamic.max_connections();
                    if open >= max {
                        tracing::warn!(%peer, open, max, "connection limit reached, closing new connection");
                        drop(stream);
                        continue;
                    }
                    let guard = ConnectionGuard::new(state.clone());
                    let state = state.clone();
                    let shutdown = shutdown.clone();
                    let task = async move {
                        connection::serve(state, stream, peer, shutdown).await;
                        drop(guard);
                    };
                    match &hub {
                        Some(hub) => conns.spawn(hub.scope(task)),
                        None => conns.spawn(task),
                    };
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ms(100)).await;
                }
            }
        }
    }
    drop(listener);
    tracing::info!(
        connections = conns.len(),
        "stopped accepting; finishing in-flight requests"
    );
    let grace = ms(state.config.shutdown_grace_ms);
    if tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!(
            left = conns.len(),
            "grace period over, dropping connections"
        );
        conns.shutdown().await;
    }
    let _ = housekeeping.await;
    let st = state.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || {
        // Leadership moves away (and the broker is fenced) before the logs close.
        st.replicas.controlled_shutdown();
        st.replicas.close_all()
    })
    .await
    {
        tracing::error!(error = %e, "closing logs failed");
    }
}

/// Counts a connection while it lives.
struct ConnectionGuard(Arc<BrokerState>);

impl ConnectionGuard {
    fn new(state: Arc<BrokerState>) -> Self {
        let n = state.connections.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::gauge!("streamforge_connections").set(n as f64);
        ConnectionGuard(state)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let n = self.0.connections.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("streamforge_connections").set(n as f64);
    }
}

/// Periodic log housekeeping (roll, retention, flush.ms) off the request path.
pub async fn housekeeping(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    // Often enough for the background flush interval too (it is checked per tick).
    let background_flush_ms = state.config.log_flush_background_ms;
    let tick_ms = match background_flush_ms {
        0 => state.config.log_tick_interval_ms,
        b => state.config.log_tick_interval_ms.min(b),
    };
    let mut interval = tokio::time::interval(ms(tick_ms.max(10)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = interval.tick() => {
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    st.in_metrics(|| st.replicas.tick(st.clock.now_ms(), background_flush_ms))
                })
                .await;
            }
        }
    }
}

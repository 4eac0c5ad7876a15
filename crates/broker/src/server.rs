//! The accept loop (connection limit, graceful shutdown) and the housekeeping timer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::connection::{self, ConnectionInfo};
use crate::security::sasl::SaslSession;
use crate::{BrokerState, ms};

/// Accept connections on every listener until shutdown; then drain connections and close the
/// logs.
pub async fn run(
    state: Arc<BrokerState>,
    listeners: Vec<TcpListener>,
    shutdown: watch::Receiver<bool>,
    housekeeping: JoinHandle<()>,
) {
    let loops = listeners
        .into_iter()
        .enumerate()
        .map(|(index, l)| accept_and_drain(state.clone(), l, index, shutdown.clone()));
    futures::future::join_all(loops).await;
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

/// One listener's accept loop, then the drain of its connections (within the grace period).
async fn accept_and_drain(
    state: Arc<BrokerState>,
    listener: TcpListener,
    index: usize,
    mut shutdown: watch::Receiver<bool>,
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
                    let task = serve_accepted(state.clone(), stream, peer, index, shutdown.clone());
                    let task = async move {
                        task.await;
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
        listener = index,
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
}

/// Serve one accepted socket by its listener's protocol: the TLS handshake first on SSL and
/// SASL_SSL listeners, a SASL session on SASL ones.
async fn serve_accepted(
    state: Arc<BrokerState>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: usize,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let security = &state.security;
    let protocol = security.endpoint(listener).protocol;
    let sec = &state.config.security;
    let mut info = ConnectionInfo {
        peer,
        listener,
        tls_principal: None,
        sasl: protocol.is_sasl().then(|| {
            SaslSession::new(
                sec.sasl_mechanisms.clone(),
                security.credentials.clone(),
                sec.connections_max_reauth_ms,
            )
            .with_oauthbearer(security.oauthbearer.clone())
        }),
        auth_deadline: protocol
            .is_sasl()
            .then(|| tokio::time::Instant::now() + ms(sec.sasl_handshake_timeout_ms)),
    };
    if !protocol.is_tls() {
        let (rd, wr) = stream.into_split();
        return connection::serve(state.clone(), rd, wr, info, shutdown).await;
    }
    let Some(tls) = &security.tls else {
        tracing::error!(%peer, "TLS listener without a TLS configuration");
        return;
    };
    let handshake = tls.acceptor().accept(stream);
    let tls_stream = match tokio::time::timeout(ms(sec.ssl_handshake_timeout_ms), handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "TLS handshake failed, closing connection");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, timeout_ms = sec.ssl_handshake_timeout_ms, "TLS handshake timed out, closing connection");
            return;
        }
    };
    let cert = tls_stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec());
    if let Some(der) = cert {
        match security.principal_mapper.principal(&der) {
            Ok(p) => {
                tracing::debug!(%peer, principal = %p, "TLS client authenticated");
                info.tls_principal = Some(p);
            }
            Err(e) => {
                tracing::warn!(%peer, error = %e, "no principal for the client certificate, closing connection");
                return;
            }
        }
    }
    let (rd, wr) = tokio::io::split(tls_stream);
    connection::serve(state.clone(), rd, wr, info, shutdown).await;
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
    // Often enough for the background flush interval and the controller heartbeat too (both
    // are checked per tick): a heartbeat due between two ticks would wait for the next one,
    // and the session timeout would have to cover that wait as well.
    let background_flush_ms = state.config.log_flush_background_ms;
    let tick_ms = match background_flush_ms {
        0 => state.config.log_tick_interval_ms,
        b => state.config.log_tick_interval_ms.min(b),
    }
    .min(state.config.broker_heartbeat_interval_ms);
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

//! One client connection, served by one task: read a request, run its handler, send its
//! response, then read the next. This is Kafka's order (the broker mutes a connection from the
//! moment it receives a request until its response is sent), so pipelined Produce requests
//! append in request order; clients that pipeline find their next requests waiting in the
//! socket buffer. Running the handler in the connection's own task, rather than spawning one
//! task per request and a writer task per connection, saves the cross-task wake-ups that were
//! a quarter of the broker's CPU under librdkafka (see docs/BROKER.md). Responses go out with
//! vectored writes (fetch data is never copied).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use futures::FutureExt;
use kafka_protocol::messages::ApiKey;
use streamforge_protocol::api_versions::unsupported_api_versions_response;
use streamforge_protocol::frame::{FRAME_PREFIX_BYTES, HeaderPrefix, api_name, frame_len};
use streamforge_protocol::{ProtocolError, RequestFrame, ResponseFrame};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::router::{self, HandlerError, HandlerResult};
use crate::security::SASL_RECEIVE_BYTES_MAX;
use crate::security::gate::{self, Gate};
use crate::security::sasl::SaslSession;
use crate::{BrokerState, ms};

/// Read buffer of a connection: small requests arrive in one read; the buffer is all that is
/// read ahead of a frame's memory reservation. Larger reads bypass it.
pub const READ_BUFFER_BYTES: usize = 16 * 1024;
/// IoSlices per `write_vectored` call (Linux IOV_MAX is 1024).
const IOV_CHUNKS_MAX: usize = 512;
/// Request memory (`queued.max.request.bytes`) a frame reserves before its first body byte is
/// read: what a sender that stalls after the length prefix holds. `max.connections` (10,000)
/// such senders hold 625 MiB, less than the 1 GiB default pool.
pub const FRAME_RESERVE_FIRST_BYTES: usize = 64 * 1024;
/// Most request memory a frame reserves ahead of the bytes received. Each further reservation
/// is at most what has already arrived (doubling), so a stalled sender holds at most twice
/// what it sent plus `FRAME_RESERVE_FIRST_BYTES`.
pub const FRAME_RESERVE_CHUNK_BYTES_MAX: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("idle for longer than connections.max.idle.ms")]
    Idle,
    #[error("frame not completed within the request read timeout")]
    SlowFrame,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// What the connection knows about itself beyond its socket.
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// Index of the listener it came in on (see `SecurityState::endpoints`).
    pub listener: usize,
    /// The SASL state on SASL listeners; `None` elsewhere (every request is served).
    pub sasl: Option<SaslSession>,
    /// SASL listeners: authentication must succeed by this time.
    pub auth_deadline: Option<tokio::time::Instant>,
    /// The client certificate's principal (SSL listeners with mutual TLS).
    pub tls_principal: Option<crate::security::principal::Principal>,
}

impl ConnectionInfo {
    /// Who sends this connection's requests: the SASL user, else the certificate's principal,
    /// else `None` (Kafka's `User:ANONYMOUS`).
    fn principal_name(&self) -> Option<Arc<str>> {
        let sasl = self.sasl.as_ref().and_then(SaslSession::principal);
        sasl.or(self.tls_principal.as_ref())
            .map(|p| Arc::from(p.name.as_str()))
    }
}

/// Serve one connection over any stream halves (a `TcpStream`'s, or a TLS stream's).
pub async fn serve<R, W>(
    state: Arc<BrokerState>,
    rd: R,
    mut wr: W,
    mut info: ConnectionInfo,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let peer = info.peer;
    tracing::debug!(%peer, "connection opened");
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
    let mut out: VecDeque<Bytes> = VecDeque::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let limits = read_limits(&state, &info);
        let frame = tokio::select! {
            _ = shutdown.changed() => break,
            f = read_frame(&state, &mut rd, limits) => f,
        };
        let (frame, permit) = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break, // clean EOF between frames
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection");
                break;
            }
        };
        let mut close_after = None;
        let mut mute_after_ms = 0;
        match gate::check(&mut info.sasl, &frame, peer).await {
            Gate::Pass => {}
            Gate::Reply(resp) => out.extend(resp.chunks),
            Gate::ReplyAndClose(resp, reason) => {
                out.extend(resp.chunks);
                close_after = Some(reason);
            }
            Gate::Close(reason) => {
                tracing::warn!(%peer, reason, "closing connection");
                break;
            }
        }
        if out.is_empty() {
            let principal = info.principal_name();
            match handle(&state, frame, permit, peer, (info.listener, principal)).await {
                // Nothing to send (a throttled acks=0 Produce): only the mute.
                Some(Some(silent)) if silent.chunks.is_empty() => {
                    crate::quota::mute_for(&state.shutdown, silent.throttle_ms).await;
                    continue;
                }
                Some(Some(response)) => match check_response_frame(&response) {
                    Ok(()) => {
                        mute_after_ms = response.throttle_ms;
                        out.extend(response.chunks)
                    }
                    Err(e) => {
                        tracing::error!(%peer, error = %e, "response frame is malformed, closing connection");
                        break;
                    }
                },
                Some(None) => continue, // no response (acks=0 Produce)
                None => break,
            }
        } else if info
            .sasl
            .as_ref()
            .is_some_and(SaslSession::is_authenticated)
        {
            info.auth_deadline = None;
        }
        if let Err(e) = write_all_vectored(&mut wr, &mut out).await {
            tracing::debug!(%peer, error = %e, "write failed");
            break;
        }
        if let Some(reason) = close_after {
            tracing::warn!(%peer, reason, "SASL authentication failed, closing connection");
            break;
        }
        // KIP-219: the response said how long to back off; nothing is read from this client
        // meanwhile (Kafka mutes the channel).
        crate::quota::mute_for(&state.shutdown, mute_after_ms).await;
    }
    let _ = wr.shutdown().await;
    tracing::debug!(%peer, "connection closed");
}

/// How large a frame may be and how long to wait for one: before SASL authentication a frame
/// is at most `SASL_RECEIVE_BYTES_MAX` and must come before the authentication deadline.
struct ReadLimits {
    frame_bytes_max: usize,
    idle: std::time::Duration,
}

fn read_limits(state: &BrokerState, info: &ConnectionInfo) -> ReadLimits {
    let idle = ms(state.config.connections_max_idle_ms);
    let authenticated = info.sasl.as_ref().is_none_or(SaslSession::is_authenticated);
    match info.auth_deadline {
        Some(deadline) if !authenticated => ReadLimits {
            frame_bytes_max: SASL_RECEIVE_BYTES_MAX.min(state.config.socket_request_max_bytes),
            idle: idle.min(deadline.saturating_duration_since(tokio::time::Instant::now())),
        },
        _ => ReadLimits {
            frame_bytes_max: if info.sasl.as_ref().is_some_and(|s| s.expects_raw_token()) {
                SASL_RECEIVE_BYTES_MAX
            } else {
                state.config.socket_request_max_bytes
            },
            idle,
        },
    }
}

/// Read one frame: `Ok(None)` on EOF before a new frame starts.
async fn read_frame<R: AsyncRead + Unpin>(
    state: &BrokerState,
    rd: &mut BufReader<R>,
    limits: ReadLimits,
) -> Result<Option<(Bytes, OwnedSemaphorePermit)>, ReadError> {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    let idle = limits.idle;
    // The first read waits up to the idle timeout and takes as much of the length prefix as
    // has arrived (usually all of it: one syscall, not two).
    let first = tokio::time::timeout(idle, rd.read(&mut prefix))
        .await
        .map_err(|_| ReadError::Idle)??;
    if first == 0 {
        return Ok(None);
    }
    let deadline = tokio::time::Instant::now() + ms(state.config.request_read_timeout_ms);
    tokio::time::timeout_at(deadline, async {
        rd.read_exact(&mut prefix[first..])
            .await
            .map_err(eof_as_truncated)?;
        let len = frame_len(prefix, limits.frame_bytes_max)?;
        read_body(state, rd, len).await.map(Some)
    })
    .await
    .map_err(|_| ReadError::SlowFrame)?
}

/// Read a frame body of `len` bytes, reserving `queued.max.request.bytes` as the bytes arrive
/// (see `FRAME_RESERVE_FIRST_BYTES`, `FRAME_RESERVE_CHUNK_BYTES_MAX`), each further chunk only
/// once more bytes are readable. A peer that announces a large frame and stalls holds 64 KiB,
/// not the frame's length (which let 11 connections of 44 bytes stall every other client).
async fn read_body<R: AsyncRead + Unpin>(
    state: &BrokerState,
    rd: &mut BufReader<R>,
    len: usize,
) -> Result<(Bytes, OwnedSemaphorePermit), ReadError> {
    // One buffer of at least the frame's size if the pool has one (reused for large frames:
    // record bytes are not moved again before the log); otherwise it grows with the data.
    let mut body = state
        .frame_pool
        .take_pooled(len)
        .unwrap_or_else(|| BytesMut::with_capacity(len.min(FRAME_RESERVE_FIRST_BYTES)));
    let mut reserved = len.min(FRAME_RESERVE_FIRST_BYTES);
    let mut permit = reserve(state, reserved).await?;
    loop {
        body.reserve(reserved - body.len());
        let n = (&mut *rd)
            .take((reserved - body.len()) as u64)
            .read_buf(&mut body)
            .await?;
        if n == 0 {
            return Err(ReadError::Truncated);
        }
        if body.len() == len {
            break;
        }
        if body.len() == reserved {
            // Do not hold a reservation for bytes that have not been sent yet (the wait
            // buffers at most READ_BUFFER_BYTES).
            if rd.fill_buf().await?.is_empty() {
                return Err(ReadError::Truncated);
            }
            let chunk = (len - reserved).min(reserved.min(FRAME_RESERVE_CHUNK_BYTES_MAX));
            permit.merge(reserve(state, chunk).await?);
            reserved += chunk;
        }
    }
    Ok((body.freeze(), permit))
}

/// Reserve `bytes` of request memory (in KiB permits, at least one).
async fn reserve(state: &BrokerState, bytes: usize) -> Result<OwnedSemaphorePermit, ReadError> {
    let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
    state
        .request_memory
        .clone()
        .acquire_many_owned(kib)
        .await
        .map_err(|_| ReadError::Io(std::io::ErrorKind::Other.into()))
}

fn eof_as_truncated(e: std::io::Error) -> ReadError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        ReadError::Truncated
    } else {
        ReadError::Io(e)
    }
}

/// Parse the header, find the route and run the handler. `None` = the connection must close.
async fn handle(
    state: &Arc<BrokerState>,
    frame: Bytes,
    permit: OwnedSemaphorePermit,
    peer: SocketAddr,
    listener: (usize, Option<Arc<str>>),
) -> Option<Option<ResponseFrame>> {
    let prefix = match HeaderPrefix::parse(&frame) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "bad request, closing connection");
            return None;
        }
    };
    let (api_key, correlation_id) = (prefix.api_key, prefix.correlation_id);
    let api_version = prefix.api_version;
    let mut client_id = None;
    let mut handler_time = std::time::Duration::ZERO;
    let principal = listener.1.clone();
    let result = match route(frame, prefix, peer, listener) {
        Ok(Routed::Ready(api_key, result)) => (api_key, result),
        Ok(Routed::Handler(api_key, handler, req)) => {
            client_id = req.client_id.clone();
            let started = Instant::now();
            let mut polled = crate::quota::PollTime::new(handler(state.clone(), req));
            let result = AssertUnwindSafe(&mut polled).catch_unwind().await;
            let name = api_name(api_key);
            handler_time = polled.busy();
            metrics::counter!("streamforge_requests_total", "api" => name).increment(1);
            metrics::histogram!("streamforge_request_duration_seconds", "api" => name)
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(result) => (api_key, result),
                Err(_) => {
                    tracing::error!(%peer, api = name, correlation_id, "handler panicked, closing connection");
                    return None;
                }
            }
        }
        Err(e) => {
            tracing::warn!(%peer, api_key, correlation_id, error = %e, "bad request, closing connection");
            return None;
        }
    };
    // The frame's memory reservation ends with its handler.
    drop(permit);
    match result {
        (api_key, Ok(Some(mut resp))) => {
            let who = crate::quota::ClientIdentity {
                user: principal
                    .as_deref()
                    .unwrap_or(crate::security::principal::ANONYMOUS),
                client_id: client_id.as_deref().unwrap_or(""),
            };
            throttle_request(state, api_key, api_version, who, handler_time, &mut resp).await;
            Some(Some(resp))
        }
        (_, Ok(None)) => Some(None),
        (api_key, Err(e)) => {
            let api = api_name(api_key);
            tracing::warn!(%peer, api, correlation_id, error = %e, "request failed, closing connection");
            None
        }
    }
}

/// The request quota (KIP-124; the handler's time in `poll`, not its waits) for every API but
/// Produce and Fetch (their handlers record it with their byte rates, and put the throttle time
/// in the response). These responses keep `throttle_time_ms` 0, so the response itself is
/// delayed: the client waits for it, as Kafka's clients do for versions that predate KIP-219.
async fn throttle_request(
    state: &BrokerState,
    api_key: ApiKey,
    api_version: i16,
    who: crate::quota::ClientIdentity<'_>,
    handler_time: std::time::Duration,
    resp: &mut ResponseFrame,
) {
    let recorded_by_handler = matches!(api_key, ApiKey::Produce | ApiKey::Fetch);
    if !recorded_by_handler && !crate::quota::exempt(api_key) {
        let throttle_ms = state.quotas.record_request_time(who, handler_time);
        resp.throttle_ms = resp.throttle_ms.max(throttle_ms);
    }
    if resp.throttle_ms > 0 && !crate::quota::client_throttles(api_key, api_version) {
        crate::quota::mute_for(&state.shutdown, resp.throttle_ms).await;
        resp.throttle_ms = 0;
    }
}

enum Routed {
    /// Answered without a handler.
    Ready(ApiKey, HandlerResult),
    Handler(ApiKey, router::HandlerFn, RequestFrame),
}

/// Find the request's route and check its version.
fn route(
    frame: Bytes,
    prefix: HeaderPrefix,
    peer: SocketAddr,
    (listener, principal): (usize, Option<Arc<str>>),
) -> Result<Routed, HandlerError> {
    let api_key = ApiKey::try_from(prefix.api_key)
        .ok()
        .filter(|k| router::find(*k).is_some())
        .ok_or_else(|| {
            HandlerError::Close(format!(
                "unsupported api key {} (correlation id {})",
                prefix.api_key, prefix.correlation_id
            ))
        })?;
    let route = router::find(api_key).expect("filtered above");
    if !(route.min_version..=route.max_version).contains(&prefix.api_version) {
        if api_key == ApiKey::ApiVersions {
            // Kafka's quirk: answer in v0 with our range so the client can retry.
            let resp = unsupported_api_versions_response(prefix.correlation_id, route.range());
            return Ok(Routed::Ready(
                api_key,
                resp.map(Some).map_err(HandlerError::from),
            ));
        }
        return Err(HandlerError::Close(format!(
            "{} v{} is not supported (we serve v{}..=v{})",
            api_name(api_key),
            prefix.api_version,
            route.min_version,
            route.max_version
        )));
    }
    let mut req = RequestFrame::parse(frame)?;
    req.client_addr = Some(peer.ip());
    req.listener = listener;
    req.principal = principal;
    Ok(Routed::Handler(api_key, route.handler, req))
}

/// Every response writer must produce one frame whose length prefix is the length of the rest
/// and fits an i32: a wrapped (negative) length desynchronizes the client. Checked once here,
/// before any byte is written, for every writer (encoded bodies and the zero-copy Fetch writer).
fn check_response_frame(response: &ResponseFrame) -> Result<(), String> {
    let total: usize = response.chunks.iter().map(Bytes::len).sum();
    let body_bytes = total
        .checked_sub(FRAME_PREFIX_BYTES)
        .ok_or_else(|| format!("response of {total} bytes has no length prefix"))?;
    if body_bytes > i32::MAX as usize {
        return Err(format!(
            "response of {body_bytes} bytes is over the protocol's limit of {} bytes",
            i32::MAX
        ));
    }
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    let mut filled = 0;
    for chunk in &response.chunks {
        let n = chunk.len().min(FRAME_PREFIX_BYTES - filled);
        prefix[filled..filled + n].copy_from_slice(&chunk[..n]);
        filled += n;
        if filled == FRAME_PREFIX_BYTES {
            break;
        }
    }
    let declared = i32::from_be_bytes(prefix);
    if declared as i64 != body_bytes as i64 {
        return Err(format!(
            "response length prefix {declared} does not match its {body_bytes} bytes"
        ));
    }
    Ok(())
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    wr: &mut W,
    chunks: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    while !chunks.is_empty() {
        let mut n = {
            let slices: Vec<IoSlice<'_>> = chunks
                .iter()
                .take(IOV_CHUNKS_MAX)
                .map(|c| IoSlice::new(c))
                .collect();
            wr.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let Some(front) = chunks.front_mut() else {
                break;
            };
            if n >= front.len() {
                n -= front.len();
                chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
    // A TLS stream holds the last records until flushed (a no-op for TCP).
    wr.flush().await
}

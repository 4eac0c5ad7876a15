//! One client connection: a reader that frames and dispatches requests (pipelined, at most
//! `max_in_flight_requests_per_connection` unanswered), and a writer that sends responses
//! strictly in request order with vectored writes (fetch data is never copied).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ApiKey;
use streamforge_protocol::api_versions::unsupported_api_versions_response;
use streamforge_protocol::frame::{FRAME_PREFIX_BYTES, HeaderPrefix, api_name, frame_len};
use streamforge_protocol::{ProtocolError, RequestFrame, ResponseFrame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::router::{self, HandlerError, HandlerResult};
use crate::{BrokerState, ms};

/// Responses gathered into one vectored write at most.
const WRITE_BATCH_BYTES_MAX: usize = 1024 * 1024;
/// IoSlices per `write_vectored` call (Linux IOV_MAX is 1024).
const IOV_CHUNKS_MAX: usize = 512;

/// A dispatched request whose response is pending.
struct Pending {
    api_key: ApiKey,
    correlation_id: i32,
    handle: JoinHandle<HandlerResult>,
}

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

pub async fn serve(
    state: Arc<BrokerState>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    tracing::debug!(%peer, "connection opened");
    let (rd, wr) = stream.into_split();
    let (tx, rx) =
        mpsc::channel::<Pending>(state.config.max_in_flight_requests_per_connection.max(1));
    let writer = tokio::spawn(write_responses(wr, rx, peer));
    read_requests(&state, rd, &tx, shutdown, peer).await;
    drop(tx);
    let _ = writer.await;
    tracing::debug!(%peer, "connection closed");
}

async fn read_requests(
    state: &Arc<BrokerState>,
    mut rd: OwnedReadHalf,
    tx: &mpsc::Sender<Pending>,
    mut shutdown: watch::Receiver<bool>,
    peer: SocketAddr,
) {
    // Completion of the previously dispatched request: handlers of one connection run one
    // after another, as in Kafka (which mutes a channel until its response is sent), so
    // pipelined Produce requests append in request order.
    let mut previous_done: Option<oneshot::Receiver<()>> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let frame = tokio::select! {
            _ = shutdown.changed() => return,
            _ = tx.closed() => return, // the writer gave up on this connection
            f = read_frame(state, &mut rd) => f,
        };
        let (frame, permit) = match frame {
            Ok(Some(f)) => f,
            Ok(None) => return, // clean EOF between frames
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection");
                return;
            }
        };
        let pending = match dispatch(state, frame, permit, peer, &mut previous_done) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad request, closing connection");
                return;
            }
        };
        if tx.send(pending).await.is_err() {
            return;
        }
    }
}

/// Read one frame: `Ok(None)` on EOF before a new frame starts.
async fn read_frame(
    state: &BrokerState,
    rd: &mut OwnedReadHalf,
) -> Result<Option<(Bytes, OwnedSemaphorePermit)>, ReadError> {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    let idle = ms(state.config.connections_max_idle_ms);
    let first = tokio::time::timeout(idle, rd.read(&mut prefix[..1]))
        .await
        .map_err(|_| ReadError::Idle)??;
    if first == 0 {
        return Ok(None);
    }
    let deadline = tokio::time::Instant::now() + ms(state.config.request_read_timeout_ms);
    tokio::time::timeout_at(deadline, async {
        rd.read_exact(&mut prefix[1..])
            .await
            .map_err(eof_as_truncated)?;
        let len = frame_len(prefix, state.config.socket_request_max_bytes)?;
        // Reserve the frame's memory before allocating it; released when its handler is done.
        let kib = (len.div_ceil(1024) as u32).max(1);
        let permit = state
            .request_memory
            .clone()
            .acquire_many_owned(kib)
            .await
            .map_err(|_| ReadError::Io(std::io::ErrorKind::Other.into()))?;
        // One buffer of at least the frame's size (reused for large frames): record bytes are
        // not moved again before the log.
        let mut body = state.frame_pool.take(len);
        while body.len() < len {
            let missing = len - body.len();
            let n = (&mut *rd).take(missing as u64).read_buf(&mut body).await?;
            if n == 0 {
                return Err(ReadError::Truncated);
            }
        }
        Ok(Some((body.freeze(), permit)))
    })
    .await
    .map_err(|_| ReadError::SlowFrame)?
}

fn eof_as_truncated(e: std::io::Error) -> ReadError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        ReadError::Truncated
    } else {
        ReadError::Io(e)
    }
}

/// Parse the header, find the route and start the handler.
fn dispatch(
    state: &Arc<BrokerState>,
    frame: Bytes,
    permit: OwnedSemaphorePermit,
    peer: SocketAddr,
    previous_done: &mut Option<oneshot::Receiver<()>>,
) -> Result<Pending, HandlerError> {
    let prefix = HeaderPrefix::parse(&frame)?;
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
            return Ok(ready(
                api_key,
                prefix.correlation_id,
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
    let handler = route.handler;
    let state = state.clone();
    let correlation_id = req.correlation_id;
    let after = previous_done.take();
    let (done_tx, done_rx) = oneshot::channel();
    *previous_done = Some(done_rx);
    let handle = tokio::spawn(async move {
        if let Some(after) = after {
            // An error means the previous handler ended without signalling (it failed or
            // was aborted); either way it is no longer running.
            let _ = after.await;
        }
        let started = Instant::now();
        let result = handler(state, req).await;
        drop(permit);
        let _ = done_tx.send(());
        let name = api_name(api_key);
        metrics::counter!("streamforge_requests_total", "api" => name).increment(1);
        metrics::histogram!("streamforge_request_duration_seconds", "api" => name)
            .record(started.elapsed().as_secs_f64());
        result
    });
    Ok(Pending {
        api_key,
        correlation_id,
        handle,
    })
}

fn ready(api_key: ApiKey, correlation_id: i32, result: HandlerResult) -> Pending {
    Pending {
        api_key,
        correlation_id,
        handle: tokio::spawn(async move { result }),
    }
}

/// Send responses in request order, batching those already complete into one write.
async fn write_responses(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Pending>,
    peer: SocketAddr,
) {
    let mut carry: Option<Pending> = None;
    let mut out: VecDeque<Bytes> = VecDeque::new();
    'outer: loop {
        let first = match carry.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => break,
            },
        };
        let mut out_bytes = 0;
        let mut next = Some(first);
        while let Some(p) = next.take() {
            match finish(p, peer).await {
                Some(Some(frame)) => {
                    out_bytes += frame.len_bytes();
                    out.extend(frame.chunks);
                }
                Some(None) => {}
                None => {
                    // Flush what was answered before the failing request, then close.
                    let _ = write_all_vectored(&mut wr, &mut out).await;
                    break 'outer;
                }
            }
            if out_bytes >= WRITE_BATCH_BYTES_MAX {
                break;
            }
            if let Ok(p) = rx.try_recv() {
                if p.handle.is_finished() {
                    next = Some(p);
                } else {
                    carry = Some(p);
                }
            }
        }
        if let Err(e) = write_all_vectored(&mut wr, &mut out).await {
            tracing::debug!(%peer, error = %e, "write failed");
            break;
        }
    }
    // Abort handlers whose responses will never be sent.
    rx.close();
    while let Ok(p) = rx.try_recv() {
        p.handle.abort();
    }
    if let Some(p) = carry {
        p.handle.abort();
    }
    let _ = wr.shutdown().await;
}

/// Await one handler. `None` = the connection must close.
async fn finish(p: Pending, peer: SocketAddr) -> Option<Option<ResponseFrame>> {
    let name = api_name(p.api_key);
    match p.handle.await {
        Ok(Ok(resp)) => Some(resp),
        Ok(Err(e)) => {
            tracing::warn!(%peer, api = name, correlation_id = p.correlation_id, error = %e, "request failed, closing connection");
            None
        }
        Err(e) => {
            tracing::error!(%peer, api = name, correlation_id = p.correlation_id, error = %e, "handler panicked, closing connection");
            None
        }
    }
}

async fn write_all_vectored(
    wr: &mut OwnedWriteHalf,
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
    Ok(())
}

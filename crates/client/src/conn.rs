//! One TCP connection to a broker: framing, correlation ids, ApiVersions negotiation and
//! pipelined requests (many in flight, answered in order by the broker).
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tracing::{debug, warn};

use crate::buffers::BufferPool;
use crate::error::{ClientError, Result};
use kafka_protocol::ResponseError;

/// Largest response frame we accept (fetch responses are bounded by `fetch.max.bytes`).
pub const MAX_RESPONSE_FRAME_BYTES: usize = 256 * 1024 * 1024;
/// Requests queued for the writer task beyond those in flight.
pub const MAX_QUEUED_REQUESTS: usize = 1024;
/// Write buffer of the connection; frames larger than this bypass it.
const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// Highest ApiVersions version this client speaks.
const API_VERSIONS_MAX_VERSION: i16 = 3;

/// Settings for one connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    pub client_id: String,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Requests sent but not yet answered, per connection.
    pub max_in_flight_requests: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            client_id: "streamforge-client".into(),
            request_timeout_ms: 30_000,
            connect_timeout_ms: 10_000,
            max_in_flight_requests: 64,
        }
    }
}

type ResponseTx = oneshot::Sender<Result<Bytes>>;

struct Pending {
    correlation_id: i32,
    tx: ResponseTx,
    _permit: OwnedSemaphorePermit,
}

struct Outgoing {
    frame: Bytes,
    pending: Option<Pending>,
}

/// A connection to one broker. Cheap to share (`Arc`); requests from many tasks are pipelined.
pub struct Connection {
    addr: String,
    config: ConnectionConfig,
    tx: mpsc::Sender<Outgoing>,
    in_flight: Arc<Semaphore>,
    next_correlation_id: AtomicI32,
    /// Broker-supported version range per api key.
    versions: HashMap<i16, (i16, i16)>,
    closed: Arc<AtomicBool>,
    shutdown_tx: Arc<watch::Sender<bool>>,
    /// Reused buffers for large request and response frames.
    pool: Arc<BufferPool>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}

impl Connection {
    /// Connects and negotiates API versions.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Self> {
        let io_err = |source| ClientError::Io {
            addr: addr.to_string(),
            source,
        };
        let stream = tokio::time::timeout(
            Duration::from_millis(config.connect_timeout_ms),
            TcpStream::connect(addr),
        )
        .await
        .map_err(|_| ClientError::Timeout(config.connect_timeout_ms))?
        .map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::channel(MAX_QUEUED_REQUESTS);
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shutdown_tx = Arc::new(shutdown_tx);
        let closed = Arc::new(AtomicBool::new(false));
        let pool = Arc::new(BufferPool::default());
        let w = WriterCtx {
            addr: addr.to_string(),
            shutdown_tx: shutdown_tx.clone(),
            closed: closed.clone(),
        };
        tokio::spawn(write_loop(
            w,
            write,
            rx,
            pending_tx,
            shutdown_rx.clone(),
            pool.clone(),
        ));
        let r = WriterCtx {
            addr: addr.to_string(),
            shutdown_tx: shutdown_tx.clone(),
            closed: closed.clone(),
        };
        tokio::spawn(read_loop(r, read, pending_rx, shutdown_rx, pool.clone()));
        let mut conn = Self {
            addr: addr.to_string(),
            in_flight: Arc::new(Semaphore::new(config.max_in_flight_requests.max(1))),
            config,
            tx,
            next_correlation_id: AtomicI32::new(0),
            versions: HashMap::new(),
            closed,
            shutdown_tx,
            pool,
        };
        conn.versions = conn.negotiate_versions().await?;
        debug!(addr, apis = conn.versions.len(), "connected");
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The broker's supported range for an api key, if any.
    pub fn broker_versions(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions.get(&api_key).copied()
    }

    /// The highest version both sides support, capped at `our_max`.
    pub fn version_for<R: Request>(&self, our_max: i16) -> Result<i16> {
        let (bmin, bmax) = self
            .broker_versions(R::KEY)
            .ok_or(ClientError::UnsupportedApi {
                api: api_name(R::KEY),
                key: R::KEY,
            })?;
        let v = bmax.min(our_max).min(R::VERSIONS.max);
        if v < bmin.max(R::VERSIONS.min) {
            return Err(ClientError::UnsupportedApi {
                api: api_name(R::KEY),
                key: R::KEY,
            });
        }
        Ok(v)
    }

    async fn negotiate_versions(&self) -> Result<HashMap<i16, (i16, i16)>> {
        let mut version = API_VERSIONS_MAX_VERSION;
        for _attempt in 0..2 {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("streamforge-client"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            let frame = self.encode_request(&req, version)?;
            let mut body = self.round_trip(frame.0, frame.1).await?;
            // ApiVersions responses always use response header v0 (correlation id only).
            body.advance(4);
            if body.len() < 2 {
                return Err(ClientError::Protocol("short ApiVersions response".into()));
            }
            let code = i16::from_be_bytes([body[0], body[1]]);
            if code == ResponseError::UnsupportedVersion.code() {
                // The broker answered in the v0 format with its own range.
                let resp = ApiVersionsResponse::decode(&mut body, 0).map_err(proto_err)?;
                let ours = resp
                    .api_keys
                    .iter()
                    .find(|k| k.api_key == ApiVersionsRequest::KEY);
                version = ours
                    .map(|k| k.max_version.min(API_VERSIONS_MAX_VERSION))
                    .unwrap_or(0);
                continue;
            }
            let resp = ApiVersionsResponse::decode(&mut body, version).map_err(proto_err)?;
            ClientError::check(resp.error_code, || "ApiVersions".into())?;
            return Ok(resp
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect());
        }
        Err(ClientError::Protocol(
            "ApiVersions negotiation failed".into(),
        ))
    }

    fn encode_request<R: Request>(&self, req: &R, version: i16) -> Result<(Bytes, i32)> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.config.client_id.clone())));
        let header_version = R::header_version(version);
        let size = header.compute_size(header_version).map_err(proto_err)?
            + req.compute_size(version).map_err(proto_err)?;
        let mut buf = self.pool.take(size + 4);
        buf.put_u32(size as u32);
        header.encode(&mut buf, header_version).map_err(proto_err)?;
        req.encode(&mut buf, version).map_err(proto_err)?;
        Ok((buf.freeze(), correlation_id))
    }

    /// Sends a request and waits for its response.
    pub async fn send<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        let (frame, correlation_id) = self.encode_request(req, version)?;
        let mut body = self.round_trip(frame, correlation_id).await?;
        ResponseHeader::decode(
            &mut body,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .map_err(proto_err)?;
        <R::Response as Decodable>::decode(&mut body, version).map_err(proto_err)
    }

    /// Sends a request the broker does not answer (Produce with acks=0).
    pub async fn send_no_response<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        let (frame, _) = self.encode_request(req, version)?;
        self.check_open()?;
        self.tx
            .send(Outgoing {
                frame,
                pending: None,
            })
            .await
            .map_err(|_| ClientError::ConnectionClosed(self.addr.clone()))
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(ClientError::ConnectionClosed(self.addr.clone()))
        } else {
            Ok(())
        }
    }

    /// Puts `req` on the connection now and returns a future for its response. Requests go out in
    /// the order of the calls to this method (each awaited before the next), while their
    /// responses may be awaited concurrently: an idempotent producer needs a partition's batches
    /// to reach the broker in sequence order.
    pub async fn send_in_order<R>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<impl std::future::Future<Output = Result<R::Response>> + Send + 'static + use<R>>
    where
        R: Request,
        R::Response: Send + 'static,
    {
        let (frame, correlation_id) = self.encode_request(req, version)?;
        let rx = self.enqueue(frame, correlation_id).await?;
        let addr = self.addr.clone();
        let timeout_ms = self.config.request_timeout_ms;
        Ok(async move {
            let mut body = await_response(rx, addr, timeout_ms).await?;
            ResponseHeader::decode(
                &mut body,
                <R::Response as HeaderVersion>::header_version(version),
            )
            .map_err(proto_err)?;
            <R::Response as Decodable>::decode(&mut body, version).map_err(proto_err)
        })
    }

    /// Sends a frame and returns the response (header and body).
    async fn round_trip(&self, frame: Bytes, correlation_id: i32) -> Result<Bytes> {
        let rx = self.enqueue(frame, correlation_id).await?;
        await_response(rx, self.addr.clone(), self.config.request_timeout_ms).await
    }

    /// Registers the response slot and hands the frame to the writer task.
    async fn enqueue(
        &self,
        frame: Bytes,
        correlation_id: i32,
    ) -> Result<oneshot::Receiver<Result<Bytes>>> {
        self.check_open()?;
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Closed)?;
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            correlation_id,
            tx,
            _permit: permit,
        };
        self.tx
            .send(Outgoing {
                frame,
                pending: Some(pending),
            })
            .await
            .map_err(|_| ClientError::ConnectionClosed(self.addr.clone()))?;
        Ok(rx)
    }
}

async fn await_response(
    rx: oneshot::Receiver<Result<Bytes>>,
    addr: String,
    timeout_ms: u64,
) -> Result<Bytes> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), rx).await {
        Err(_) => Err(ClientError::Timeout(timeout_ms)),
        Ok(Err(_)) => Err(ClientError::ConnectionClosed(addr)),
        Ok(Ok(r)) => r,
    }
}

fn proto_err(e: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(e.to_string())
}

/// What the I/O tasks share: on failure either one marks the connection closed and stops the other.
struct WriterCtx {
    addr: String,
    shutdown_tx: Arc<watch::Sender<bool>>,
    closed: Arc<AtomicBool>,
}

impl WriterCtx {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.shutdown_tx.send(true);
    }
}

async fn write_loop(
    ctx: WriterCtx,
    write: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Outgoing>,
    pending_tx: mpsc::UnboundedSender<Pending>,
    mut shutdown: watch::Receiver<bool>,
    pool: Arc<BufferPool>,
) {
    let addr = &ctx.addr;
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write);
    loop {
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = shutdown.changed() => None,
        };
        let Some(mut msg) = msg else { break };
        let mut failed = false;
        loop {
            if let Some(p) = msg.pending.take()
                && pending_tx.send(p).is_err()
            {
                failed = true;
                break;
            }
            if let Err(e) = w.write_all(&msg.frame).await {
                warn!(addr, error = %e, "write failed");
                failed = true;
                break;
            }
            pool.give(msg.frame);
            match rx.try_recv() {
                Ok(next) => msg = next,
                Err(_) => break,
            }
        }
        if failed || w.flush().await.is_err() {
            break;
        }
    }
    ctx.close();
    let _ = w.shutdown().await;
}

async fn read_loop(
    ctx: WriterCtx,
    mut read: OwnedReadHalf,
    mut pending_rx: mpsc::UnboundedReceiver<Pending>,
    mut shutdown: watch::Receiver<bool>,
    pool: Arc<BufferPool>,
) {
    let addr = &ctx.addr;
    let result = tokio::select! {
        r = read_frames(&mut read, &mut pending_rx, &pool) => r,
        _ = shutdown.changed() => Ok(()),
    };
    if let Err(e) = &result {
        debug!(addr, error = %e, "connection reader stopped");
    }
    ctx.close();
    pending_rx.close();
    while let Ok(p) = pending_rx.try_recv() {
        let _ = p.tx.send(Err(ClientError::ConnectionClosed(addr.clone())));
    }
}

async fn read_frames(
    read: &mut OwnedReadHalf,
    pending_rx: &mut mpsc::UnboundedReceiver<Pending>,
    pool: &BufferPool,
) -> Result<()> {
    let io = |source| ClientError::Io {
        addr: "broker".into(),
        source,
    };
    loop {
        let len = match read.read_u32().await {
            Ok(n) => n as usize,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        if !(4..=MAX_RESPONSE_FRAME_BYTES).contains(&len) {
            return Err(ClientError::Protocol(format!(
                "response frame of {len} bytes"
            )));
        }
        // Read into spare capacity: no zero-fill of large fetch responses.
        let mut buf = pool.take(len);
        while buf.len() < len {
            let missing = (len - buf.len()) as u64;
            let n = (&mut *read)
                .take(missing)
                .read_buf(&mut buf)
                .await
                .map_err(io)?;
            if n == 0 {
                return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        // Peek only: `send` decodes the whole response header (v0 or v1).
        let body = buf.freeze();
        pool.watch(&body);
        let correlation_id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let Some(p) = pending_rx.recv().await else {
            return Err(ClientError::Protocol("response without a request".into()));
        };
        if p.correlation_id != correlation_id {
            let msg = format!(
                "correlation id {correlation_id}, expected {}",
                p.correlation_id
            );
            let _ = p.tx.send(Err(ClientError::Protocol(msg.clone())));
            return Err(ClientError::Protocol(msg));
        }
        let _ = p.tx.send(Ok(body));
    }
}

/// A readable name for an api key (for errors and logs).
pub fn api_name(key: i16) -> &'static str {
    kafka_protocol::messages::ApiKey::try_from(key)
        .map(api_key_name)
        .unwrap_or("unknown API")
}

fn api_key_name(k: kafka_protocol::messages::ApiKey) -> &'static str {
    use kafka_protocol::messages::ApiKey::*;
    match k {
        Produce => "Produce",
        Fetch => "Fetch",
        ListOffsets => "ListOffsets",
        Metadata => "Metadata",
        OffsetCommit => "OffsetCommit",
        OffsetFetch => "OffsetFetch",
        FindCoordinator => "FindCoordinator",
        JoinGroup => "JoinGroup",
        Heartbeat => "Heartbeat",
        LeaveGroup => "LeaveGroup",
        SyncGroup => "SyncGroup",
        DescribeGroups => "DescribeGroups",
        ListGroups => "ListGroups",
        ApiVersions => "ApiVersions",
        CreateTopics => "CreateTopics",
        DeleteTopics => "DeleteTopics",
        DeleteRecords => "DeleteRecords",
        InitProducerId => "InitProducerId",
        DescribeConfigs => "DescribeConfigs",
        AlterConfigs => "AlterConfigs",
        CreatePartitions => "CreatePartitions",
        DeleteGroups => "DeleteGroups",
        IncrementalAlterConfigs => "IncrementalAlterConfigs",
        DescribeCluster => "DescribeCluster",
        _ => "other API",
    }
}

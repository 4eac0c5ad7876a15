//! What the quorum listener's connections run over: plain TCP by default, or whatever a
//! [`QuorumSecurity`] wraps them in (the broker injects TLS, Kafka's `SSL` controller
//! listener). The Raft RPCs, forwarded controller events and observer joins are the same
//! frames either way; this crate never sees certificates.
//!
//! A node whose controller listener speaks another protocol than its peer's fails clearly on
//! both sides instead of hanging: the listener looks at the first byte a peer sends (a TLS
//! record starts with 0x16, a frame's length prefix never does, see `RPC_FRAME_BYTES_MAX`).
//! A TLS listener answers a plaintext peer with a [`Response::Refused`](super::tcp::Response)
//! frame it can read; a plaintext listener closes a TLS peer's connection, whose handshake
//! then fails. Both sides log the reason at error level ([`Transport::report`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connection of the quorum listener: TCP, or TLS over TCP.
pub trait QuorumIo: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> QuorumIo for T {}

pub type QuorumStream = Box<dyn QuorumIo>;

/// A boxed future of the transport's handshakes.
pub type Handshake<'a> = Pin<Box<dyn Future<Output = std::io::Result<QuorumStream>> + Send + 'a>>;

/// How connections of the quorum listener are secured: the client side (`connect`, after TCP
/// connected to `addr`) and the server side (`accept`, after the listener accepted).
pub trait QuorumSecurity: Send + Sync + 'static {
    /// Kafka's security protocol name of the controller listener (`PLAINTEXT`, `SSL`).
    fn protocol_name(&self) -> &'static str;
    /// Whether the connection starts with a TLS handshake.
    fn is_tls(&self) -> bool;
    fn connect<'a>(&'a self, tcp: TcpStream, addr: &'a str) -> Handshake<'a>;
    fn accept(&self, tcp: TcpStream) -> Handshake<'_>;
}

/// Plain TCP (Kafka's `PLAINTEXT`), the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Plaintext;

impl QuorumSecurity for Plaintext {
    fn protocol_name(&self) -> &'static str {
        "PLAINTEXT"
    }
    fn is_tls(&self) -> bool {
        false
    }
    fn connect<'a>(&'a self, tcp: TcpStream, _addr: &'a str) -> Handshake<'a> {
        Box::pin(async move { Ok(Box::new(tcp) as QuorumStream) })
    }
    fn accept(&self, tcp: TcpStream) -> Handshake<'_> {
        Box::pin(async move { Ok(Box::new(tcp) as QuorumStream) })
    }
}

/// Longest time a peer may take to send its first bytes and finish the handshake.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// A security failure (protocol mismatch, refused certificate) is logged at most this often
/// per transport: peers retry every few milliseconds.
pub const SECURITY_LOG_INTERVAL_MS: u64 = 5_000;

/// The first byte of a TLS handshake record (a ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Why a connection was refused for its security: the peers' controller listeners speak
/// different protocols, or the TLS handshake failed (certificate not trusted, ...).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SecurityFailure(pub String);

/// An I/O error carrying a [`SecurityFailure`].
pub fn security_failure(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        SecurityFailure(message.into()),
    )
}

/// Whether `error` is a [`SecurityFailure`] (configuration, not a passing network fault).
pub fn is_security_failure(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|e| e.downcast_ref::<SecurityFailure>().is_some())
}

/// What a peer's first byte says it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstByte {
    Tls,
    Plaintext,
}

impl FirstByte {
    pub fn of(byte: u8) -> FirstByte {
        if byte == TLS_HANDSHAKE_RECORD {
            FirstByte::Tls
        } else {
            FirstByte::Plaintext
        }
    }
}

/// The quorum listener's security, shared by its server, its Raft clients, the forward pool
/// and observer joins.
#[derive(Clone)]
pub struct Transport {
    security: Arc<dyn QuorumSecurity>,
    last_logged: Arc<Mutex<Option<Instant>>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Transport")
            .field(&self.security.protocol_name())
            .finish()
    }
}

impl Default for Transport {
    fn default() -> Self {
        Transport::new(Arc::new(Plaintext))
    }
}

impl Transport {
    pub fn new(security: Arc<dyn QuorumSecurity>) -> Transport {
        Transport {
            security,
            last_logged: Arc::default(),
        }
    }

    pub fn protocol_name(&self) -> &'static str {
        self.security.protocol_name()
    }

    pub fn is_tls(&self) -> bool {
        self.security.is_tls()
    }

    /// Open a connection to the quorum listener at `addr` (TCP, then the handshake).
    pub async fn open(&self, addr: &str) -> std::io::Result<QuorumStream> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let handshake = self.security.connect(tcp, addr);
        let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
        match tokio::time::timeout(timeout, handshake).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{} handshake with {addr} timed out", self.protocol_name()),
            )),
        }
    }

    /// The server side of an accepted connection: `Ok(Accepted::Stream)` to serve, or
    /// `Ok(Accepted::PlaintextPeer)` when a plaintext peer reached a TLS listener (the caller
    /// answers it with a refusal it can read).
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<Accepted> {
        let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
        let handshake = async {
            let mut first = [0u8; 1];
            if tcp.peek(&mut first).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            match (FirstByte::of(first[0]), self.is_tls()) {
                (FirstByte::Plaintext, true) => Ok(Accepted::PlaintextPeer(tcp)),
                (FirstByte::Tls, false) => Err(security_failure(format!(
                    "a peer opened a TLS handshake on this PLAINTEXT controller listener: its controller listener security protocol is SSL, this node's is PLAINTEXT ({})",
                    tcp.peer_addr()
                        .map_or_else(|e| e.to_string(), |a| a.to_string())
                ))),
                _ => Ok(Accepted::Stream(self.security.accept(tcp).await?)),
            }
        };
        match tokio::time::timeout(timeout, handshake).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "controller listener handshake timed out",
            )),
        }
    }

    /// Log `error` from the exchange with `peer`: a security failure at error level (at most
    /// every [`SECURITY_LOG_INTERVAL_MS`]), anything else at debug level.
    pub fn report(&self, peer: &str, what: &str, error: &std::io::Error) {
        if !is_security_failure(error) {
            tracing::debug!(%error, peer, "{what}");
            return;
        }
        let now = Instant::now();
        let interval = Duration::from_millis(SECURITY_LOG_INTERVAL_MS);
        {
            let mut last = self.last_logged.lock();
            if last.is_some_and(|t| now.duration_since(t) < interval) {
                return;
            }
            *last = Some(now);
        }
        tracing::error!(
            %error,
            peer,
            protocol = self.protocol_name(),
            "{what}: controller listener security failure"
        );
    }
}

/// An accepted connection after the server side of the handshake.
pub enum Accepted {
    Stream(QuorumStream),
    /// A plaintext peer on a TLS listener (not served: answered with a refusal, then closed).
    PlaintextPeer(TcpStream),
}

/// Whether an idle connection is still usable: reading from it would wait. End of stream means
/// the peer closed it, and bytes nobody asked for mean it is out of step. Polled once with a
/// waker that does nothing (a TLS layer consumes its own records, such as session tickets,
/// and reports no data).
pub fn is_idle_open(stream: &mut QuorumStream) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    matches!(Pin::new(stream).poll_read(&mut cx, &mut buf), Poll::Pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_record_and_a_frame_length_prefix_differ_in_their_first_byte() {
        assert_eq!(FirstByte::of(0x16), FirstByte::Tls);
        // A frame's length prefix is at most RPC_FRAME_BYTES_MAX (32 MiB): its first byte is
        // 0x00..=0x02.
        let largest = (super::super::tcp::RPC_FRAME_BYTES_MAX as u32).to_be_bytes();
        assert!(largest[0] < 0x16);
        assert_eq!(FirstByte::of(largest[0]), FirstByte::Plaintext);
        assert_eq!(FirstByte::of(0), FirstByte::Plaintext);
    }

    #[test]
    fn only_security_failures_are_security_failures() {
        assert!(is_security_failure(&security_failure("mismatch")));
        assert!(!is_security_failure(&std::io::Error::other("reset")));
        let kind = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!is_security_failure(&kind));
    }

    #[test]
    fn the_default_transport_is_plaintext() {
        let t = Transport::default();
        assert_eq!(t.protocol_name(), "PLAINTEXT");
        assert!(!t.is_tls());
    }
}

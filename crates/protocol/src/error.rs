//! Protocol-level errors and the Kafka error codes StreamForge returns.

/// Errors while parsing frames and headers. Each one closes only the offending connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("frame size {size} is negative or zero")]
    InvalidFrameSize { size: i32 },
    #[error("frame of {size_bytes} bytes exceeds socket.request.max.bytes {max_bytes}")]
    FrameTooLarge { size_bytes: usize, max_bytes: usize },
    #[error("truncated request header ({have_bytes} bytes)")]
    TruncatedHeader { have_bytes: usize },
    #[error("malformed request header: {0}")]
    MalformedHeader(String),
    #[error("malformed {api} v{version} request body: {reason}")]
    MalformedBody {
        api: &'static str,
        version: i16,
        reason: String,
    },
    #[error("cannot encode {api} v{version} response: {reason}")]
    Encode {
        api: &'static str,
        version: i16,
        reason: String,
    },
}

/// The one Kafka error-code enum is `kafka_protocol::ResponseError` (re-exported from this
/// crate's root). `ErrorCode` is the same type under the name the handlers used before; new
/// code says `ResponseError`. "No error" is code 0, which `ResponseError` has no variant for.
pub use kafka_protocol::ResponseError as ErrorCode;

//! The Kafka wire protocol as StreamForge speaks it: framing, request/response headers, the
//! ApiVersions quirks, and a zero-copy Fetch response writer. No I/O lives here (sans-io):
//! the broker reads bytes from sockets and hands frozen frames to this crate.
#![forbid(unsafe_code)]

pub mod api_versions;
pub mod batch;
pub mod clock;
pub mod control;
pub mod decompress;
pub mod error;
pub mod error_codes;
pub mod fetch_writer;
pub mod frame;
pub mod guarded_buf;
pub mod malformed;
pub mod validate;

pub use error::{ErrorCode, ProtocolError};
pub use frame::{RequestFrame, ResponseFrame};
pub use kafka_protocol::ResponseError;

/// Re-export of the generated message types so dependants use one version of them.
pub use kafka_protocol;

//! Shared harness code for the fuzz targets: the broker's request path without the broker crate
//! (which would drag the HTTP server, object store clients and the whole runtime into every
//! sanitizer build), decoding each request exactly as `crates/broker/src/connection.rs` and the
//! handlers do: `HeaderPrefix::parse`, the routing table's version check, `RequestFrame::parse`,
//! then `RequestFrame::decode::<T>()` (the count-guarded decoder).
//!
//! Every decoded value is also checked to round-trip: encode at the same version, decode again,
//! compare.
#![forbid(unsafe_code)]

pub mod batches;
pub mod logdir;
pub mod requests;
pub mod served;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};

/// Inputs larger than this are ignored: the broker's frames are bounded by
/// `socket.request.max.bytes`, and the fuzzer's speed matters more than huge inputs.
pub const INPUT_BYTES_MAX: usize = 1 << 20;

/// Encode `value` at `version` and decode it again; the result must equal `value`.
/// An encode error is allowed (some decoded values cannot be re-encoded at every version,
/// e.g. a null where the encoder wants a value); a decode error of our own encoding is not.
pub fn assert_round_trip<T>(value: &T, version: i16)
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug,
{
    let mut buf = BytesMut::new();
    if value.encode(&mut buf, version).is_err() {
        return;
    }
    let size = value
        .compute_size(version)
        .expect("compute_size fails after a successful encode");
    assert_eq!(size, buf.len(), "compute_size disagrees with encode");
    let mut bytes: Bytes = buf.freeze();
    let back = T::decode(&mut bytes, version).expect("our own encoding does not decode");
    assert_eq!(&back, value, "decode(encode(x)) != x at version {version}");
    assert!(
        bytes.is_empty(),
        "decoding our own encoding left bytes over"
    );
}

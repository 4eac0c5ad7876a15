//! Defence against absurd element counts inside request bodies.
//!
//! The generated decoders call `Vec::with_capacity(count)` with the count read from the wire
//! before reading any element; a count of ~2^31 asks for more memory than the machine has and
//! the allocation failure aborts the whole process. Every element takes at least one byte, so
//! a count larger than the bytes left is always malformed. This buffer wrapper enforces that:
//!
//! - Compact (flexible-version) counts and lengths are unsigned varints read byte by byte; the
//!   wrapper reassembles them and fails the read of the last byte when the value exceeds the
//!   bytes left, so the decoder stops before allocating.
//! - Classic counts are plain int32s, indistinguishable from int32 fields by position. Values
//!   that are larger than the bytes left (and than `SUSPICIOUS_I32_MIN`) are "suspicious". The
//!   body is first decoded with every suspicious value replaced by 0 and then by 1: a plain
//!   field does not change what the decoder reads next, a count does (one element is at least
//!   one read). Both runs record a trace of every read (where it started and how many bytes it
//!   took); only when the traces are identical is the body decoded with the real values.
//!   Comparing only the bytes consumed is not enough: the fuzzer found a CreateTopics v3 body
//!   where one assignment (8 bytes) in the second run took exactly as many bytes as two empty
//!   configs in the first.

use bytes::{Buf, Bytes, TryGetError};
use kafka_protocol::protocol::buf::ByteBuf;

/// int32 values below this are harmless even as counts (allocation of at most a few MiB).
pub const SUSPICIOUS_I32_MIN: i32 = 1 << 16;

/// The most bytes kafka-protocol reads for one unsigned varint (a u32).
const UNSIGNED_VARINT_BYTES_MAX: u32 = 5;

/// FNV-1a 64-bit offset basis and prime, for the read trace.
const TRACE_SEED: u64 = 0xcbf2_9ce4_8422_2325;
const TRACE_PRIME: u64 = 0x0000_0100_0000_01b3;

/// How suspicious int32 values are reported to the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum I32Mode {
    Real,
    Replace(i32),
}

/// A `Bytes` body with count checks; slices it hands out stay zero-copy.
pub struct GuardedBuf {
    inner: Bytes,
    mode: I32Mode,
    /// Suspicious int32 values seen so far.
    pub suspicious: usize,
    varint_value: u64,
    varint_shift: u32,
    /// FNV-1a hash of every read `(bytes left before it, bytes taken)`, in order.
    trace: u64,
}

impl GuardedBuf {
    pub fn new(inner: Bytes, mode: I32Mode) -> GuardedBuf {
        GuardedBuf {
            inner,
            mode,
            suspicious: 0,
            varint_value: 0,
            varint_shift: 0,
            trace: TRACE_SEED,
        }
    }
}

impl GuardedBuf {
    /// Record a read of `taken` bytes starting with `self.remaining()` bytes left.
    fn record(&mut self, taken: usize) {
        for v in [self.inner.remaining() as u64, taken as u64] {
            self.trace = (self.trace ^ v).wrapping_mul(TRACE_PRIME);
        }
    }
}

fn rejected(available: usize) -> TryGetError {
    // The decoder turns this into an error; `requested` is only informative.
    TryGetError {
        requested: usize::MAX,
        available,
    }
}

impl Buf for GuardedBuf {
    fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    fn chunk(&self) -> &[u8] {
        self.inner.chunk()
    }

    fn advance(&mut self, cnt: usize) {
        self.record(cnt);
        self.inner.advance(cnt)
    }

    fn try_get_u8(&mut self) -> Result<u8, TryGetError> {
        self.record(1);
        let b = self.inner.try_get_u8()?;
        // Single bytes are booleans or varint pieces; only multi-byte varints can be absurd.
        if self.varint_shift < 64 {
            self.varint_value |= u64::from(b & 0x7f) << self.varint_shift;
        }
        self.varint_shift += 7;
        // kafka-protocol's unsigned varint reader stops after 5 bytes even when the fifth has
        // its continuation bit set, so the fifth byte ends a varint too (or that count would
        // reach the decoder unchecked; varlongs never occur in request bodies).
        if b & 0x80 == 0 || self.varint_shift >= UNSIGNED_VARINT_BYTES_MAX * 7 {
            let value = self.varint_value;
            let multi_byte = self.varint_shift > 7;
            self.varint_value = 0;
            self.varint_shift = 0;
            // Compact lengths/counts are stored +1.
            if multi_byte && value > self.inner.remaining() as u64 + 1 {
                return Err(rejected(self.inner.remaining()));
            }
        }
        Ok(b)
    }

    fn try_get_i8(&mut self) -> Result<i8, TryGetError> {
        self.record(1);
        self.inner.try_get_i8()
    }

    fn try_get_i32(&mut self) -> Result<i32, TryGetError> {
        self.record(4);
        let v = self.inner.try_get_i32()?;
        if v >= SUSPICIOUS_I32_MIN && v as usize > self.inner.remaining() {
            self.suspicious += 1;
            if let I32Mode::Replace(r) = self.mode {
                return Ok(r);
            }
        }
        Ok(v)
    }
}

impl ByteBuf for GuardedBuf {
    fn peek_bytes(&mut self, r: std::ops::Range<usize>) -> Bytes {
        self.inner.slice(r)
    }

    fn get_bytes(&mut self, size: usize) -> Bytes {
        self.record(size);
        self.inner.split_to(size)
    }
}

/// Decode `body` safely; see the module docs. `decode` is the generated decoder.
pub fn decode_guarded<T, E>(
    body: &Bytes,
    mut decode: impl FnMut(&mut GuardedBuf) -> Result<T, E>,
) -> Result<T, GuardError<E>> {
    let mut a = GuardedBuf::new(body.clone(), I32Mode::Replace(0));
    let first = decode(&mut a).map_err(GuardError::Decode)?;
    if a.suspicious == 0 {
        // Nothing was replaced: this is the real decoding.
        return Ok(first);
    }
    let mut b = GuardedBuf::new(body.clone(), I32Mode::Replace(1));
    let second_ok = decode(&mut b).is_ok();
    if !second_ok || a.trace != b.trace || a.remaining() != b.remaining() {
        return Err(GuardError::AbsurdCount);
    }
    let mut real = GuardedBuf::new(body.clone(), I32Mode::Real);
    decode(&mut real).map_err(GuardError::Decode)
}

/// Why a guarded decode failed.
#[derive(Debug)]
pub enum GuardError<E> {
    AbsurdCount,
    Decode(E),
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use kafka_protocol::messages::{FetchRequest, MetadataRequest};
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn decode<T: Decodable>(body: &Bytes, version: i16) -> Result<T, GuardError<String>> {
        decode_guarded(body, |b| T::decode(b, version).map_err(|e| e.to_string()))
    }

    #[test]
    fn absurd_classic_array_count_is_rejected_without_allocating() {
        let mut body = bytes::BytesMut::new();
        body.put_i32(i32::MAX); // topics count
        let r = decode::<MetadataRequest>(&body.freeze(), 1);
        assert!(matches!(r, Err(GuardError::AbsurdCount)));
    }

    #[test]
    fn absurd_compact_array_count_is_rejected() {
        let mut body = bytes::BytesMut::new();
        body.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // varint u32::MAX
        let r = decode::<MetadataRequest>(&body.freeze(), 9);
        assert!(matches!(r, Err(GuardError::Decode(_))));
    }

    #[test]
    fn absurd_compact_count_with_a_continued_fifth_byte_is_rejected() {
        // Found by fuzz/fuzz_targets/metadata_request.rs: the decoder stops after five bytes
        // whatever the fifth says, so this is a count of ~2^32 that used to reach
        // `Vec::with_capacity` and abort the broker on a 16-byte request.
        let body = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff]);
        let r = decode::<MetadataRequest>(&body, 12);
        assert!(matches!(r, Err(GuardError::Decode(_))));
    }

    /// A CreateTopics v3 body found by fuzz/create_topics_request: assignments count 0x41000000;
    /// as 0 the body reads two empty configs (8 bytes), as 1 one assignment (8 bytes), so both
    /// runs consumed the same bytes and the real count reached `Vec::with_capacity` (61 GB).
    pub(crate) const CREATE_TOPICS_V3_COMPENSATED_COUNT: &[u8] = &[
        0, 0, 0, 0x1, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0, 0, 0, 0, 0, 0, 0x2, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0x2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1, 0, 0x1, 0x15, 0, 0, 0, 0x3f, 0xe,
    ];

    #[test]
    fn absurd_count_whose_replacements_consume_alike_is_rejected() {
        use kafka_protocol::messages::CreateTopicsRequest;
        let body = Bytes::from_static(CREATE_TOPICS_V3_COMPENSATED_COUNT);
        let r = decode::<CreateTopicsRequest>(&body, 3);
        assert!(matches!(r, Err(GuardError::AbsurdCount)));
    }

    #[test]
    fn large_int32_fields_still_decode() {
        let mut req = FetchRequest::default();
        req.max_wait_ms = 500;
        req.min_bytes = 1;
        req.max_bytes = 52_428_800;
        req.replica_id = kafka_protocol::messages::BrokerId(-1);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 11).unwrap();
        let back: FetchRequest = decode(&buf.freeze(), 11).map_err(|_| "failed").unwrap();
        assert_eq!(back.max_bytes, 52_428_800);
    }
}

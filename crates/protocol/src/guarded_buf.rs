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
//!   that are larger than the bytes left (and than `SUSPICIOUS_I32_MIN`) are "suspicious". A
//!   plain field's value never changes what the generated decoder reads next; a count's does.
//!   The body is decoded with every suspicious value replaced by 0, then by "one more than the
//!   bytes left" (`I32Mode::PastEnd`): if any suspicious value is a count, the first one (in
//!   reading order; up to it both runs read alike) asks for more elements than there are bytes,
//!   and that run fails, as every element takes at least one byte. Only when both runs succeed
//!   alike is the body decoded with the real values. (An earlier version compared runs with 0
//!   and 1 by bytes consumed, then by a trace of reads: the fuzzer beat both, e.g. with
//!   CreateTopics bodies where counts and int32 elements shift through runs of 4-byte reads.)

use bytes::{Buf, Bytes, TryGetError};
use kafka_protocol::protocol::buf::ByteBuf;

/// int32 values below this are harmless even as counts (allocation of at most a few MiB).
pub const SUSPICIOUS_I32_MIN: i32 = 1 << 16;

/// The most bytes kafka-protocol reads for one unsigned varint (a u32).
const UNSIGNED_VARINT_BYTES_MAX: u32 = 5;

/// How suspicious int32 values are reported to the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum I32Mode {
    Real,
    Replace(i32),
    /// Replace each by one more than the bytes left after it: too many elements for any count.
    PastEnd,
}

/// A `Bytes` body with count checks; slices it hands out stay zero-copy.
pub struct GuardedBuf {
    inner: Bytes,
    mode: I32Mode,
    /// Suspicious int32 values seen so far.
    pub suspicious: usize,
    varint_value: u64,
    varint_shift: u32,
}

impl GuardedBuf {
    pub fn new(inner: Bytes, mode: I32Mode) -> GuardedBuf {
        GuardedBuf {
            inner,
            mode,
            suspicious: 0,
            varint_value: 0,
            varint_shift: 0,
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
        self.inner.advance(cnt)
    }

    fn try_get_u8(&mut self) -> Result<u8, TryGetError> {
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
        self.inner.try_get_i8()
    }

    fn try_get_i32(&mut self) -> Result<i32, TryGetError> {
        let v = self.inner.try_get_i32()?;
        if v >= SUSPICIOUS_I32_MIN && v as usize > self.inner.remaining() {
            self.suspicious += 1;
            match self.mode {
                I32Mode::Real => {}
                I32Mode::Replace(r) => return Ok(r),
                // At most the request size + 1, far below i32::MAX.
                I32Mode::PastEnd => return Ok(self.inner.remaining().saturating_add(1) as i32),
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
    let mut b = GuardedBuf::new(body.clone(), I32Mode::PastEnd);
    let second_ok = decode(&mut b).is_ok();
    if !second_ok || a.remaining() != b.remaining() {
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

    /// A CreateTopics v4 body found by fuzz/create_topics_request: replica-assignment broker id
    /// counts shift through runs of int32s, so runs with 0 and with 1 read exactly alike (same
    /// positions and sizes) and a count of ~2^30 reached `Vec::with_capacity` (4 GB).
    const CREATE_TOPICS_V4_ALIASED_COUNTS_HEX: &str = "0000000200000300220100000000000000000000000000000000000000000008000000000000000000000000401a000000230000000000000000000000000000000000000000000000000000000000010000000000003900000000130003fffffa13000000000000000200000300220100000000000000000000000000000000000000000008000000000000000000000000000000000000000000000000002300000000000000000000000000000000000000000000000000000000000000000000ffff077200";

    #[test]
    fn absurd_count_hidden_among_int32_elements_is_rejected() {
        use kafka_protocol::messages::CreateTopicsRequest;
        let hex = CREATE_TOPICS_V4_ALIASED_COUNTS_HEX;
        let body: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let r = decode::<CreateTopicsRequest>(&Bytes::from(body), 4);
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

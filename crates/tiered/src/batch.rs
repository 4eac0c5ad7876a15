//! Just enough of the RecordBatch v2 layout to walk a segment and verify CRCs.
//!
//! Segments hold RecordBatch v2 bytes exactly as produced (offsets patched). Tiered storage
//! never re-encodes them; it only needs each batch's extent, offsets, max timestamp and CRC.

//!
//! The layout itself is `streamforge_protocol::batch` (one definition in the workspace); this
//! module adds the tiered-specific size bound and error type.

use streamforge_protocol::batch::{self as layout, RecordBatch, RecordBatchHeader};
pub use streamforge_protocol::batch::{HEADER_BYTES, LOG_OVERHEAD_BYTES};

/// Largest batch we accept while scanning (a sanity bound well above `max.message.bytes`).
pub const MAX_BATCH_BYTES: usize = 64 << 20;

/// Header fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp_ms: i64,
    /// Whole batch size including the 12-byte log overhead.
    pub size_bytes: usize,
}

/// Why a batch is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("need {0} more bytes")]
    Incomplete(usize),
    #[error("bad batch length {0}")]
    BadLength(i32),
    #[error("unsupported magic {0}")]
    BadMagic(i8),
    #[error("crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc { stored: u32, computed: u32 },
}

impl From<layout::BatchError> for BatchError {
    fn from(e: layout::BatchError) -> BatchError {
        match e {
            layout::BatchError::Truncated { needed, available } => {
                BatchError::Incomplete(needed.saturating_sub(available))
            }
            layout::BatchError::InvalidLength(len) => BatchError::BadLength(len),
            layout::BatchError::UnsupportedMagic(m) => BatchError::BadMagic(m),
            layout::BatchError::CrcMismatch { stored, computed } => {
                BatchError::Crc { stored, computed }
            }
            // Not produced by the checks used here (header fields are not validated).
            layout::BatchError::InvalidHeader(_) => BatchError::BadLength(-1),
        }
    }
}

/// The total size of the batch starting at `buf[0]`, from its first 12 bytes.
pub fn batch_size(buf: &[u8]) -> Result<usize, BatchError> {
    let size = layout::batch_size(buf)?;
    if size - LOG_OVERHEAD_BYTES > MAX_BATCH_BYTES {
        return Err(BatchError::BadLength((size - LOG_OVERHEAD_BYTES) as i32));
    }
    Ok(size)
}

fn info(h: &RecordBatchHeader<'_>, size_bytes: usize) -> BatchInfo {
    BatchInfo {
        base_offset: h.base_offset(),
        // Wrapping, as the protocol crate's view: a corrupt header must not panic.
        last_offset: h.last_offset(),
        max_timestamp_ms: h.max_timestamp(),
        size_bytes,
    }
}

/// Parse the header of the batch at `buf[0]` (`buf` must hold at least the header).
pub fn parse_header(buf: &[u8]) -> Result<BatchInfo, BatchError> {
    let size_bytes = batch_size(buf)?;
    Ok(info(&RecordBatchHeader::parse(buf)?, size_bytes))
}

/// Parse and CRC-check the whole batch at `buf[0]` (`buf` must hold the whole batch).
pub fn verify(buf: &[u8]) -> Result<BatchInfo, BatchError> {
    let size_bytes = batch_size(buf)?;
    let batch = RecordBatch::parse(buf)?;
    batch.verify_crc()?;
    Ok(info(&batch, size_bytes))
}

/// The first record of a verified batch with timestamp `>= timestamp_ms`, as
/// `(offset, timestamp)` — what ListOffsets by time returns. `None` for a compressed batch
/// (the caller falls back to the batch's base offset and max timestamp) or when no record
/// qualifies.
pub fn first_record_at_or_after(batch: &[u8], timestamp_ms: i64) -> Option<(i64, i64)> {
    let info = parse_header(batch).ok()?;
    let header = RecordBatchHeader::parse(batch).ok()?;
    if header.is_log_append_time() {
        // LogAppendTime: every record carries the batch's max timestamp.
        return (info.max_timestamp_ms >= timestamp_ms)
            .then_some((info.base_offset, info.max_timestamp_ms));
    }
    if header.compression() != 0 {
        return None;
    }
    let base_timestamp = header.base_timestamp();
    let count = header.record_count().max(0) as usize;
    let mut at = HEADER_BYTES;
    let end = info.size_bytes.min(batch.len());
    for _ in 0..count {
        let (len, n) = read_varlong(batch.get(at..end)?)?;
        let body_start = at + n;
        let body_end = body_start.checked_add(usize::try_from(len).ok()?)?;
        let body = batch.get(body_start + 1..body_end.min(end))?; // skip attributes
        let (ts_delta, n1) = read_varlong(body)?;
        let (offset_delta, _) = read_varlong(body.get(n1..)?)?;
        let ts = base_timestamp.checked_add(ts_delta)?;
        if ts >= timestamp_ms {
            return Some((info.base_offset.wrapping_add(offset_delta), ts));
        }
        at = body_end;
    }
    None
}

/// Zig-zag varint (Kafka's varlong) at the start of `b`: `(value, bytes read)`.
fn read_varlong(b: &[u8]) -> Option<(i64, usize)> {
    let mut raw = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

/// Valid batches for tests and benchmarks.
#[doc(hidden)]
pub mod fixture {
    /// Build a valid uncompressed RecordBatch v2 with `count` records of `value_len` bytes.
    pub fn make_batch(base_offset: i64, count: i32, base_ts: i64, value_len: usize) -> Vec<u8> {
        let mut records = Vec::new();
        for i in 0..count {
            let mut body = Vec::new();
            body.push(0u8); // attributes
            put_varlong(&mut body, i64::from(i)); // timestamp delta
            put_varlong(&mut body, i64::from(i)); // offset delta
            put_varlong(&mut body, -1); // key length: null
            put_varlong(&mut body, value_len as i64);
            body.extend((0..value_len).map(|j| (j as u8).wrapping_add(i as u8)));
            put_varlong(&mut body, 0); // headers
            put_varlong(&mut records, body.len() as i64);
            records.extend(body);
        }
        let mut b = Vec::new();
        b.extend(base_offset.to_be_bytes());
        b.extend(((49 + records.len()) as i32).to_be_bytes());
        b.extend(0i32.to_be_bytes()); // partition leader epoch
        b.push(2); // magic
        b.extend(0u32.to_be_bytes()); // crc placeholder
        b.extend(0i16.to_be_bytes()); // attributes
        b.extend((count - 1).to_be_bytes());
        b.extend(base_ts.to_be_bytes());
        b.extend((base_ts + i64::from(count) - 1).to_be_bytes());
        b.extend((-1i64).to_be_bytes());
        b.extend((-1i16).to_be_bytes());
        b.extend((-1i32).to_be_bytes());
        b.extend(count.to_be_bytes());
        b.extend(records);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn put_varlong(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::make_batch;
    use super::*;

    #[test]
    fn offsets_near_i64_max_do_not_overflow() {
        // Found by fuzz/record_batch: baseOffset i64::MAX with a positive lastOffsetDelta.
        let mut b = make_batch(0, 2, 1_000, 4);
        b[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        let info = parse_header(&b).unwrap();
        assert_eq!(info.last_offset, i64::MAX.wrapping_add(1));
        assert_eq!(first_record_at_or_after(&b, 0).map(|r| r.0), Some(i64::MAX));
    }

    #[test]
    fn valid_batch_round_trips() {
        let b = make_batch(100, 5, 1_000, 10);
        let info = verify(&b).unwrap();
        assert_eq!(info.base_offset, 100);
        assert_eq!(info.last_offset, 104);
        assert_eq!(info.max_timestamp_ms, 1_004);
        assert_eq!(info.size_bytes, b.len());
    }

    #[test]
    fn flipped_byte_fails_crc() {
        let mut b = make_batch(0, 3, 1, 20);
        let n = b.len();
        b[n - 5] ^= 0x40;
        assert!(matches!(verify(&b), Err(BatchError::Crc { .. })));
    }

    #[test]
    fn short_and_garbage_inputs_are_errors() {
        assert!(matches!(verify(&[0u8; 5]), Err(BatchError::Incomplete(_))));
        let mut b = make_batch(0, 1, 1, 1);
        b[8..12].copy_from_slice(&(-7i32).to_be_bytes());
        assert!(matches!(verify(&b), Err(BatchError::BadLength(-7))));
        let mut b = make_batch(0, 1, 1, 1);
        b[16] = 1;
        assert!(matches!(verify(&b), Err(BatchError::BadMagic(1))));
        let b = make_batch(0, 2, 1, 30);
        assert!(matches!(
            verify(&b[..b.len() - 1]),
            Err(BatchError::Incomplete(1))
        ));
    }

    #[test]
    fn record_level_timestamp_lookup() {
        let b = make_batch(10, 5, 1_000, 3); // timestamps 1000..=1004, offsets 10..=14
        assert_eq!(first_record_at_or_after(&b, 0), Some((10, 1_000)));
        assert_eq!(first_record_at_or_after(&b, 1_003), Some((13, 1_003)));
        assert_eq!(first_record_at_or_after(&b, 1_005), None);
        let mut c = b.clone();
        c[22] |= 0x01; // gzip: not decoded here
        assert_eq!(first_record_at_or_after(&c, 0), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = verify(&data);
            let _ = parse_header(&data);
            let _ = batch_size(&data);
            let _ = first_record_at_or_after(&data, 5);
        }
    }
}

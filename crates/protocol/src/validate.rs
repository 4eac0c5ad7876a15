//! Record-level validation of a produced RecordBatch v2, as Kafka's `LogValidator` does it.
//!
//! The header and CRC say nothing about the records: a batch may claim 2^31−1 records and hold
//! one, carry random bytes, or set a compression flag over garbage. [`validate_batch`] walks
//! every record (decompressing first, with a bounded output, see [`crate::decompress`]) and
//! checks, as Kafka's `DefaultRecordBatch`/`DefaultRecord` readers and `LogValidator` do:
//!
//! - the batch holds exactly `recordCount` records and no bytes after the last one;
//! - each record's length covers exactly its fields (attributes, timestamp delta, offset delta,
//!   key, value, headers), varints are at most 5 (10 for the timestamp delta) bytes, key and
//!   value lengths are ≥ −1 and header key lengths ≥ 0, the header count is ≥ 0;
//! - record `i` has offset delta `i` (Kafka checks this for compressed batches; we check it for
//!   all, so two records can never share an offset), and `lastOffsetDelta == recordCount − 1`;
//! - on a compacted topic, every record has a key.
//!
//! An uncompressed batch is walked in place: one pass over varints, no allocation. Malformed
//! records are INVALID_RECORD (87), a compressed section the codec cannot read is
//! CORRUPT_MESSAGE (2); both carry the index of the first record that could not be validated,
//! for the ProduceResponse's `record_errors`.

use crate::batch::RecordBatch;
use crate::decompress::{self, CODEC_NONE, DecompressError};

/// Which Kafka error a rejected batch gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// INVALID_RECORD (87).
    InvalidRecord,
    /// CORRUPT_MESSAGE (2).
    CorruptMessage,
}

impl RecordErrorKind {
    /// The Kafka error code.
    pub fn kafka_code(self) -> i16 {
        self.response_error().code()
    }

    /// The Kafka error.
    pub fn response_error(self) -> crate::ResponseError {
        match self {
            RecordErrorKind::InvalidRecord => crate::ResponseError::InvalidRecord,
            RecordErrorKind::CorruptMessage => crate::ResponseError::CorruptMessage,
        }
    }
}

/// Why a batch's records were rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RecordError {
    pub kind: RecordErrorKind,
    /// Index (within the batch) of the first record that could not be validated; `None` for
    /// errors of the batch as a whole (e.g. a negative record count).
    pub record_index: Option<i32>,
    pub message: String,
}

/// What the topic asks of records.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordPolicy {
    /// `cleanup.policy` contains `compact`: every record needs a key.
    pub compacted: bool,
}

/// What the walk learned about a valid batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsSummary {
    /// Largest record timestamp delta (add the batch's base timestamp for the max timestamp).
    pub max_timestamp_delta: i64,
    /// Bytes of records walked (decompressed size for a compressed batch).
    pub records_bytes: usize,
}

/// A record-level fault, found without allocating; turned into a [`RecordError`] at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Missing { count: i32, found: i32 },
    Truncated,
    VarintTooLong,
    NegativeLength(i32),
    LengthPastEnd { length: i32, remaining: usize },
    SizeMismatch { length: i32, read: usize },
    BadLength { field: &'static str, length: i32 },
    FieldPastEnd { field: &'static str },
    TooManyHeaders(i32),
    OffsetDelta { expected: i32, found: i32 },
    NullKeyInCompacted,
    TrailingBytes(usize),
    LastOffsetDelta { delta: i32, count: i32 },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Fault::Missing { count, found } => {
                write!(f, "batch declares {count} records but holds only {found}")
            }
            Fault::Truncated => write!(f, "record truncated"),
            Fault::VarintTooLong => write!(f, "varint is too long"),
            Fault::NegativeLength(n) => write!(f, "invalid record length {n}"),
            Fault::LengthPastEnd { length, remaining } => write!(
                f,
                "invalid record size: expected {length} bytes in record payload, \
                 but the batch has only {remaining} remaining bytes"
            ),
            Fault::SizeMismatch { length, read } => write!(
                f,
                "invalid record size: expected to read {length} bytes in record payload, \
                 but instead read {read}"
            ),
            Fault::BadLength { field, length } => write!(f, "invalid {field} length {length}"),
            Fault::FieldPastEnd { field } => write!(f, "record {field} exceeds the record"),
            Fault::TooManyHeaders(n) => write!(f, "found invalid number of record headers {n}"),
            Fault::OffsetDelta { expected, found } => write!(
                f,
                "record does not have incremental offsets: offset delta {found}, expected {expected}"
            ),
            Fault::NullKeyInCompacted => {
                write!(f, "compacted topic cannot accept message without key")
            }
            Fault::TrailingBytes(n) => write!(
                f,
                "incorrect declared batch size, {n} bytes remain after the last record"
            ),
            Fault::LastOffsetDelta { delta, count } => write!(
                f,
                "lastOffsetDelta {delta} does not match the {count} records in the batch"
            ),
        }
    }
}

fn invalid(index: i32, fault: Fault) -> RecordError {
    RecordError {
        kind: RecordErrorKind::InvalidRecord,
        record_index: Some(index),
        message: format!("record {index}: {fault}"),
    }
}

fn batch_invalid(message: &str) -> RecordError {
    RecordError {
        kind: RecordErrorKind::InvalidRecord,
        record_index: None,
        message: message.to_string(),
    }
}

/// Validate the records of `batch` (header and CRC are checked elsewhere, see
/// [`RecordBatch::verify_crc`]). `scratch` holds the decompressed records of a compressed
/// batch; it is reused between calls and never grows past
/// [`decompress::MAX_DECOMPRESSED_BATCH_BYTES`] + 1.
pub fn validate_batch(
    batch: &RecordBatch<'_>,
    policy: RecordPolicy,
    scratch: &mut Vec<u8>,
) -> Result<RecordsSummary, RecordError> {
    let count = batch.record_count();
    if count <= 0 {
        return Err(batch_invalid(&format!(
            "invalid reported count for record batch: {count}"
        )));
    }
    if batch.last_offset_delta() < 0 {
        return Err(batch_invalid("negative lastOffsetDelta"));
    }
    let codec = batch.compression();
    if codec == CODEC_NONE {
        return walk_records(batch.records_bytes(), batch, policy);
    }
    let compressed = batch.records_bytes();
    let limit = decompress::output_limit_bytes(compressed.len());
    match decompress::decompress_into(codec, compressed, limit, scratch) {
        Ok(()) => walk_records(scratch, batch, policy),
        Err(DecompressError::UnknownCodec(c)) => {
            Err(batch_invalid(&format!("unknown compression codec {c}")))
        }
        Err(e) => {
            // The first record the stream did not deliver whole.
            let index = complete_records(scratch, count);
            let kind = match e {
                DecompressError::TooLarge { .. } => RecordErrorKind::InvalidRecord,
                _ => RecordErrorKind::CorruptMessage,
            };
            Err(RecordError {
                kind,
                record_index: Some(index),
                message: format!("record {index}: {e}"),
            })
        }
    }
}

/// Walk exactly `recordCount` records in `records` (the uncompressed records section).
fn walk_records(
    records: &[u8],
    batch: &RecordBatch<'_>,
    policy: RecordPolicy,
) -> Result<RecordsSummary, RecordError> {
    let count = batch.record_count();
    let mut pos = 0;
    let mut max_timestamp_delta = i64::MIN;
    for index in 0..count {
        if pos == records.len() {
            return Err(invalid(
                index,
                Fault::Missing {
                    count,
                    found: index,
                },
            ));
        }
        let record = walk_record(records, pos).map_err(|f| invalid(index, f))?;
        if record.offset_delta != index {
            let fault = Fault::OffsetDelta {
                expected: index,
                found: record.offset_delta,
            };
            return Err(invalid(index, fault));
        }
        if policy.compacted && record.key_null {
            return Err(invalid(index, Fault::NullKeyInCompacted));
        }
        max_timestamp_delta = max_timestamp_delta.max(record.timestamp_delta);
        pos = record.end;
    }
    if pos != records.len() {
        return Err(invalid(count, Fault::TrailingBytes(records.len() - pos)));
    }
    let delta = batch.last_offset_delta();
    if delta != count - 1 {
        return Err(invalid(count - 1, Fault::LastOffsetDelta { delta, count }));
    }
    Ok(RecordsSummary {
        max_timestamp_delta,
        records_bytes: records.len(),
    })
}

/// How many whole, well-formed records `records` starts with (at most `count`).
fn complete_records(records: &[u8], count: i32) -> i32 {
    let mut pos = 0;
    for index in 0..count {
        match walk_record(records, pos) {
            Ok(r) => pos = r.end,
            Err(_) => return index,
        }
    }
    count
}

/// The fields of one record the validation needs.
#[derive(Debug, Clone, Copy)]
struct Walked {
    /// Position just past the record.
    end: usize,
    timestamp_delta: i64,
    offset_delta: i32,
    key_null: bool,
}

/// Walk the record at `buf[start..]`: its length varint, then every field, which must end
/// exactly where the length says.
#[inline(always)]
fn walk_record(buf: &[u8], start: usize) -> Result<Walked, Fault> {
    let mut pos = start;
    let length = varint(buf, &mut pos)?;
    if length < 0 {
        return Err(Fault::NegativeLength(length));
    }
    let remaining = buf.len() - pos;
    if length as usize > remaining {
        return Err(Fault::LengthPastEnd { length, remaining });
    }
    let body_start = pos;
    let end = pos + length as usize;
    let record = &buf[..end];
    if pos >= end {
        return Err(Fault::Truncated);
    }
    pos += 1; // attributes (unused in v2)
    let timestamp_delta = varlong(record, &mut pos)?;
    let offset_delta = varint(record, &mut pos)?;
    let key_len = varint(record, &mut pos)?;
    skip_bytes(record, &mut pos, key_len, "key")?;
    let value_len = varint(record, &mut pos)?;
    skip_bytes(record, &mut pos, value_len, "value")?;
    let headers = varint(record, &mut pos)?;
    if headers < 0 || headers as usize > end - pos {
        return Err(Fault::TooManyHeaders(headers));
    }
    // Bounded by the record: each header takes at least two bytes.
    for _ in 0..headers {
        let key_len = varint(record, &mut pos)?;
        if key_len < 0 {
            return Err(Fault::BadLength {
                field: "header key",
                length: key_len,
            });
        }
        skip_bytes(record, &mut pos, key_len, "header key")?;
        let value_len = varint(record, &mut pos)?;
        skip_bytes(record, &mut pos, value_len, "header value")?;
    }
    if pos != end {
        return Err(Fault::SizeMismatch {
            length,
            read: pos - body_start,
        });
    }
    Ok(Walked {
        end,
        timestamp_delta,
        offset_delta,
        key_null: key_len < 0,
    })
}

/// Skip a `len`-byte field (`-1` = null, nothing to skip).
#[inline(always)]
fn skip_bytes(record: &[u8], pos: &mut usize, len: i32, field: &'static str) -> Result<(), Fault> {
    if len < -1 {
        return Err(Fault::BadLength { field, length: len });
    }
    if len > 0 {
        if len as usize > record.len() - *pos {
            return Err(Fault::FieldPastEnd { field });
        }
        *pos += len as usize;
    }
    Ok(())
}

/// A zigzag varint of at most 5 bytes (Kafka's `readVarint`).
#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize) -> Result<i32, Fault> {
    const MAX_BYTES: usize = 5;
    let Some(&first) = buf.get(*pos) else {
        return Err(Fault::Truncated);
    };
    *pos += 1;
    if first < 0x80 {
        let raw = u32::from(first);
        return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
    }
    let mut raw = u32::from(first & 0x7f);
    for i in 1..MAX_BYTES {
        let Some(&b) = buf.get(*pos) else {
            return Err(Fault::Truncated);
        };
        *pos += 1;
        raw |= u32::from(b & 0x7f).wrapping_shl(7 * i as u32);
        if b < 0x80 {
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    Err(Fault::VarintTooLong)
}

/// A zigzag varlong of at most 10 bytes (Kafka's `readVarlong`).
#[inline(always)]
fn varlong(buf: &[u8], pos: &mut usize) -> Result<i64, Fault> {
    const MAX_BYTES: usize = 10;
    let mut raw: u64 = 0;
    for i in 0..MAX_BYTES {
        let Some(&b) = buf.get(*pos) else {
            return Err(Fault::Truncated);
        };
        *pos += 1;
        raw |= u64::from(b & 0x7f).wrapping_shl(7 * i as u32);
        if b < 0x80 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(Fault::VarintTooLong)
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;

//! Client-side RecordBatch v2 encoding and decoding.
//!
//! The producer appends records straight into one reusable buffer (no per-record allocation);
//! the header is written when the batch is closed, because the producer id, epoch and base
//! sequence are only known then (they are covered by the CRC). The consumer decodes batches from
//! the fetch response `Bytes` without copying uncompressed record data.
use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::compression::{self, Compression};
use crate::error::{ClientError, Result};

/// The header layout is `streamforge_protocol::batch` (its `field` offsets and header view):
/// one definition shared with the broker, the log and the tools.
use streamforge_protocol::batch::field::{
    ATTRIBUTES, BASE_OFFSET, BASE_SEQUENCE, BASE_TIMESTAMP, BATCH_LENGTH, CRC, LAST_OFFSET_DELTA,
    MAGIC, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH, PRODUCER_EPOCH, PRODUCER_ID, RECORD_COUNT,
};
use streamforge_protocol::batch::{
    BatchError, COMPRESSION_MASK as ATTR_COMPRESSION_MASK, CONTROL as ATTR_CONTROL, CRC_START,
    LOG_OVERHEAD_BYTES, MAGIC_V2, RecordBatchHeader,
    TIMESTAMP_TYPE_LOG_APPEND as ATTR_LOG_APPEND_TIME, TRANSACTIONAL as ATTR_TRANSACTIONAL,
};

/// Size of the RecordBatch v2 header in bytes (baseOffset .. recordsCount).
pub const BATCH_HEADER_BYTES: usize = streamforge_protocol::batch::HEADER_BYTES;

/// Upper bound on records decoded from one batch, so a corrupt count cannot make us allocate wildly.
pub const MAX_RECORDS_PER_BATCH: usize = 1 << 24;

/// A record header (key, optional value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Bytes>,
}

/// Number of bytes of a zig-zag varint.
fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// Room for a record's length, attributes, two deltas and the key length as varints.
const RECORD_HEAD_BYTES_MAX: usize = 5 + 1 + 10 + 10 + 5;

/// A few varints assembled on the stack.
struct VarintBuf {
    bytes: [u8; RECORD_HEAD_BYTES_MAX],
    len: usize,
}

impl Default for VarintBuf {
    fn default() -> Self {
        Self {
            bytes: [0; RECORD_HEAD_BYTES_MAX],
            len: 0,
        }
    }
}

impl VarintBuf {
    fn byte(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    fn varint(&mut self, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            self.byte((z as u8) | 0x80);
            z >>= 7;
        }
        self.byte(z as u8);
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

fn put_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn get_varint(buf: &mut Bytes) -> Result<i64> {
    let mut z: u64 = 0;
    for i in 0..10 {
        if !buf.has_remaining() {
            return Err(ClientError::corrupt("truncated varint"));
        }
        let b = buf.get_u8();
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    Err(ClientError::corrupt("varint longer than 10 bytes"))
}

fn get_len_prefixed(buf: &mut Bytes, what: &str) -> Result<Option<Bytes>> {
    let len = get_varint(buf)?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if len > buf.remaining() {
        return Err(ClientError::corrupt(format!(
            "{what} length {len} beyond record end"
        )));
    }
    Ok(Some(buf.split_to(len)))
}

/// Accumulates records of one partition into one RecordBatch v2.
#[derive(Debug)]
pub struct BatchBuilder {
    buf: BytesMut,
    record_count: i32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
    compression: Compression,
}

impl BatchBuilder {
    /// A builder whose buffer has room for `capacity_bytes` before growing.
    pub fn new(compression: Compression, capacity_bytes: usize) -> Self {
        Self::with_buffer(compression, BytesMut::with_capacity(capacity_bytes))
    }

    /// A builder that reuses `buf` (cleared first).
    pub fn with_buffer(compression: Compression, mut buf: BytesMut) -> Self {
        buf.clear();
        buf.resize(BATCH_HEADER_BYTES, 0);
        Self {
            buf,
            record_count: 0,
            base_timestamp_ms: 0,
            max_timestamp_ms: 0,
            compression,
        }
    }

    pub fn record_count(&self) -> i32 {
        self.record_count
    }

    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Uncompressed size so far, header included.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Bytes a record would add to this batch (an estimate when the timestamp delta differs).
    pub fn estimate_record_bytes(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) -> usize {
        let body = record_body_len(0, 0, key, value, headers);
        body + varint_len(body as i64)
    }

    /// Appends one record. The first record fixes the batch's base timestamp.
    pub fn append(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) {
        if self.record_count == 0 {
            self.base_timestamp_ms = timestamp_ms;
            self.max_timestamp_ms = timestamp_ms;
        }
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        let ts_delta = timestamp_ms - self.base_timestamp_ms;
        let offset_delta = i64::from(self.record_count);
        let body = record_body_len(ts_delta, offset_delta, key, value, headers);
        let buf = &mut self.buf;
        buf.reserve(body + 5);
        // The fixed-size prefix goes through a small stack buffer: one copy instead of a
        // capacity check per byte.
        let mut head = VarintBuf::default();
        head.varint(body as i64);
        head.byte(0); // record attributes: unused
        head.varint(ts_delta);
        head.varint(offset_delta);
        head.varint(key.map_or(-1, |k| k.len() as i64));
        buf.put_slice(head.as_slice());
        if let Some(k) = key {
            buf.put_slice(k);
        }
        put_bytes(buf, value);
        put_varint(buf, headers.len() as i64);
        for h in headers {
            put_varint(buf, h.key.len() as i64);
            buf.put_slice(h.key.as_bytes());
            put_bytes(buf, h.value.as_deref());
        }
        self.record_count += 1;
    }

    /// Writes the header (and compresses) and returns the finished batch bytes.
    pub fn finish(
        self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Result<Bytes> {
        let mut buf = self.buf;
        if self.compression != Compression::None {
            let compressed = compression::compress(self.compression, &buf[BATCH_HEADER_BYTES..])?;
            buf.truncate(BATCH_HEADER_BYTES);
            buf.extend_from_slice(&compressed);
        }
        let attributes = self.compression.attribute_bits();
        write_header(
            &mut buf,
            &HeaderFields {
                attributes,
                last_offset_delta: self.record_count - 1,
                base_timestamp_ms: self.base_timestamp_ms,
                max_timestamp_ms: self.max_timestamp_ms,
                producer_id,
                producer_epoch,
                base_sequence,
                record_count: self.record_count,
            },
        )?;
        Ok(buf.freeze())
    }
}

struct HeaderFields {
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
}

fn write_header(buf: &mut BytesMut, h: &HeaderFields) -> Result<()> {
    let batch_length = i32::try_from(buf.len() - LOG_OVERHEAD_BYTES)
        .map_err(|_| ClientError::Protocol("record batch over 2 GiB".into()))?;
    let b = &mut buf[..];
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(BASE_OFFSET, &0i64.to_be_bytes());
    put(BATCH_LENGTH, &batch_length.to_be_bytes());
    // Partition leader epoch: set by the broker.
    put(PARTITION_LEADER_EPOCH, &(-1i32).to_be_bytes());
    put(MAGIC, &[MAGIC_V2 as u8]);
    put(ATTRIBUTES, &h.attributes.to_be_bytes());
    put(LAST_OFFSET_DELTA, &h.last_offset_delta.to_be_bytes());
    put(BASE_TIMESTAMP, &h.base_timestamp_ms.to_be_bytes());
    put(MAX_TIMESTAMP, &h.max_timestamp_ms.to_be_bytes());
    put(PRODUCER_ID, &h.producer_id.to_be_bytes());
    put(PRODUCER_EPOCH, &h.producer_epoch.to_be_bytes());
    put(BASE_SEQUENCE, &h.base_sequence.to_be_bytes());
    put(RECORD_COUNT, &h.record_count.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

fn put_bytes(buf: &mut BytesMut, v: Option<&[u8]>) {
    match v {
        None => put_varint(buf, -1),
        Some(v) => {
            put_varint(buf, v.len() as i64);
            buf.put_slice(v);
        }
    }
}

fn opt_len(v: Option<&[u8]>) -> usize {
    match v {
        None => 1,
        Some(v) => varint_len(v.len() as i64) + v.len(),
    }
}

fn record_body_len(
    ts_delta: i64,
    offset_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) -> usize {
    let mut n = 1 + varint_len(ts_delta) + varint_len(offset_delta) + opt_len(key) + opt_len(value);
    n += varint_len(headers.len() as i64);
    for h in headers {
        n += varint_len(h.key.len() as i64) + h.key.len() + opt_len(h.value.as_deref());
    }
    n
}

/// The header of one RecordBatch v2, read from its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn compression(&self) -> Result<Compression> {
        Compression::from_attribute_bits(self.attributes & ATTR_COMPRESSION_MASK)
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    /// Total bytes of the batch including the offset and length fields.
    pub fn total_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD_BYTES
    }
}

/// One batch split off a record set: its header and its full bytes.
#[derive(Debug, Clone)]
pub struct RawBatch {
    pub header: BatchHeader,
    pub bytes: Bytes,
}

impl RawBatch {
    /// Verifies the CRC-32C over attributes..end.
    pub fn verify_crc(&self) -> Result<()> {
        let actual = crc32c::crc32c(&self.bytes[CRC_START..]);
        if actual != self.header.crc {
            return Err(ClientError::corrupt(format!(
                "CRC mismatch in batch at offset {}: stored {:#010x}, computed {:#010x}",
                self.header.base_offset, self.header.crc, actual
            )));
        }
        Ok(())
    }

    /// Decodes the records (decompressing if needed).
    pub fn records(&self) -> Result<RecordIter> {
        let compression = self.header.compression()?;
        let body = self.bytes.slice(BATCH_HEADER_BYTES..);
        let body = if compression == Compression::None {
            body
        } else {
            compression::decompress(compression, &body)?
        };
        let count = usize::try_from(self.header.record_count)
            .map_err(|_| ClientError::corrupt("negative record count"))?;
        if count > MAX_RECORDS_PER_BATCH {
            return Err(ClientError::corrupt(format!(
                "record count {count} over limit"
            )));
        }
        Ok(RecordIter {
            body,
            remaining: count,
            base_offset: self.header.base_offset,
            base_timestamp_ms: self.header.base_timestamp_ms,
            log_append_time_ms: self
                .header
                .is_log_append_time()
                .then_some(self.header.max_timestamp_ms),
        })
    }
}

/// Splits a record set (concatenated batches, as in a fetch response) into batches.
/// A partial batch at the end (the broker may cut the last one) is ignored, as Kafka clients do.
pub fn split_batches(mut data: Bytes) -> Result<Vec<RawBatch>> {
    let mut out = Vec::new();
    while data.len() >= BATCH_HEADER_BYTES {
        let header = parse_header(&data)?;
        let total = header.total_bytes();
        if total > data.len() {
            break;
        }
        let bytes = data.split_to(total);
        out.push(RawBatch { header, bytes });
    }
    Ok(out)
}

/// Parses a batch header from the start of `b` (at least [`BATCH_HEADER_BYTES`] long).
pub fn parse_header(b: &[u8]) -> Result<BatchHeader> {
    if b.len() < BATCH_HEADER_BYTES {
        return Err(ClientError::corrupt("batch shorter than its header"));
    }
    let v = match RecordBatchHeader::parse(b) {
        Ok(v) => v,
        Err(BatchError::UnsupportedMagic(m)) => {
            return Err(ClientError::corrupt(format!(
                "unsupported record batch magic {m}"
            )));
        }
        Err(BatchError::InvalidLength(len)) => {
            return Err(ClientError::corrupt(format!(
                "batch length {len} too small"
            )));
        }
        Err(e) => return Err(ClientError::corrupt(e.to_string())),
    };
    Ok(BatchHeader {
        base_offset: v.base_offset(),
        batch_length: v.batch_length(),
        partition_leader_epoch: v.partition_leader_epoch(),
        magic: v.magic(),
        crc: v.crc(),
        attributes: v.attributes(),
        last_offset_delta: v.last_offset_delta(),
        base_timestamp_ms: v.base_timestamp(),
        max_timestamp_ms: v.max_timestamp(),
        producer_id: v.producer_id(),
        producer_epoch: v.producer_epoch(),
        base_sequence: v.base_sequence(),
        record_count: v.record_count(),
    })
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

/// Iterator over the records of one batch.
pub struct RecordIter {
    body: Bytes,
    remaining: usize,
    base_offset: i64,
    base_timestamp_ms: i64,
    log_append_time_ms: Option<i64>,
}

impl RecordIter {
    fn next_record(&mut self) -> Result<Record> {
        let len = get_varint(&mut self.body)?;
        if len < 0 || len as usize > self.body.len() {
            return Err(ClientError::corrupt(format!(
                "record length {len} beyond batch end"
            )));
        }
        let mut r = self.body.split_to(len as usize);
        if !r.has_remaining() {
            return Err(ClientError::corrupt("empty record"));
        }
        let _attributes = r.get_i8();
        let ts_delta = get_varint(&mut r)?;
        let offset_delta = get_varint(&mut r)?;
        let key = get_len_prefixed(&mut r, "key")?;
        let value = get_len_prefixed(&mut r, "value")?;
        let header_count = get_varint(&mut r)?;
        if header_count < 0 || header_count as usize > r.len() {
            return Err(ClientError::corrupt(format!(
                "bad header count {header_count}"
            )));
        }
        let mut headers = Vec::with_capacity(header_count as usize);
        for _ in 0..header_count {
            let k = get_len_prefixed(&mut r, "header key")?
                .ok_or_else(|| ClientError::corrupt("null header key"))?;
            let key = String::from_utf8(k.to_vec())
                .map_err(|_| ClientError::corrupt("header key not UTF-8"))?;
            let value = get_len_prefixed(&mut r, "header value")?;
            headers.push(Header { key, value });
        }
        Ok(Record {
            offset: self.base_offset + offset_delta,
            timestamp_ms: self
                .log_append_time_ms
                .unwrap_or(self.base_timestamp_ms + ts_delta),
            key,
            value,
            headers,
        })
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.next_record();
        if r.is_err() {
            self.remaining = 0;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(compression: Compression) -> Bytes {
        let mut b = BatchBuilder::new(compression, 1024);
        b.append(1000, Some(b"k1"), Some(b"v1"), &[]);
        b.append(
            1005,
            None,
            Some(b"v2"),
            &[Header {
                key: "h".into(),
                value: Some(Bytes::from_static(b"x")),
            }],
        );
        b.append(999, Some(b""), None, &[]);
        b.finish(7, 1, 42).unwrap()
    }

    #[test]
    fn round_trips_every_codec() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let bytes = build(c);
            let batches = split_batches(bytes).unwrap();
            assert_eq!(batches.len(), 1);
            let b = &batches[0];
            b.verify_crc().unwrap();
            assert_eq!(b.header.record_count, 3);
            assert_eq!(b.header.producer_id, 7);
            assert_eq!(b.header.base_sequence, 42);
            assert_eq!(b.header.max_timestamp_ms, 1005);
            assert_eq!(b.header.compression().unwrap(), c);
            let recs: Vec<Record> = b.records().unwrap().collect::<Result<_>>().unwrap();
            assert_eq!(recs[0].key.as_deref(), Some(&b"k1"[..]));
            assert_eq!(recs[1].offset, 1);
            assert_eq!(recs[1].timestamp_ms, 1005);
            assert_eq!(recs[1].headers[0].key, "h");
            assert_eq!(recs[2].timestamp_ms, 999);
            assert_eq!(recs[2].value, None);
            assert_eq!(recs[2].key.as_deref(), Some(&b""[..]));
        }
    }

    #[test]
    fn agrees_with_kafka_protocol_decoder() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut bytes = build(c);
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
            assert_eq!(set.records.len(), 3);
            assert_eq!(set.records[0].value.as_deref(), Some(&b"v1"[..]));
            assert_eq!(set.records[1].timestamp, 1005);
            assert_eq!(set.records[0].producer_id, 7);
            assert_eq!(set.records[2].sequence, 44);
        }
    }

    #[test]
    fn detects_corruption() {
        let bytes = build(Compression::None);
        let mut v = bytes.to_vec();
        let last = v.len() - 1;
        v[last] ^= 0xff;
        let b = split_batches(Bytes::from(v)).unwrap();
        assert!(b[0].verify_crc().is_err());
    }

    #[test]
    fn ignores_partial_trailing_batch() {
        let bytes = build(Compression::None);
        let mut two = BytesMut::new();
        two.extend_from_slice(&bytes);
        two.extend_from_slice(&bytes[..bytes.len() - 3]);
        assert_eq!(split_batches(two.freeze()).unwrap().len(), 1);
    }

    #[test]
    fn garbage_never_panics() {
        for len in 0..200usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            if let Ok(batches) = split_batches(Bytes::from(data)) {
                for b in batches {
                    if let Ok(it) = b.records() {
                        for r in it {
                            let _ = r;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -65,
            300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(get_varint(&mut b.freeze()).unwrap(), v);
        }
    }
}

//! The parts of a record (RecordBatch v2 body) the cleaner needs: key, whether the value is
//! null, the timestamp delta, and the bytes to copy or re-encode.

use streamforge_protocol::batch::BatchError;

/// One record of a decompressed records section.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    /// A tombstone: the value is null.
    pub null_value: bool,
    /// From the key-length varint to the end of the record (key, value, headers).
    pub tail: &'a [u8],
    /// The whole record, with its length prefix.
    pub encoded: &'a [u8],
}

const MAX_VARINT_BYTES: usize = 10;

fn bad(why: &'static str) -> BatchError {
    BatchError::InvalidHeader(why)
}

/// Decode a zigzag varint at `buf[*pos..]`.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, BatchError> {
    let mut raw: u64 = 0;
    for i in 0..MAX_VARINT_BYTES {
        let Some(&b) = buf.get(*pos) else {
            return Err(bad("record truncated"));
        };
        *pos += 1;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(bad("varint too long"))
}

/// Append `v` as a zigzag varint.
pub fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Iterate the `count` records of a records section; an error (once) on malformed input.
pub struct Records<'a> {
    buf: &'a [u8],
    position: usize,
    remaining: i32,
    failed: bool,
}

impl<'a> Records<'a> {
    pub fn new(buf: &'a [u8], count: i32) -> Records<'a> {
        Records {
            buf,
            position: 0,
            remaining: count.max(0),
            failed: false,
        }
    }

    fn parse_next(&mut self) -> Result<RawRecord<'a>, BatchError> {
        let start = self.position;
        let mut pos = start;
        let len = read_varlong(self.buf, &mut pos)?;
        if len < 0 || (len as u64) > (self.buf.len() - pos) as u64 {
            return Err(bad("invalid record length"));
        }
        let end = pos + len as usize;
        let record = &self.buf[..end];
        let attributes = *record.get(pos).ok_or(bad("record truncated"))?;
        pos += 1;
        let timestamp_delta = read_varlong(record, &mut pos)?;
        let offset_delta = read_varlong(record, &mut pos)?;
        let offset_delta =
            i32::try_from(offset_delta).map_err(|_| bad("record offset delta out of range"))?;
        if offset_delta < 0 {
            return Err(bad("negative record offset delta"));
        }
        let tail_start = pos;
        let key_len = read_varlong(record, &mut pos)?;
        let key = match key_len {
            -1 => None,
            n if n >= 0 && (n as u64) <= (end - pos) as u64 => {
                let k = &record[pos..pos + n as usize];
                pos += n as usize;
                Some(k)
            }
            _ => return Err(bad("invalid record key length")),
        };
        let value_len = read_varlong(record, &mut pos)?;
        if value_len < -1 || (value_len > 0 && (value_len as u64) > (end - pos) as u64) {
            return Err(bad("invalid record value length"));
        }
        self.position = end;
        Ok(RawRecord {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            null_value: value_len == -1,
            tail: &record[tail_start..end],
            encoded: &self.buf[start..end],
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RawRecord<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.parse_next();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Append `record` re-encoded with `timestamp_delta` (the batch's base timestamp changed).
pub fn put_with_timestamp_delta(out: &mut Vec<u8>, record: &RawRecord<'_>, timestamp_delta: i64) {
    let mut body = Vec::with_capacity(1 + 2 * MAX_VARINT_BYTES);
    body.push(record.attributes);
    put_varlong(&mut body, timestamp_delta);
    put_varlong(&mut body, i64::from(record.offset_delta));
    let len = body.len() + record.tail.len();
    put_varlong(out, len as i64);
    out.extend_from_slice(&body);
    out.extend_from_slice(record.tail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_protocol::batch::RecordBatch;
    use streamforge_protocol::batch::testing::{BatchSpec, build_batch};

    #[test]
    fn parses_keys_tombstones_and_reencodes_timestamps() {
        let b = build_batch(
            BatchSpec::default(),
            &[(Some(b"a"), Some(b"1")), (Some(b"b"), None)],
        );
        let v = RecordBatch::parse(&b).unwrap();
        let recs: Vec<_> = Records::new(v.records_bytes(), v.record_count())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].key, Some(&b"a"[..]));
        assert!(!recs[0].null_value);
        assert!(recs[1].null_value);
        assert_eq!(recs[1].offset_delta, 1);
        let mut out = Vec::new();
        put_with_timestamp_delta(&mut out, &recs[1], -5000);
        let again: Vec<_> = Records::new(&out, 1).collect::<Result<_, _>>().unwrap();
        assert_eq!(again[0].timestamp_delta, -5000);
        assert_eq!(again[0].key, Some(&b"b"[..]));
        assert_eq!(again[0].offset_delta, 1);
    }
}

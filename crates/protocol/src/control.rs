//! Transaction control batches (KIP-98): the COMMIT / ABORT markers a transaction coordinator
//! writes to every partition of a transaction. A control batch has the `TRANSACTIONAL` and
//! `CONTROL` attribute bits and one record whose key is `version i16 (0), type i16` (0 = ABORT,
//! 1 = COMMIT) and whose value is `version i16 (0), coordinator epoch i32`. The log, the log
//! cleaner and the Fetch path detect them through [`RecordBatch::is_control`] and
//! [`control_type`]; nothing here allocates except [`build_marker`].

use crate::batch::field::CRC;
use crate::batch::{
    BatchError, CONTROL, CRC_START, HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2, NO_SEQUENCE,
    RecordBatch, TRANSACTIONAL, read_varlong,
};

/// Version of the control record key and value we write (Kafka writes 0).
pub const CONTROL_RECORD_VERSION: i16 = 0;

/// What a control batch marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// The transaction's records are to be dropped by read_committed consumers.
    Abort,
    /// The transaction's records become visible.
    Commit,
}

impl ControlType {
    /// The wire value of the key's `type` field.
    pub fn code(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }
}

/// A decoded control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecord {
    pub kind: ControlType,
    /// The coordinator epoch of the writer (its `__transaction_state` partition's leader epoch).
    pub coordinator_epoch: i32,
}

fn be_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The control record of a control batch. Errors when `batch` is not a control batch or its
/// record is malformed; an unknown type (Kafka reserves 2+ for other control records) is an
/// error too, as those markers end no transaction.
pub fn control_record(batch: &RecordBatch<'_>) -> Result<ControlRecord, BatchError> {
    if !batch.is_control() {
        return Err(BatchError::InvalidHeader("not a control batch"));
    }
    if batch.compression() != 0 || batch.record_count() != 1 {
        return Err(BatchError::InvalidHeader(
            "control batch must hold one uncompressed record",
        ));
    }
    let buf = batch.records_bytes();
    let mut pos = 0;
    let len = read_varlong(buf, &mut pos)?;
    if len < 0 || (len as u64) > (buf.len() - pos) as u64 {
        return Err(BatchError::InvalidHeader("invalid control record length"));
    }
    let record = &buf[..pos + len as usize];
    pos += 1; // record attributes
    read_varlong(record, &mut pos)?; // timestamp delta
    read_varlong(record, &mut pos)?; // offset delta
    let key_len = read_varlong(record, &mut pos)?;
    if key_len < 4 || (key_len as u64) > (record.len() - pos) as u64 {
        return Err(BatchError::InvalidHeader("invalid control record key"));
    }
    let key = &record[pos..pos + key_len as usize];
    pos += key_len as usize;
    let kind = match be_i16(key, 2) {
        Some(0) => ControlType::Abort,
        Some(1) => ControlType::Commit,
        _ => return Err(BatchError::InvalidHeader("unknown control record type")),
    };
    // The value (version, coordinator epoch) is informational: a short one reads as epoch -1.
    let value_len = read_varlong(record, &mut pos)?;
    let coordinator_epoch = if value_len >= 6 && (value_len as u64) <= (record.len() - pos) as u64 {
        let v = &record[pos..pos + 6];
        i32::from_be_bytes([v[2], v[3], v[4], v[5]])
    } else {
        -1
    };
    Ok(ControlRecord {
        kind,
        coordinator_epoch,
    })
}

/// The type of a control batch's marker, `None` for any other batch (or a malformed marker).
pub fn control_type(batch: &RecordBatch<'_>) -> Option<ControlType> {
    control_record(batch).ok().map(|r| r.kind)
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// Encode a marker batch for `producer_id` / `producer_epoch` at `timestamp_ms` (base offset 0;
/// the log assigns it). Sequence -1, as Kafka writes markers.
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    kind: ControlType,
    timestamp_ms: i64,
) -> Vec<u8> {
    let mut rec = Vec::with_capacity(24);
    rec.push(0); // record attributes
    put_varint(&mut rec, 0); // timestamp delta
    put_varint(&mut rec, 0); // offset delta
    put_varint(&mut rec, 4);
    rec.extend_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
    rec.extend_from_slice(&kind.code().to_be_bytes());
    put_varint(&mut rec, 6);
    rec.extend_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
    rec.extend_from_slice(&coordinator_epoch.to_be_bytes());
    put_varint(&mut rec, 0); // headers
    let mut body = Vec::with_capacity(rec.len() + 2);
    put_varint(&mut body, rec.len() as i64);
    body.extend_from_slice(&rec);

    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&0i64.to_be_bytes()); // base offset
    out.extend_from_slice(&((HEADER_BYTES - LOG_OVERHEAD_BYTES + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]); // crc
    out.extend_from_slice(&(TRANSACTIONAL | CONTROL).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&producer_id.to_be_bytes());
    out.extend_from_slice(&producer_epoch.to_be_bytes());
    out.extend_from_slice(&NO_SEQUENCE.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&body);
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{BatchSpec, build_simple};
    use proptest::prelude::*;

    #[test]
    fn markers_round_trip() {
        for kind in [ControlType::Abort, ControlType::Commit] {
            let b = build_marker(42, 3, 7, kind, 1_000);
            let v = RecordBatch::parse(&b).unwrap();
            v.verify_crc().unwrap();
            v.validate_header().unwrap();
            assert!(v.is_control() && v.is_transactional());
            assert_eq!((v.producer_id(), v.producer_epoch()), (42, 3));
            assert_eq!(
                control_record(&v).unwrap(),
                ControlRecord {
                    kind,
                    coordinator_epoch: 7
                }
            );
        }
    }

    #[test]
    fn data_batches_are_not_markers() {
        let b = build_simple(BatchSpec::default(), 1, 4);
        assert_eq!(control_type(&RecordBatch::parse(&b).unwrap()), None);
    }

    proptest! {
        #[test]
        fn damaged_markers_never_panic(flip in 61usize..90, byte in any::<u8>()) {
            let mut b = build_marker(1, 0, 0, ControlType::Commit, 0);
            if flip < b.len() {
                b[flip] = byte;
            }
            if let Ok(v) = RecordBatch::parse(&b) {
                let _ = control_record(&v);
            }
        }
    }
}

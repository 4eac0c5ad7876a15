//! Kafka's flexible `TransactionLogValue` v1: v0's fields with compact strings and arrays
//! (unsigned varint length + 1), an empty tagged-field section after each partitions entry,
//! and the value's tagged fields `PreviousProducerId` (0, i64), `NextProducerId` (1, i64) and
//! `ClientTransactionVersion` (2, i16), each written only when it is not its default.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::records::{Reader, by_topic};
use super::{TxnMetadata, TxnState};
use crate::records::RecordsError;

const VALUE_VERSION_FLEXIBLE: i16 = 1;
const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
/// Tagged fields one struct may carry (a named bound on the decode loop).
const TAGGED_FIELDS_MAX: u32 = 64;
/// Partitions (and topics) decoded from one record.
const RECORD_PARTITIONS_MAX: u32 = 1_000_000;

fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_compact_str(buf: &mut BytesMut, s: &str) {
    put_uvarint(buf, s.len() as u32 + 1);
    buf.put_slice(s.as_bytes());
}

pub(super) fn value_v1(m: &TxnMetadata) -> Bytes {
    let mut buf = BytesMut::with_capacity(96);
    buf.put_i16(VALUE_VERSION_FLEXIBLE);
    buf.put_i64(m.producer_id);
    buf.put_i16(m.producer_epoch);
    buf.put_i32(m.timeout_ms);
    buf.put_i8(m.state.code());
    let topics = by_topic(m);
    put_uvarint(&mut buf, topics.len() as u32 + 1);
    for (t, ps) in topics {
        put_compact_str(&mut buf, t);
        put_uvarint(&mut buf, ps.len() as u32 + 1);
        for p in ps {
            buf.put_i32(p);
        }
        put_uvarint(&mut buf, 0);
    }
    buf.put_i64(m.last_update_ms);
    buf.put_i64(m.start_ms);
    let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
    if m.previous_producer_id >= 0 {
        tags.push((
            TAG_PREVIOUS_PRODUCER_ID,
            m.previous_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if m.next_producer_id >= 0 {
        tags.push((
            TAG_NEXT_PRODUCER_ID,
            m.next_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if m.client_transaction_version != 0 {
        let v = m.client_transaction_version.to_be_bytes().to_vec();
        tags.push((TAG_CLIENT_TRANSACTION_VERSION, v));
    }
    put_uvarint(&mut buf, tags.len() as u32);
    for (tag, data) in tags {
        put_uvarint(&mut buf, tag);
        put_uvarint(&mut buf, data.len() as u32);
        buf.put_slice(&data);
    }
    buf.freeze()
}

impl Reader {
    fn uvarint(&mut self, what: &'static str) -> Result<u32, RecordsError> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.i8(what)? as u8;
            v |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RecordsError::Invalid(what))
    }

    /// A compact length (varint n + 1; 0 is null, read as empty), bounded.
    fn compact_len(&mut self, what: &'static str) -> Result<u32, RecordsError> {
        let n = self.uvarint(what)?.saturating_sub(1);
        if n > RECORD_PARTITIONS_MAX {
            return Err(RecordsError::Invalid(what));
        }
        Ok(n)
    }

    fn compact_string(&mut self, what: &'static str) -> Result<String, RecordsError> {
        let len = self.compact_len(what)? as usize;
        self.need(len, what)?;
        let b = self.0.split_to(len);
        String::from_utf8(b.to_vec()).map_err(|_| RecordsError::Invalid(what))
    }

    /// Tagged fields as (tag, data); unknown tags are skipped, as Kafka does.
    fn tagged(&mut self) -> Result<Vec<(u32, Bytes)>, RecordsError> {
        let n = self.uvarint("tagged fields")?;
        if n > TAGGED_FIELDS_MAX {
            return Err(RecordsError::Invalid("tagged field count"));
        }
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let tag = self.uvarint("tag")?;
            let len = self.uvarint("tag size")? as usize;
            self.need(len, "tagged field")?;
            out.push((tag, self.0.split_to(len)));
        }
        Ok(out)
    }
}

/// The rest of a v1 value after its version.
pub(super) fn decode_v1(mut r: Reader) -> Result<TxnMetadata, RecordsError> {
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let timeout_ms = r.i32("timeout")?;
    let state = TxnState::from_code(r.i8("status")?).ok_or(RecordsError::Invalid("status"))?;
    let mut partitions = BTreeSet::new();
    for _ in 0..r.compact_len("partitions")? {
        let topic = r.compact_string("topic")?;
        for _ in 0..r.compact_len("partition ids")? {
            partitions.insert((topic.clone(), r.i32("partition")?));
        }
        r.tagged()?;
    }
    let last_update_ms = r.i64("last update")?;
    let start_ms = r.i64("start")?;
    let mut m = TxnMetadata {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
        previous_producer_id: -1,
        next_producer_id: -1,
        last_producer_epoch: -1,
    };
    for (tag, mut data) in r.tagged()? {
        match (tag, data.len()) {
            (TAG_PREVIOUS_PRODUCER_ID, 8) => m.previous_producer_id = data.get_i64(),
            (TAG_NEXT_PRODUCER_ID, 8) => m.next_producer_id = data.get_i64(),
            (TAG_CLIENT_TRANSACTION_VERSION, 2) => m.client_transaction_version = data.get_i16(),
            (TAG_PREVIOUS_PRODUCER_ID..=TAG_CLIENT_TRANSACTION_VERSION, _) => {
                return Err(RecordsError::Invalid("tagged field size"));
            }
            _ => {}
        }
    }
    Ok(m)
}

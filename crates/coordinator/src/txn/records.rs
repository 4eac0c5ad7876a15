//! Records of `__transaction_state`, in Kafka's non-flexible v0 layout (big-endian):
//! key `version i16 (0), transactional_id string`; value `version i16 (0), producer_id i64,
//! producer_epoch i16, transaction_timeout_ms i32, transaction_status i8, partitions
//! [topic string, [partition i32]], last_update_timestamp_ms i64, start_timestamp_ms i64`.
//! A tombstone (null value) removes the transactional id (expiry).
//!
//! A transaction-version-2 id (KIP-890 part 2) is written as Kafka's flexible v1 value: the
//! same fields with compact strings and arrays, and the tagged fields `PreviousProducerId`
//! (0), `NextProducerId` (1) and `ClientTransactionVersion` (2). Both versions are read.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{TxnMetadata, TxnState};
use crate::records::{OffsetsRecord, RecordsError};

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;
/// The first flexible value version (tagged fields).
const VALUE_VERSION_FLEXIBLE: i16 = 1;

/// Bounds the partitions decoded from one record.
const RECORD_PARTITIONS_MAX: i32 = 1_000_000;

fn put_str(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

pub fn key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_str(&mut buf, transactional_id);
    buf.freeze()
}

pub fn record(transactional_id: &str, m: &TxnMetadata) -> OffsetsRecord {
    let value = if m.client_transaction_version == 0
        && m.previous_producer_id < 0
        && m.next_producer_id < 0
    {
        value_v0(m)
    } else {
        super::records_v1::value_v1(m)
    };
    OffsetsRecord {
        key: key(transactional_id),
        value: Some(value),
    }
}

/// The tombstone removing `transactional_id` (expiry).
pub fn tombstone(transactional_id: &str) -> OffsetsRecord {
    OffsetsRecord {
        key: key(transactional_id),
        value: None,
    }
}

/// The partitions of a transaction grouped by topic, in order.
pub(super) fn by_topic(m: &TxnMetadata) -> Vec<(&str, Vec<i32>)> {
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in &m.partitions {
        match topics.last_mut() {
            Some((last, ps)) if *last == t.as_str() => ps.push(*p),
            _ => topics.push((t.as_str(), vec![*p])),
        }
    }
    topics
}

fn value_v0(m: &TxnMetadata) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(VALUE_VERSION);
    buf.put_i64(m.producer_id);
    buf.put_i16(m.producer_epoch);
    buf.put_i32(m.timeout_ms);
    buf.put_i8(m.state.code());
    let topics = by_topic(m);
    buf.put_i32(topics.len() as i32);
    for (t, ps) in topics {
        put_str(&mut buf, t);
        buf.put_i32(ps.len() as i32);
        for p in ps {
            buf.put_i32(p);
        }
    }
    buf.put_i64(m.last_update_ms);
    buf.put_i64(m.start_ms);
    buf.freeze()
}

pub(super) struct Reader(pub(super) Bytes);

impl Reader {
    pub(super) fn need(&self, n: usize, what: &'static str) -> Result<(), RecordsError> {
        if self.0.remaining() < n {
            return Err(RecordsError::Truncated(what));
        }
        Ok(())
    }
    pub(super) fn i8(&mut self, what: &'static str) -> Result<i8, RecordsError> {
        self.need(1, what)?;
        Ok(self.0.get_i8())
    }
    pub(super) fn i16(&mut self, what: &'static str) -> Result<i16, RecordsError> {
        self.need(2, what)?;
        Ok(self.0.get_i16())
    }
    pub(super) fn i32(&mut self, what: &'static str) -> Result<i32, RecordsError> {
        self.need(4, what)?;
        Ok(self.0.get_i32())
    }
    pub(super) fn i64(&mut self, what: &'static str) -> Result<i64, RecordsError> {
        self.need(8, what)?;
        Ok(self.0.get_i64())
    }
    pub(super) fn string(&mut self, what: &'static str) -> Result<String, RecordsError> {
        let len = self.i16(what)?;
        if len < 0 {
            return Err(RecordsError::Invalid(what));
        }
        self.need(len as usize, what)?;
        let b = self.0.split_to(len as usize);
        String::from_utf8(b.to_vec()).map_err(|_| RecordsError::Invalid(what))
    }
}

pub fn decode_key(key: &[u8]) -> Result<String, RecordsError> {
    let mut r = Reader(Bytes::copy_from_slice(key));
    let version = r.i16("transaction key version")?;
    if version != KEY_VERSION {
        return Err(RecordsError::UnsupportedVersion {
            what: "transaction key",
            version,
        });
    }
    r.string("transactional id")
}

pub fn decode_value(value: &Bytes) -> Result<TxnMetadata, RecordsError> {
    let mut r = Reader(value.clone());
    let version = r.i16("transaction value version")?;
    if version == VALUE_VERSION_FLEXIBLE {
        return super::records_v1::decode_v1(r);
    }
    if version != VALUE_VERSION {
        return Err(RecordsError::UnsupportedVersion {
            what: "transaction value",
            version,
        });
    }
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let timeout_ms = r.i32("timeout")?;
    let state = TxnState::from_code(r.i8("status")?).ok_or(RecordsError::Invalid("status"))?;
    let topics = r.i32("partitions")?;
    let mut partitions = BTreeSet::new();
    if topics > RECORD_PARTITIONS_MAX {
        return Err(RecordsError::Invalid("partition count"));
    }
    for _ in 0..topics.max(0) {
        let topic = r.string("topic")?;
        let n = r.i32("partition ids")?;
        if n > RECORD_PARTITIONS_MAX {
            return Err(RecordsError::Invalid("partition count"));
        }
        for _ in 0..n.max(0) {
            partitions.insert((topic.clone(), r.i32("partition")?));
        }
    }
    let last_update_ms = r.i64("last update")?;
    let start_ms = r.i64("start")?;
    Ok(TxnMetadata {
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
    })
}

//! Pending transactional offsets (TxnOffsetCommit) as older data dirs hold them: one
//! `__transaction_state` record per (transactional id, group) with the offsets not yet
//! committed, removed (tombstone) when the transaction ends. No longer written: the group
//! coordinator stores them as Kafka does, as the producer's transactional records in
//! `__consumer_offsets` (`group_txn.rs`). Still replayed, so an upgrade in the middle of a
//! transaction loses nothing: its marker commits them (as plain commits) and tombstones the
//! record. They live next to the transaction's own record, under a key version Kafka does not
//! use.
//!
//! Key: version i16 (= 1000), transactional id string, group string. Value: producer id i64,
//! count i32, then per offset: topic string, partition i32, offset i64, leader epoch i32,
//! metadata string.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use streamforge_coordinator::TxnOffset;
use streamforge_coordinator::records::OffsetsRecord;

/// The key version of a pending-offsets record (Kafka's transaction log keys are version 0).
pub const PENDING_KEY_VERSION: i16 = 1000;
/// Offsets decoded from one record (a named bound).
const OFFSETS_PER_RECORD_MAX: i32 = 1_000_000;

fn put_str(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn get_str(b: &mut Bytes) -> Option<String> {
    if b.remaining() < 2 {
        return None;
    }
    let n = b.get_i16();
    if n < 0 || b.remaining() < n as usize {
        return None;
    }
    String::from_utf8(b.split_to(n as usize).to_vec()).ok()
}

fn key(tid: &str, group: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(6 + tid.len() + group.len());
    k.put_i16(PENDING_KEY_VERSION);
    put_str(&mut k, tid);
    put_str(&mut k, group);
    k.freeze()
}

/// The record holding `offsets` of `producer_id` for (tid, group) (no longer written: the
/// group coordinator stores transactional offsets in `__consumer_offsets`; tests write it as
/// an older data dir holds it).
#[cfg(test)]
pub fn record<'a>(
    tid: &str,
    group: &str,
    producer_id: i64,
    offsets: impl ExactSizeIterator<Item = &'a TxnOffset>,
) -> OffsetsRecord {
    let mut v = BytesMut::new();
    v.put_i64(producer_id);
    v.put_i32(offsets.len() as i32);
    for o in offsets {
        put_str(&mut v, &o.topic);
        v.put_i32(o.partition);
        v.put_i64(o.offset);
        v.put_i32(o.leader_epoch);
        put_str(&mut v, &o.metadata);
    }
    OffsetsRecord {
        key: key(tid, group),
        value: Some(v.freeze()),
    }
}

/// The tombstone removing (tid, group)'s pending offsets.
pub fn tombstone(tid: &str, group: &str) -> OffsetsRecord {
    OffsetsRecord {
        key: key(tid, group),
        value: None,
    }
}

/// A decoded pending-offsets record: (transactional id, group), and the producer id with the
/// offsets (`None`: a tombstone).
pub type Pending = ((String, String), Option<(i64, Vec<TxnOffset>)>);

/// `None` when `record` is not a pending-offsets record (or is malformed).
pub fn decode(record: &OffsetsRecord) -> Option<Pending> {
    let mut k = record.key.clone();
    if k.remaining() < 2 || k.get_i16() != PENDING_KEY_VERSION {
        return None;
    }
    let tid = get_str(&mut k)?;
    let group = get_str(&mut k)?;
    let Some(value) = &record.value else {
        return Some(((tid, group), None));
    };
    let mut v = value.clone();
    if v.remaining() < 12 {
        return None;
    }
    let pid = v.get_i64();
    let n = v.get_i32();
    if !(0..=OFFSETS_PER_RECORD_MAX).contains(&n) {
        return None;
    }
    let mut offsets = Vec::new();
    for _ in 0..n {
        let topic = get_str(&mut v)?;
        if v.remaining() < 16 {
            return None;
        }
        let partition = v.get_i32();
        let offset = v.get_i64();
        let leader_epoch = v.get_i32();
        let metadata = get_str(&mut v)?;
        offsets.push(TxnOffset {
            topic,
            partition,
            offset,
            leader_epoch,
            metadata,
        });
    }
    Some(((tid, group), Some((pid, offsets))))
}

/// The pending offsets behind a lock of their own, shared by the transaction service (which
/// holds and completes them) and the group coordinator (whose offsets retention skips their
/// partitions, as Kafka's). Taken last: under the transaction coordinator's lock or the group
/// coordinator's, never held while another lock is taken.
#[derive(Default)]
pub struct SharedPending(parking_lot::Mutex<crate::txn_service::PendingOffsets>);

impl From<crate::txn_service::PendingOffsets> for SharedPending {
    fn from(pending: crate::txn_service::PendingOffsets) -> SharedPending {
        SharedPending(parking_lot::Mutex::new(pending))
    }
}

impl SharedPending {
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, crate::txn_service::PendingOffsets> {
        self.0.lock()
    }
}

impl streamforge_coordinator::PendingTxnOffsets for SharedPending {
    fn pending_partitions(&self, group_id: &str) -> BTreeSet<(String, i32)> {
        pending_partitions(&self.0.lock(), group_id)
    }
}

/// The partitions of `group` with transactional offsets held until their transaction ends (by
/// any producer): what OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT.
pub fn pending_partitions(
    pending: &crate::txn_service::PendingOffsets,
    group: &str,
) -> BTreeSet<(String, i32)> {
    pending
        .iter()
        .filter(|((g, _), _)| g == group)
        .flat_map(|(_, offsets)| offsets.keys().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tombstone() {
        let o = TxnOffset {
            topic: "in".into(),
            partition: 3,
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
        };
        let r = record("tx", "g", 7, [o.clone()].iter());
        let k = ("tx".to_string(), "g".to_string());
        assert_eq!(decode(&r), Some((k.clone(), Some((7, vec![o])))));
        assert_eq!(decode(&tombstone("tx", "g")), Some((k, None)));
        let txn_key = streamforge_coordinator::txn::records::key("tx");
        let other = OffsetsRecord {
            key: txn_key,
            value: None,
        };
        assert_eq!(decode(&other), None);
    }

    #[test]
    fn pending_partitions_of_one_group() {
        let offset = |topic: &str, partition| TxnOffset {
            topic: topic.into(),
            partition,
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
        };
        let mut pending = crate::txn_service::PendingOffsets::new();
        for (group, pid, topic, partition) in [
            ("g", 1, "a", 0),
            ("g", 1, "a", 1),
            ("g", 2, "a", 1),
            ("g", 2, "b", 5),
            ("other", 3, "c", 0),
        ] {
            pending
                .entry((group.to_string(), pid))
                .or_default()
                .insert((topic.to_string(), partition), offset(topic, partition));
        }
        let want: BTreeSet<(String, i32)> = [("a", 0), ("a", 1), ("b", 5)]
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect();
        assert_eq!(pending_partitions(&pending, "g"), want);
        assert!(pending_partitions(&pending, "none").is_empty());
    }
}

//! The per-partition manifest: the only list of remote segments readers trust.
//!
//! Crash safety comes from ordering: a segment's objects are uploaded first, then a new
//! manifest naming them replaces the old one in a single PUT (atomic on every object store;
//! the local-directory store writes a temporary file and renames it). A crash in between
//! leaves objects that no manifest names: invisible to readers, deleted by `reconcile` on
//! start-up. Deletion runs the other way round: first a manifest without the segment, then
//! the objects.

use object_store::{ObjectStore, ObjectStoreExt, PutPayload, path::Path};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TieredError};
use crate::layout::{ObjectKind, PartitionId};

/// Bumped when the manifest format changes incompatibly.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;
/// A manifest larger than this is rejected as corrupt (bounds memory on load).
pub const MANIFEST_BYTES_MAX: usize = 64 << 20;

/// Entries one segment's remote transaction index may hold (34 bytes each: about 8.5 MiB).
/// An ABORT marker is a batch of about 70 bytes, so a segment needs some 18 MiB of nothing
/// but aborts to reach it.
pub const TXN_INDEX_ENTRIES_MAX: u32 = 1 << 18;

/// The leader epoch of a manifest no leader has claimed yet.
pub const NO_LEADER_EPOCH: i32 = -1;

fn no_leader_epoch() -> i32 {
    NO_LEADER_EPOCH
}

/// One uploaded segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    /// The random id shared by this segment's objects.
    pub segment_id: String,
    pub base_offset: i64,
    /// Offset of the last record in the segment (inclusive).
    pub last_offset: i64,
    /// Size of the `.log` object.
    pub size_bytes: u64,
    /// Largest record timestamp in the segment, and the last offset of the batch holding it.
    pub max_timestamp_ms: i64,
    pub max_timestamp_offset: i64,
    /// Number of record batches (for metrics and sanity checks).
    pub batch_count: u64,
    /// Objects uploaded for this segment (always `Log` and `RemoteIndex`).
    pub objects: Vec<ObjectKind>,
    /// Wall-clock time of the upload.
    pub uploaded_at_ms: i64,
    /// Entries of the segment's aborted-transaction index: `Some(0)` when the segment ends no
    /// aborted transaction (no `TxnIndex` object), `Some(n)` for a `TxnIndex` object of `n`
    /// entries. `None` (absent) in entries written before transaction indexes were uploaded:
    /// unknown, read as none (docs/TIERED.md, "Transactions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn_index_entries: Option<u32>,
    /// The offset the `ProducerSnapshot` object is the producer state as of (every batch below
    /// it applied): the segment's end, the next segment's base offset (Kafka's
    /// `<nextOffset>.snapshot` in `LogSegmentData`). `None` (absent) in entries written before
    /// it was recorded: their snapshot object, if any, is the state at the segment's *start*
    /// and is never used as its end state (docs/TIERED.md, "Replicas").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_snapshot_offset: Option<i64>,
}

impl RemoteSegment {
    /// The first offset after this segment.
    pub fn next_offset(&self) -> i64 {
        // Saturating: a corrupt manifest's i64::MAX must be rejected, not panic.
        self.last_offset.saturating_add(1)
    }
}

/// Everything remote about one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionManifest {
    pub format_version: u32,
    pub topic: String,
    pub topic_id: String,
    pub partition: i32,
    /// Incremented on every update (diagnostics).
    pub generation: u64,
    /// The leader epoch of the partition leader that wrote this manifest. Only the leader
    /// writes it (KIP-405: the leader copies, followers read), and a writer whose epoch is
    /// below the stored one is fenced: a deposed leader cannot overwrite a newer leader's
    /// manifest. -1 in manifests written before replication knew about tiering.
    #[serde(default = "no_leader_epoch")]
    pub leader_epoch: i32,
    /// The first offset readers may ask for (moved by retention and DeleteRecords).
    pub log_start_offset: i64,
    /// Segments in offset order, non-overlapping (contiguous unless the log had gaps).
    pub segments: Vec<RemoteSegment>,
}

impl PartitionManifest {
    pub fn empty(p: &PartitionId) -> Self {
        PartitionManifest {
            format_version: MANIFEST_FORMAT_VERSION,
            topic: p.topic.clone(),
            topic_id: p.topic_id.clone(),
            partition: p.partition,
            generation: 0,
            leader_epoch: NO_LEADER_EPOCH,
            log_start_offset: 0,
            segments: Vec::new(),
        }
    }

    /// The first offset not in remote storage (`None` when nothing is remote).
    pub fn next_offset(&self) -> Option<i64> {
        self.segments.last().map(RemoteSegment::next_offset)
    }

    /// Remote log start, or `None` when nothing is remote.
    pub fn start_offset(&self) -> Option<i64> {
        let first = self.segments.first()?;
        Some(self.log_start_offset.max(first.base_offset))
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.size_bytes)
            .fold(0, u64::saturating_add)
    }

    /// The first segment holding `offset` or, in a gap between segments, the next offsets
    /// after it (a read then starts at that segment's first batch, as a local read would).
    pub fn segment_for(&self, offset: i64) -> Option<&RemoteSegment> {
        if offset < self.log_start_offset {
            return None;
        }
        let i = self.segments.partition_point(|s| s.last_offset < offset);
        self.segments.get(i)
    }

    /// The segment after the one starting at `base_offset`.
    pub fn segment_after(&self, base_offset: i64) -> Option<&RemoteSegment> {
        let i = self
            .segments
            .partition_point(|s| s.base_offset <= base_offset);
        self.segments.get(i)
    }

    /// Check the invariants a reader relies on.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.format_version != MANIFEST_FORMAT_VERSION {
            return Err(format!(
                "unsupported format_version {}",
                self.format_version
            ));
        }
        for w in self.segments.windows(2) {
            if w[0]
                .last_offset
                .checked_add(1)
                .is_none_or(|n| w[1].base_offset < n)
            {
                return Err(format!(
                    "segments overlap: {}..={} then {}",
                    w[0].base_offset, w[0].last_offset, w[1].base_offset
                ));
            }
        }
        for s in &self.segments {
            if s.last_offset < s.base_offset {
                return Err(format!("segment {} ends before it starts", s.segment_id));
            }
            if !s.objects.contains(&ObjectKind::Log)
                || !s.objects.contains(&ObjectKind::RemoteIndex)
            {
                return Err(format!("segment {} lacks log or index", s.segment_id));
            }
            validate_txn_index(s)?;
            validate_producer_snapshot(s)?;
        }
        Ok(())
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self> {
        if bytes.len() > MANIFEST_BYTES_MAX {
            return Err(TieredError::BadMetadata {
                key: key.to_string(),
                reason: format!("{} bytes exceeds {MANIFEST_BYTES_MAX}", bytes.len()),
            });
        }
        let m: PartitionManifest =
            serde_json::from_slice(bytes).map_err(|e| TieredError::BadMetadata {
                key: key.to_string(),
                reason: e.to_string(),
            })?;
        m.validate().map_err(|reason| TieredError::BadMetadata {
            key: key.to_string(),
            reason,
        })?;
        Ok(m)
    }
}

/// A `TxnIndex` object is named exactly when the entry counts one or more aborted
/// transactions, and never more than `TXN_INDEX_ENTRIES_MAX`.
fn validate_txn_index(s: &RemoteSegment) -> std::result::Result<(), String> {
    let has_object = s.objects.contains(&ObjectKind::TxnIndex);
    let consistent = match s.txn_index_entries {
        None | Some(0) => !has_object,
        Some(n) => has_object && n <= TXN_INDEX_ENTRIES_MAX,
    };
    if consistent {
        Ok(())
    } else {
        Err(format!(
            "segment {}: transaction index of {:?} entries, object listed: {has_object}",
            s.segment_id, s.txn_index_entries
        ))
    }
}

/// A recorded producer-snapshot offset needs the object and lies at or after the segment's
/// end (its next offset, or the base of the next segment after a gap).
fn validate_producer_snapshot(s: &RemoteSegment) -> std::result::Result<(), String> {
    match s.producer_snapshot_offset {
        None => Ok(()),
        Some(o) if s.objects.contains(&ObjectKind::ProducerSnapshot) && o >= s.next_offset() => {
            Ok(())
        }
        Some(o) => Err(format!(
            "segment {}: producer snapshot at {o} for a segment ending at {}",
            s.segment_id, s.last_offset
        )),
    }
}

impl PartitionManifest {
    /// The segment whose producer snapshot is the state as of `offset` (its end): what a
    /// replica starting its local log at `offset` loads. Only entries that record the
    /// snapshot's offset qualify.
    pub fn segment_with_snapshot_at(&self, offset: i64) -> Option<&RemoteSegment> {
        self.segments
            .iter()
            .rev()
            .find(|s| s.producer_snapshot_offset == Some(offset))
    }

    /// Where a replica whose leader's local log starts at `local_start` begins its own local
    /// log, and the segment whose end-state snapshot it loads (Kafka's follower: the remote
    /// segment holding the offset before the leader's local start, restarted at its end).
    /// `local_start` itself when a segment's snapshot is there; otherwise the end of the
    /// segment holding `local_start - 1`, when that is at or above `local_start` (replicas
    /// roll at different offsets, so a new leader's local start may fall inside a remote
    /// segment; the leader still holds those offsets locally). `None` when neither exists.
    pub fn snapshot_for_local_start(&self, local_start: i64) -> Option<(i64, &RemoteSegment)> {
        if let Some(s) = self.segment_with_snapshot_at(local_start) {
            return Some((local_start, s));
        }
        let s = self.segment_for(local_start.checked_sub(1)?)?;
        let at = s.producer_snapshot_offset?;
        (s.base_offset < local_start && at >= local_start).then_some((at, s))
    }
}

/// Load the manifest at `key`; `None` when it does not exist yet.
pub async fn load(store: &dyn ObjectStore, key: &Path) -> Result<Option<PartitionManifest>> {
    match store.get(key).await {
        Ok(r) => {
            let bytes = r.bytes().await?;
            Ok(Some(PartitionManifest::decode(key.as_ref(), &bytes)?))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Replace the manifest at `key` in one atomic PUT.
pub async fn store(store: &dyn ObjectStore, key: &Path, m: &PartitionManifest) -> Result<()> {
    debug_assert!(m.validate().is_ok(), "writing an invalid manifest");
    store.put(key, PutPayload::from(m.encode())).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn seg(id: &str, base: i64, last: i64) -> RemoteSegment {
        RemoteSegment {
            segment_id: id.into(),
            base_offset: base,
            last_offset: last,
            size_bytes: 100,
            max_timestamp_ms: last,
            max_timestamp_offset: last,
            batch_count: 1,
            objects: vec![ObjectKind::Log, ObjectKind::RemoteIndex],
            uploaded_at_ms: 0,
            txn_index_entries: Some(0),
            producer_snapshot_offset: None,
        }
    }

    #[test]
    fn lookup_and_bounds() {
        let p = PartitionId::new("t", "id", 0);
        let mut m = PartitionManifest::empty(&p);
        assert_eq!(m.next_offset(), None);
        assert_eq!(m.start_offset(), None);
        m.segments = vec![seg("a", 0, 9), seg("b", 10, 19), seg("c", 20, 20)];
        m.validate().unwrap();
        assert_eq!(m.segment_for(0).unwrap().segment_id, "a");
        assert_eq!(m.segment_for(9).unwrap().segment_id, "a");
        assert_eq!(m.segment_for(10).unwrap().segment_id, "b");
        assert_eq!(m.segment_for(20).unwrap().segment_id, "c");
        assert!(m.segment_for(21).is_none());
        assert_eq!(m.segment_after(10).unwrap().segment_id, "c");
        assert!(m.segment_after(20).is_none());
        assert!(m.segment_for(-1).is_none());
        m.log_start_offset = 5;
        assert!(m.segment_for(4).is_none());
        assert_eq!(m.start_offset(), Some(5));
        assert_eq!(m.next_offset(), Some(21));
        let back = PartitionManifest::decode("k", &m.encode()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn invalid_manifests_are_rejected() {
        let p = PartitionId::new("t", "id", 0);
        let mut m = PartitionManifest::empty(&p);
        m.segments = vec![seg("a", 0, 9), seg("b", 9, 19)];
        assert!(PartitionManifest::decode("k", &m.encode()).is_err());
        assert!(PartitionManifest::decode("k", b"{not json").is_err());
        assert!(PartitionManifest::decode("k", b"").is_err());
        m.segments = vec![seg("a", 0, i64::MAX), seg("b", i64::MAX, i64::MAX)];
        assert!(PartitionManifest::decode("k", &m.encode()).is_err());
    }

    #[test]
    fn a_txn_index_object_is_listed_exactly_when_entries_are_counted() {
        let p = PartitionId::new("t", "id", 0);
        let mut m = PartitionManifest::empty(&p);
        let mut with = seg("a", 0, 9);
        with.txn_index_entries = Some(2);
        with.objects.push(ObjectKind::TxnIndex);
        m.segments = vec![with.clone()];
        assert_eq!(PartitionManifest::decode("k", &m.encode()).unwrap(), m);
        m.segments[0].objects.pop(); // counted, not listed
        assert!(PartitionManifest::decode("k", &m.encode()).is_err());
        m.segments[0] = seg("a", 0, 9);
        m.segments[0].objects.push(ObjectKind::TxnIndex); // listed, none counted
        assert!(PartitionManifest::decode("k", &m.encode()).is_err());
        with.txn_index_entries = Some(TXN_INDEX_ENTRIES_MAX + 1);
        m.segments = vec![with];
        assert!(PartitionManifest::decode("k", &m.encode()).is_err());
    }

    #[test]
    fn a_segment_entry_from_before_txn_indexes_reads_as_unknown() {
        // A manifest entry as written before the field existed: no `txn_index_entries`.
        let json = br#"{"format_version":1,"topic":"t","topic_id":"id","partition":0,
            "generation":3,"leader_epoch":2,"log_start_offset":0,"segments":[
            {"segment_id":"a","base_offset":0,"last_offset":9,"size_bytes":100,
             "max_timestamp_ms":9,"max_timestamp_offset":9,"batch_count":1,
             "objects":["log","remote_index"],"uploaded_at_ms":0}]}"#;
        let m = PartitionManifest::decode("k", json).unwrap();
        assert_eq!(m.segments[0].txn_index_entries, None);
        // Written back, it stays unknown (no field), so its meaning never changes.
        let back = String::from_utf8(m.encode()).unwrap();
        assert!(!back.contains("txn_index_entries"), "{back}");
        let mut known = m.clone();
        known.segments[0].txn_index_entries = Some(0);
        let text = String::from_utf8(known.encode()).unwrap();
        assert!(text.contains("\"txn_index_entries\": 0"), "{text}");
    }

    #[test]
    fn a_snapshot_offset_marks_end_state_snapshots_and_old_entries_are_not_trusted() {
        // As written before the field: a snapshot object (the state at the segment's start).
        let json = br#"{"format_version":1,"topic":"t","topic_id":"id","partition":0,
            "generation":3,"leader_epoch":2,"log_start_offset":0,"segments":[
            {"segment_id":"a","base_offset":0,"last_offset":9,"size_bytes":100,
             "max_timestamp_ms":9,"max_timestamp_offset":9,"batch_count":1,
             "objects":["log","remote_index","producer_snapshot"],"uploaded_at_ms":0,
             "txn_index_entries":0}]}"#;
        let m = PartitionManifest::decode("k", json).unwrap();
        assert_eq!(m.segments[0].producer_snapshot_offset, None);
        assert!(m.segment_with_snapshot_at(10).is_none(), "not an end state");
        assert!(m.segment_with_snapshot_at(0).is_none());
        let back = String::from_utf8(m.encode()).unwrap();
        assert!(!back.contains("producer_snapshot_offset"), "{back}");

        let mut new = m.clone();
        new.segments[0].producer_snapshot_offset = Some(10);
        new.segments.push(seg("b", 12, 20)); // a gap: b's snapshot would be at 21 or later
        new.segments[1].objects.push(ObjectKind::ProducerSnapshot);
        new.segments[1].producer_snapshot_offset = Some(21);
        let back = PartitionManifest::decode("k", &new.encode()).unwrap();
        assert_eq!(back, new);
        assert_eq!(back.segment_with_snapshot_at(10).unwrap().segment_id, "a");
        assert_eq!(back.segment_with_snapshot_at(21).unwrap().segment_id, "b");
        assert!(back.segment_with_snapshot_at(12).is_none());

        assert_eq!(back.snapshot_for_local_start(10).unwrap().0, 10);
        // A local start inside a segment: restart at that segment's end.
        assert_eq!(
            back.snapshot_for_local_start(15)
                .map(|(o, s)| (o, s.segment_id.as_str())),
            Some((21, "b"))
        );
        assert!(back.snapshot_for_local_start(11).is_none(), "in the gap");
        assert!(
            back.snapshot_for_local_start(25).is_none(),
            "past the remote end"
        );
        assert!(m.snapshot_for_local_start(5).is_none(), "an old entry");

        let mut bad = new.clone();
        bad.segments[0].producer_snapshot_offset = Some(9); // inside the segment
        assert!(PartitionManifest::decode("k", &bad.encode()).is_err());
        let mut bad = new;
        bad.segments[0].objects.pop(); // recorded without the object
        assert!(PartitionManifest::decode("k", &bad.encode()).is_err());
    }
}

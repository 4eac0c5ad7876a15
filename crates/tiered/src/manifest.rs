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
}

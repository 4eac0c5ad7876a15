//! The deterministic object key layout.
//!
//! ```text
//! <prefix>/<topic>-<topic_id>/<partition>/manifest.json
//! <prefix>/<topic>-<topic_id>/<partition>/<base_offset:020>.<segment_id>.<kind>
//! ```
//! `segment_id` is a random 128-bit id (hex) chosen per upload attempt, so a retried or
//! repeated upload never overwrites objects a reader may be using, and objects that no
//! manifest names (a crash between upload and manifest update) are recognisable as orphans.

use object_store::path::Path;

/// The manifest's file name inside a partition's prefix.
pub const MANIFEST_NAME: &str = "manifest.json";

/// Identifies one partition in the remote store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    pub topic: String,
    /// The topic's UUID (any stable string); keeps a re-created topic apart from the old one.
    pub topic_id: String,
    pub partition: i32,
}

impl PartitionId {
    pub fn new(topic: impl Into<String>, topic_id: impl Into<String>, partition: i32) -> Self {
        PartitionId {
            topic: topic.into(),
            topic_id: topic_id.into(),
            partition,
        }
    }
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The kinds of object uploaded for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// The `.log` bytes, unchanged.
    Log,
    /// Our remote offset/time index (see `remote_index`), built while uploading.
    RemoteIndex,
    /// The local `.index` file, as the log wrote it.
    OffsetIndex,
    /// The local `.timeindex` file.
    TimeIndex,
    /// The producer-state snapshot at the segment's end: the local `<next base>.snapshot`
    /// (every batch of the segment applied; Kafka's `<nextOffset>.snapshot`). The manifest
    /// entry's `producer_snapshot_offset` says so; entries without it are from before, when
    /// the `<base>.snapshot` (the state at the segment's start) was uploaded instead.
    ProducerSnapshot,
    /// The partition's leader-epoch checkpoint at upload time.
    LeaderEpochCheckpoint,
    /// The aborted-transaction index of the segment (`<base>.txnindex`, the log's format),
    /// uploaded only when the segment holds ABORT markers (KIP-405's
    /// `LogSegmentData.transactionIndex`).
    TxnIndex,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 7] = [
        ObjectKind::Log,
        ObjectKind::RemoteIndex,
        ObjectKind::OffsetIndex,
        ObjectKind::TimeIndex,
        ObjectKind::ProducerSnapshot,
        ObjectKind::LeaderEpochCheckpoint,
        ObjectKind::TxnIndex,
    ];

    /// The object name suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            ObjectKind::Log => "log",
            ObjectKind::RemoteIndex => "rindex",
            ObjectKind::OffsetIndex => "index",
            ObjectKind::TimeIndex => "timeindex",
            ObjectKind::ProducerSnapshot => "snapshot",
            ObjectKind::LeaderEpochCheckpoint => "leader-epoch-checkpoint",
            ObjectKind::TxnIndex => "txnindex",
        }
    }

    fn from_suffix(s: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.suffix() == s)
    }
}

/// Builds keys under an optional prefix.
#[derive(Debug, Clone, Default)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    pub fn new(prefix: &str) -> Self {
        KeyLayout {
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    /// The folder holding everything of one partition.
    pub fn partition_prefix(&self, p: &PartitionId) -> Path {
        let rel = format!("{}-{}/{}", p.topic, p.topic_id, p.partition);
        if self.prefix.is_empty() {
            Path::from(rel)
        } else {
            Path::from(format!("{}/{rel}", self.prefix))
        }
    }

    pub fn manifest(&self, p: &PartitionId) -> Path {
        self.partition_prefix(p).join(MANIFEST_NAME)
    }

    pub fn segment_object(
        &self,
        p: &PartitionId,
        base_offset: i64,
        segment_id: &str,
        kind: ObjectKind,
    ) -> Path {
        self.partition_prefix(p)
            .join(format!("{base_offset:020}.{segment_id}.{}", kind.suffix()))
    }
}

/// Split a segment object's file name into `(base_offset, segment_id, kind)`.
pub fn parse_segment_object_name(name: &str) -> Option<(i64, &str, ObjectKind)> {
    let mut parts = name.splitn(3, '.');
    let base = parts.next()?;
    let id = parts.next()?;
    let kind = ObjectKind::from_suffix(parts.next()?)?;
    if base.len() != 20 || id.is_empty() {
        return None;
    }
    Some((base.parse().ok()?, id, kind))
}

/// A fresh random segment id (128 bits, hex).
pub fn new_segment_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_parse_back() {
        let l = KeyLayout::new("/cold/");
        let p = PartitionId::new("orders", "abc123", 7);
        assert_eq!(
            l.manifest(&p).as_ref(),
            "cold/orders-abc123/7/manifest.json"
        );
        let k = l.segment_object(&p, 42, "ff00", ObjectKind::Log);
        assert_eq!(
            k.as_ref(),
            "cold/orders-abc123/7/00000000000000000042.ff00.log"
        );
        let name = k.filename().unwrap();
        assert_eq!(
            parse_segment_object_name(name),
            Some((42, "ff00", ObjectKind::Log))
        );
        for kind in ObjectKind::ALL {
            let k = l.segment_object(&p, 1, "aa", kind);
            assert_eq!(
                parse_segment_object_name(k.filename().unwrap()),
                Some((1, "aa", kind))
            );
        }
        assert_eq!(parse_segment_object_name("manifest.json"), None);
        assert_eq!(
            KeyLayout::new("").manifest(&p).as_ref(),
            "orders-abc123/7/manifest.json"
        );
    }

    #[test]
    fn segment_ids_are_unique() {
        assert_ne!(new_segment_id(), new_segment_id());
        assert_eq!(new_segment_id().len(), 32);
    }
}

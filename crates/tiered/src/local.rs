//! The local side: which segment files of a partition directory are sealed.
//!
//! Segment files are named by base offset (`00000000000000000000.log`, Kafka's layout).
//! Every segment except the newest (the active one, still appended to) is sealed and
//! immutable, so it can be uploaded without coordinating with the writer.

use std::path::{Path, PathBuf};

use crate::error::{Result, TieredError};
use crate::layout::ObjectKind;

/// Bounds a directory scan.
pub const SEGMENTS_PER_PARTITION_MAX: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSegment {
    pub base_offset: i64,
    /// Base offset of the following segment (the first offset that is not in this one).
    pub next_base_offset: i64,
    pub log_path: PathBuf,
    pub size_bytes: u64,
}

impl LocalSegment {
    /// The companion file of `kind` (it may not exist).
    pub fn companion(&self, kind: ObjectKind) -> Option<PathBuf> {
        let dir = self.log_path.parent()?;
        let base = format!("{:020}", self.base_offset);
        match kind {
            ObjectKind::Log | ObjectKind::RemoteIndex => None,
            ObjectKind::OffsetIndex => Some(dir.join(format!("{base}.index"))),
            ObjectKind::TimeIndex => Some(dir.join(format!("{base}.timeindex"))),
            // The state at the segment's end: every batch below the next segment's base
            // applied (the log writes `<offset>.snapshot` as the state as of `offset` when it
            // rolls there). `<base>.snapshot` would be the state at its start.
            ObjectKind::ProducerSnapshot => {
                Some(dir.join(format!("{:020}.snapshot", self.next_base_offset)))
            }
            ObjectKind::LeaderEpochCheckpoint => Some(dir.join("leader-epoch-checkpoint")),
            ObjectKind::TxnIndex => Some(dir.join(format!("{base}.txnindex"))),
        }
    }
}

/// All `.log` segments in `dir`, oldest first, with sizes. The last one is the active segment.
pub fn list_segments(dir: &Path) -> Result<Vec<(i64, PathBuf, u64)>> {
    let io = |e: std::io::Error| TieredError::LocalIo {
        path: dir.display().to_string(),
        source: e,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".log") else {
            continue;
        };
        if stem.len() != 20 {
            continue;
        }
        let Ok(base) = stem.parse::<i64>() else {
            continue;
        };
        // A segment deleted between readdir and stat is simply skipped.
        let Ok(meta) = entry.metadata() else { continue };
        out.push((base, entry.path(), meta.len()));
        if out.len() >= SEGMENTS_PER_PARTITION_MAX {
            break;
        }
    }
    out.sort_by_key(|s| s.0);
    Ok(out)
}

/// The sealed segments of `dir` (everything but the newest), oldest first.
pub fn sealed_segments(dir: &Path) -> Result<Vec<LocalSegment>> {
    let all = list_segments(dir)?;
    Ok(all
        .windows(2)
        .map(|w| LocalSegment {
            base_offset: w[0].0,
            next_base_offset: w[1].0,
            log_path: w[0].1.clone(),
            size_bytes: w[0].2,
        })
        .collect())
}

/// Total bytes of `.log` files in `dir`.
pub fn local_size_bytes(dir: &Path) -> u64 {
    list_segments(dir)
        .map(|v| v.iter().map(|s| s.2).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_segment_is_active() {
        let d = tempfile::tempdir().unwrap();
        for (base, len) in [(0i64, 10usize), (50, 20), (120, 5)] {
            std::fs::write(d.path().join(format!("{base:020}.log")), vec![0u8; len]).unwrap();
            std::fs::write(d.path().join(format!("{base:020}.index")), b"").unwrap();
        }
        std::fs::write(d.path().join("junk.log"), b"").unwrap();
        let s = sealed_segments(d.path()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].base_offset, s[0].next_base_offset, s[0].size_bytes),
            (0, 50, 10)
        );
        assert_eq!(
            (s[1].base_offset, s[1].next_base_offset, s[1].size_bytes),
            (50, 120, 20)
        );
        assert_eq!(local_size_bytes(d.path()), 35);
        assert!(
            s[1].companion(ObjectKind::OffsetIndex)
                .unwrap()
                .ends_with("00000000000000000050.index")
        );
        // The producer snapshot of a segment is the one at its end (the next base).
        assert!(
            s[1].companion(ObjectKind::ProducerSnapshot)
                .unwrap()
                .ends_with("00000000000000000120.snapshot")
        );
    }
}

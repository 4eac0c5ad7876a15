//! What the cleaner takes from a log under its lock (cheap: zero-copy views of the sealed
//! segments), and the plan it makes from it: which part is dirty, whether it is worth cleaning.

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use streamforge_protocol::batch::{BatchIter, RecordBatch};

use crate::LogConfig;
use crate::log::Log;

/// A sealed segment as the cleaner sees it.
#[derive(Debug, Clone)]
pub struct CleanableSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size_bytes: u64,
    /// Largest record timestamp (or the file's modification time), for `min.compaction.lag.ms`.
    pub largest_timestamp_ms: Option<i64>,
    /// The segment's bytes (valid even if the segment is deleted meanwhile).
    pub bytes: Bytes,
}

impl CleanableSegment {
    /// The first batch's max timestamp, for `max.compaction.lag.ms` (Kafka's
    /// `earliestTimestamp` of the first dirty segment).
    pub fn first_timestamp_ms(&self) -> Option<i64> {
        let (_, first) = BatchIter::new(&self.bytes).next()?.ok()?;
        (first.max_timestamp() >= 0).then(|| first.max_timestamp())
    }

    /// Batches of this segment, in order (stops at the first one that does not parse).
    pub fn batches(&self) -> impl Iterator<Item = RecordBatch<'_>> {
        BatchIter::new(&self.bytes).map_while(|b| b.ok().map(|(_, v)| v))
    }
}

/// A compacted log's state for one cleaning pass.
#[derive(Debug, Clone)]
pub struct CleanView {
    pub dir: PathBuf,
    pub log_start_offset: i64,
    /// Base offset of the active segment: never cleaned.
    pub active_base_offset: i64,
    /// Sealed, non-empty segments, oldest first.
    pub segments: Vec<CleanableSegment>,
    pub config: LogConfig,
    /// Producer id → last offset of its last batch.
    pub producer_last_offsets: HashMap<i64, i64>,
    /// The aborted transactions overlapping the sealed segments (the `.txnindex` entries).
    pub aborted: Vec<crate::txn_index::AbortedTxn>,
    /// The first offset of the oldest open transaction: its segment and later ones are not
    /// cleaned (their transactions' outcomes are not known yet; Kafka's rule).
    pub first_unstable_offset: Option<i64>,
}

/// The section a pass cleans: `[first_dirty, first_uncleanable)` is dirty; everything below
/// `first_uncleanable` is rewritten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanPlan {
    pub first_dirty_offset: i64,
    pub first_uncleanable_offset: i64,
    pub dirty_bytes: u64,
    pub cleanable_bytes: u64,
    pub dirty_ratio: f64,
}

impl Log {
    /// The cleaner's view of this log, if it is compacted and has sealed segments.
    pub fn clean_view(&self) -> Option<CleanView> {
        if !self.config.compact {
            return None;
        }
        let active = self.active().base_offset();
        let segments: Vec<CleanableSegment> = self
            .segments
            .values()
            .filter(|s| s.base_offset() != active && !s.is_empty())
            .map(|s| CleanableSegment {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size_bytes: s.size_bytes(),
                largest_timestamp_ms: s.largest_timestamp_ms(),
                bytes: s.all_bytes(),
            })
            .collect();
        if segments.is_empty() {
            return None;
        }
        let producer_last_offsets = self
            .producers
            .entries()
            .into_iter()
            .filter_map(|e| e.last_batch().map(|b| (e.producer_id, b.last_offset)))
            .collect();
        Some(CleanView {
            dir: self.dir.clone(),
            log_start_offset: self.log_start_offset,
            active_base_offset: active,
            segments,
            config: self.config.clone(),
            producer_last_offsets,
            aborted: self.aborted.overlapping(self.log_start_offset, active),
            first_unstable_offset: self.first_unstable_offset(),
        })
    }
}

impl CleanView {
    /// Decide what a pass would clean. `checkpoint`: the cleaner's first dirty offset for this
    /// log, if known. `force`: clean whatever the ratio (a tombstone's delete horizon passed).
    /// `None` when nothing is cleanable or the log is not worth cleaning yet.
    pub fn plan(&self, checkpoint: Option<i64>, now_ms: i64, force: bool) -> Option<CleanPlan> {
        let first_base = self.segments.first()?.base_offset;
        let first_dirty = checkpoint
            .filter(|&c| c >= self.log_start_offset && c <= self.active_base_offset)
            .unwrap_or(self.log_start_offset)
            .max(first_base);
        // Segments holding a record newer than the compaction lag stay dirty.
        let lag = self.config.min_compaction_lag_ms.max(0);
        let first_uncleanable = self
            .segments
            .iter()
            .find(|s| {
                s.largest_timestamp_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) < lag)
            })
            .map_or(self.active_base_offset, |s| s.base_offset);
        let first_uncleanable = match self.first_unstable_offset {
            Some(unstable) => self
                .segments
                .iter()
                .find(|s| s.next_offset > unstable)
                .map_or(first_uncleanable, |s| s.base_offset.min(first_uncleanable)),
            None => first_uncleanable,
        };
        if first_dirty >= first_uncleanable && !force {
            return None;
        }
        // A forced pass with nothing dirty re-cleans the clean section (expired tombstones).
        let first_dirty = first_dirty.min(first_uncleanable);
        let (mut dirty_bytes, mut cleanable_bytes) = (0u64, 0u64);
        for s in self
            .segments
            .iter()
            .take_while(|s| s.base_offset < first_uncleanable)
        {
            cleanable_bytes += s.size_bytes;
            if s.next_offset > first_dirty {
                dirty_bytes += s.size_bytes;
            }
        }
        let dirty_ratio = if cleanable_bytes == 0 {
            0.0
        } else {
            dirty_bytes as f64 / cleanable_bytes as f64
        };
        let overdue = self
            .segments
            .iter()
            .find(|s| s.next_offset > first_dirty)
            .and_then(CleanableSegment::first_timestamp_ms)
            .is_some_and(|t| now_ms.saturating_sub(t) > self.config.max_compaction_lag_ms);
        let worth = force
            || (dirty_bytes > 0
                && (dirty_ratio >= self.config.min_cleanable_dirty_ratio || overdue));
        worth.then_some(CleanPlan {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            dirty_bytes,
            cleanable_bytes,
            dirty_ratio,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_protocol::batch::testing::{BatchSpec, build_batch};

    /// Segments of `size` bytes each: (base, next, largest timestamp = first timestamp).
    fn view(segments: &[(i64, i64, i64)], config: LogConfig) -> CleanView {
        let segments = segments
            .iter()
            .map(|&(base, next, ts)| {
                let spec = BatchSpec {
                    base_offset: base,
                    base_timestamp: ts,
                    ..BatchSpec::default()
                };
                let bytes = Bytes::from(build_batch(spec, &[(Some(b"k"), Some(b"v"))]));
                CleanableSegment {
                    base_offset: base,
                    next_offset: next,
                    size_bytes: 1000,
                    largest_timestamp_ms: Some(ts),
                    bytes,
                }
            })
            .collect::<Vec<_>>();
        CleanView {
            dir: PathBuf::from("/nonexistent/t-0"),
            log_start_offset: 0,
            active_base_offset: segments.last().map_or(0, |s| s.next_offset),
            segments,
            config,
            producer_last_offsets: HashMap::new(),
            aborted: Vec::new(),
            first_unstable_offset: None,
        }
    }

    fn compacted() -> LogConfig {
        LogConfig {
            compact: true,
            ..LogConfig::default()
        }
    }

    #[test]
    fn the_dirty_ratio_decides_unless_forced_or_overdue() {
        let v = view(
            &[(0, 10, 100), (10, 20, 200), (20, 30, 300), (30, 40, 400)],
            compacted(),
        );
        // Nothing cleaned yet: all dirty, ratio 1.
        let p = v.plan(None, 1_000, false).unwrap();
        assert_eq!((p.first_dirty_offset, p.first_uncleanable_offset), (0, 40));
        assert_eq!(p.dirty_ratio, 1.0);
        // Three of four segments clean: 0.25 < 0.5.
        assert_eq!(v.plan(Some(30), 1_000, false), None);
        let forced = v.plan(Some(30), 1_000, true).unwrap();
        assert_eq!(forced.dirty_ratio, 0.25);
        // All clean: only a forced pass (a tombstone's horizon) runs, over the clean section.
        assert_eq!(v.plan(Some(40), 1_000, false), None);
        assert_eq!(
            v.plan(Some(40), 1_000, true).unwrap().first_dirty_offset,
            40
        );
        // max.compaction.lag.ms: the first dirty segment's first batch is older than it.
        let overdue = view(
            &[(0, 10, 100), (10, 20, 200), (20, 30, 300), (30, 40, 400)],
            LogConfig {
                max_compaction_lag_ms: 500,
                ..compacted()
            },
        );
        assert!(overdue.plan(Some(30), 1_000, false).is_some());
        assert!(overdue.plan(Some(30), 800, false).is_none());
    }

    #[test]
    fn min_compaction_lag_keeps_recent_segments_dirty() {
        let config = LogConfig {
            min_compaction_lag_ms: 500,
            ..compacted()
        };
        let v = view(&[(0, 10, 100), (10, 20, 200), (20, 30, 900)], config);
        let p = v.plan(None, 1_000, false).unwrap();
        assert_eq!(
            p.first_uncleanable_offset, 20,
            "the segment with a record 100 ms old stays"
        );
        assert_eq!(
            v.plan(None, 50_000, false)
                .unwrap()
                .first_uncleanable_offset,
            30
        );
        // A checkpoint outside the log (a recreated topic) starts from the log start.
        assert_eq!(
            v.plan(Some(99), 50_000, false).unwrap().first_dirty_offset,
            0
        );
    }
}

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

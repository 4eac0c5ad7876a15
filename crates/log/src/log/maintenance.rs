//! Truncation, DeleteRecords, retention and periodic housekeeping.

use super::Log;
use crate::LogError;
use crate::{checkpoint, producer_snapshot};

impl Log {
    /// DeleteRecords: move the log start offset to `offset` (<= high watermark), deleting
    /// whole segments below it. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, LogError> {
        if offset > self.high_watermark || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end: self.high_watermark,
            });
        }
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        self.mark_dirty()?;
        self.log_start_offset = offset;
        checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, offset)?;
        self.delete_segments_below_start()?;
        self.epochs.truncate_from_start(offset)?;
        Ok(self.log_start_offset)
    }

    /// Delete segments that lie wholly below the log start offset (never the active one).
    fn delete_segments_below_start(&mut self) -> Result<(), LogError> {
        loop {
            let mut iter = self.segments.keys();
            let (Some(&first), Some(&second)) = (iter.next(), iter.next()) else {
                break;
            };
            if second > self.log_start_offset {
                break;
            }
            if let Some(seg) = self.segments.remove(&first) {
                tracing::info!(dir = %self.dir.display(), base_offset = first, "deleting segment below log start");
                seg.delete(&self.config.runtime)?;
            }
        }
        // Group commit must not keep (and later close here) the deleted segments' files.
        self.refresh_group_files()?;
        let first = *self.segments.keys().next().expect("active segment");
        producer_snapshot::delete_below(&self.dir, first)?;
        self.aborted.retain_markers_in(first, i64::MAX);
        Ok(())
    }

    /// Remove everything at and after `offset` (follower truncation).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.next_offset {
            // Nothing to remove from the log, but the epoch cache may end with an epoch that
            // began at the log end and holds no record: this replica led it (the entry is
            // assigned when leadership starts) and another leader was elected before any
            // append. Left there, the follower would send it as its last fetched epoch
            // forever, the leader would answer with the same diverging epoch, and the
            // follower would never fetch again. Kafka's `UnifiedLog.truncateTo` drops it too.
            self.epochs.truncate_from_end(self.next_offset)?;
            return Ok(());
        }
        if offset <= self.log_start_offset {
            return self.truncate_fully_and_start_at(offset.max(0));
        }
        self.mark_dirty()?;
        // Drop whole segments starting at or after `offset`.
        let doomed: Vec<i64> = self.segments.range(offset..).map(|(b, _)| *b).collect();
        for base in doomed {
            if self.segments.len() == 1 {
                break;
            }
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete(&self.config.runtime)?;
            }
        }
        let active = self.active_mut();
        if active.base_offset() >= offset {
            // Only possible when every segment started at or after `offset`.
            return self.truncate_fully_and_start_at(offset);
        }
        // It may have been sealed (trimmed indexes) when later segments existed.
        active.unseal()?;
        active.truncate_to(offset)?;
        self.next_offset = active.next_offset();
        self.group.reset_durable(self.next_offset);
        self.refresh_group_files()?;
        self.high_watermark = self.high_watermark.min(self.next_offset);
        self.recovery_point = self.recovery_point.min(self.next_offset);
        self.epochs.truncate_from_end(self.next_offset)?;
        if self.recovery_point_checkpointed > self.recovery_point {
            self.write_recovery_checkpoint()?;
        }
        self.rebuild_producer_state()?;
        Ok(())
    }

    /// Delete everything and start again at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.mark_dirty()?;
        let all: Vec<i64> = self.segments.keys().copied().collect();
        for base in all {
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete(&self.config.runtime)?;
            }
        }
        self.create_segment(offset, 0)?;
        self.log_start_offset = offset;
        self.next_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.epochs.clear()?;
        self.producers.clear();
        self.aborted.clear();
        producer_snapshot::delete_above(&self.dir, i64::MIN)?;
        self.group.reset_durable(offset);
        self.refresh_group_files()?;
        checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, offset)?;
        self.write_recovery_checkpoint()?;
        Ok(())
    }

    /// Periodic housekeeping: roll by `segment.ms`, retention by time/size, `flush.ms`, and the
    /// recovery-point checkpoint.
    pub fn tick(&mut self, now_ms: i64) -> Result<(), LogError> {
        if let Some(advance) = self.tick_deferred(now_ms)? {
            advance.write()?;
        }
        Ok(())
    }

    /// [`Log::tick`], except that moving the recovery-point checkpoint forward (a small file
    /// write with an fsync) is returned for the caller to run after releasing the log's lock.
    pub fn tick_deferred(
        &mut self,
        now_ms: i64,
    ) -> Result<Option<checkpoint::RecoveryPointAdvance>, LogError> {
        // Group-commit fsyncs happen outside the log; pick up how far they got.
        let durable = self.group.durable_offset().min(self.next_offset);
        if durable > self.recovery_point {
            self.recovery_point = durable;
        }
        if !self.active().is_empty() && self.active().age_ms(now_ms) > self.config.segment_ms {
            let base = self.next_offset;
            self.roll_at(base, now_ms)?;
        }
        if now_ms.saturating_sub(self.retention_checked_ms)
            >= self.config.retention_check_interval_ms
        {
            self.retention_checked_ms = now_ms;
            self.apply_retention(now_ms)?;
        }
        self.expire_producers(now_ms);
        if self.next_offset > self.recovery_point
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms
        {
            self.flush()?;
            self.last_flush_ms = now_ms;
        }
        if self.recovery_point > self.recovery_point_checkpointed {
            // Epoch entries of the data below the new recovery point are on disk before it is.
            self.epochs.persist_deferred()?;
            self.recovery_point_checkpointed = self.recovery_point;
            return Ok(Some(self.checkpoint.advance(self.recovery_point)));
        }
        if self.recovery_point != self.recovery_point_checkpointed {
            self.write_recovery_checkpoint()?;
        }
        Ok(None)
    }

    /// Delete old segments by `retention.ms` and `retention.bytes` (only segments wholly below
    /// the high watermark; the active one after rolling, as Kafka does). A segment's age is
    /// measured from its largest record timestamp, or, when no record has one (all -1), from its
    /// file's modification time (Kafka's `LogSegment.largestTimestamp`); a segment whose age
    /// cannot be known is never deleted by time.
    fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError> {
        if !self.config.delete {
            // `cleanup.policy=compact` alone: the cleaner removes superseded records; nothing
            // is deleted by age or size (Kafka's rule).
            return Ok(());
        }
        let mut deletable = 0usize;
        let mut size_excess = if self.config.retention_bytes >= 0 {
            self.size_bytes() as i64 - self.config.retention_bytes
        } else {
            i64::MIN
        };
        let by_time_on = self.config.retention_ms >= 0;
        let bases: Vec<(i64, i64, Option<i64>, u64)> = self
            .segments
            .values()
            .map(|s| {
                (
                    s.base_offset(),
                    s.next_offset(),
                    // Only looked up (a stat for segments without timestamps) when it matters.
                    by_time_on.then(|| s.largest_timestamp_ms()).flatten(),
                    s.size_bytes(),
                )
            })
            .collect();
        for (_, next, largest_ts, size) in &bases {
            if *size == 0 || *next > self.high_watermark {
                break;
            }
            let by_time = by_time_on
                && largest_ts
                    .is_some_and(|ts| now_ms.saturating_sub(ts) > self.config.retention_ms);
            let by_size = size_excess != i64::MIN && size_excess - (*size as i64) >= 0;
            if !(by_time || by_size) {
                break;
            }
            if by_size {
                size_excess -= *size as i64;
            }
            deletable += 1;
        }
        if deletable == 0 {
            return Ok(());
        }
        self.mark_dirty()?;
        if deletable == self.segments.len() {
            let base = self.next_offset;
            self.roll_at(base, now_ms)?;
        }
        for (base, _, _, _) in bases.iter().take(deletable) {
            if let Some(seg) = self.segments.remove(base) {
                tracing::info!(dir = %self.dir.display(), base_offset = *base, "retention deletes segment");
                seg.delete(&self.config.runtime)?;
            }
        }
        // Group commit must not keep (and later close here) the deleted segments' files.
        self.refresh_group_files()?;
        let first = *self.segments.keys().next().expect("active segment remains");
        if first > self.log_start_offset {
            self.log_start_offset = first;
            checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, first)?;
            self.epochs.truncate_from_start(first)?;
        }
        producer_snapshot::delete_below(&self.dir, first)?;
        self.aborted.retain_markers_in(first, i64::MAX);
        Ok(())
    }
}

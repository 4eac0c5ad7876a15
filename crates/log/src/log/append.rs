//! Appending: validation, offset assignment, roll.

use streamforge_protocol::batch::{RecordBatch, RecordBatchMut};
use streamforge_protocol::validate::{RecordPolicy, validate_batch};

use super::{Log, batch_error, sizing};
use crate::segment::Segment;
use crate::{AppendInfo, LogError, TimestampType};

impl Log {
    /// Validate every batch in `batches`: header, size, CRC, and, for a leader's append
    /// (`walk_records`), every record as Kafka's LogValidator does (framing, counts, offset
    /// deltas, compacted keys; compressed records decompressed with a bounded output).
    /// Returns (number of batches, number of records).
    /// `walk_records`: a leader's append (records checked, control batches refused); a
    /// follower's takes the leader's batches, markers included.
    fn validate(&self, batches: &[u8], walk_records: bool) -> Result<(usize, u32), LogError> {
        if batches.is_empty() {
            return Err(LogError::InvalidRecord("no record batches".into()));
        }
        let policy = RecordPolicy {
            compacted: self.config.compact,
        };
        // Decompressed records of the current batch; dropped with this call.
        let mut scratch = Vec::new();
        let mut position = 0;
        let mut batch_count = 0usize;
        let mut record_count = 0u32;
        while position < batches.len() {
            let view = RecordBatch::parse(&batches[position..]).map_err(batch_error)?;
            if view.size_bytes() as u64 > self.config.max_message_bytes {
                return Err(LogError::MessageTooLarge {
                    size: view.size_bytes(),
                    max: self.config.max_message_bytes,
                });
            }
            view.verify_crc().map_err(batch_error)?;
            // A follower copies the leader's markers; a producer may not write one.
            if view.is_control() && walk_records {
                return Err(LogError::InvalidRecord(
                    "producers may not write control batches".into(),
                ));
            }
            if walk_records {
                validate_batch(&view, policy, &mut scratch).map_err(LogError::Records)?;
            } else {
                view.validate_header().map_err(batch_error)?;
            }
            record_count = record_count.saturating_add(view.record_count() as u32);
            batch_count += 1;
            position += view.size_bytes();
        }
        Ok((batch_count, record_count))
    }

    /// Record that this replica leads from `leader_epoch` on, starting at the log end offset
    /// (Kafka's `maybeAssignEpochStartOffset` when a replica becomes leader). Recorded here,
    /// once, instead of by the epoch's first append; the checkpoint file is written with the next
    /// recovery point checkpoint (`LeaderEpochCache::assign_deferred`), so neither a Produce
    /// request nor a start-up that takes leadership of every partition waits for its fsync.
    pub fn assign_epoch_start_offset(&mut self, leader_epoch: i32) -> Result<(), LogError> {
        if leader_epoch >= 0 && self.epochs.latest_epoch() != Some(leader_epoch) {
            self.epochs.assign_deferred(leader_epoch, self.next_offset);
        }
        Ok(())
    }

    /// Validate `batches` (one or more RecordBatch v2, as received in a Produce request), assign
    /// offsets by patching each batch's `baseOffset` and `partitionLeaderEpoch` in place (and
    /// LogAppendTime if configured, recomputing the CRC), append, update indexes.
    pub fn append_as_leader(
        &mut self,
        batches: &mut [u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let (batch_count, record_count) = self.validate(batches, true)?;
        if let Some(dup) = self.check_producers(batches, batch_count)? {
            // A retry of a batch already in the log: answer as Kafka does, append nothing.
            return Ok(AppendInfo {
                first_offset: dup.first_offset,
                last_offset: dup.last_offset,
                max_timestamp: dup.timestamp,
                log_append_time_ms: dup.timestamp,
                log_start_offset: self.log_start_offset,
                record_count: 0,
                duplicate: true,
                leader_epoch,
            });
        }
        let log_append = self.config.timestamp_type == TimestampType::LogAppendTime;
        let first_offset = self.next_offset;
        let mut next = first_offset;
        let mut max_timestamp = -1i64;
        let mut position = 0;
        while position < batches.len() {
            let mut batch = RecordBatchMut::parse(&mut batches[position..]).map_err(batch_error)?;
            batch.set_base_offset(next);
            batch.set_partition_leader_epoch(leader_epoch);
            if log_append {
                batch.set_log_append_time(now_ms);
            }
            let view = batch.view();
            max_timestamp = max_timestamp.max(view.max_timestamp());
            next = view.last_offset() + 1;
            position += view.size_bytes();
        }
        self.append_assigned(
            batches,
            first_offset,
            next,
            record_count,
            leader_epoch,
            now_ms,
        )?;
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            max_timestamp,
            log_append_time_ms: if log_append { now_ms } else { -1 },
            log_start_offset: self.log_start_offset,
            record_count,
            duplicate: false,
            leader_epoch,
        })
    }

    /// Append batches whose offsets were assigned by a leader (replication, later issues).
    pub fn append_as_follower(&mut self, batches: &[u8]) -> Result<AppendInfo, LogError> {
        // A follower takes the leader's batches as validated (Kafka: no LogValidator here).
        let (_, record_count) = self.validate(batches, false)?;
        let mut position = 0;
        let mut first_offset = None;
        let mut next = self.next_offset;
        let mut max_timestamp = -1i64;
        let mut epoch = -1;
        while position < batches.len() {
            let view = RecordBatch::parse(&batches[position..]).map_err(batch_error)?;
            if view.base_offset() < next {
                return Err(LogError::InvalidRecord(format!(
                    "batch offset {} is below the log end offset {next}",
                    view.base_offset()
                )));
            }
            first_offset.get_or_insert(view.base_offset());
            max_timestamp = max_timestamp.max(view.max_timestamp());
            epoch = view.partition_leader_epoch();
            next = view.last_offset() + 1;
            position += view.size_bytes();
        }
        let first_offset = first_offset.unwrap_or(next);
        if first_offset != self.next_offset && !self.active().is_empty() {
            // A gap: start a new segment at the leader's offset so offsets in a segment stay dense.
            self.roll_at(first_offset, i64::MAX)?;
        }
        let now_ms = max_timestamp.max(0);
        self.append_assigned(batches, first_offset, next, record_count, epoch, now_ms)?;
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            max_timestamp,
            log_append_time_ms: -1,
            log_start_offset: self.log_start_offset,
            record_count,
            duplicate: false,
            leader_epoch: epoch,
        })
    }

    pub(super) fn append_assigned(
        &mut self,
        batches: &[u8],
        first_offset: i64,
        next_offset: i64,
        record_count: u32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(), LogError> {
        self.mark_dirty()?;
        let bytes = batches.len() as u64;
        let roll = self.active().should_roll(
            bytes,
            self.config.segment_bytes,
            self.config.segment_ms,
            now_ms,
        );
        if roll {
            self.roll_at(first_offset, now_ms)?;
        } else if self.active().is_empty() && self.active().base_offset() != first_offset {
            // An empty active segment whose base no longer matches (follower gap).
            let base = self.active().base_offset();
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete(&self.config.runtime)?;
            }
            self.create_segment(first_offset, now_ms)?;
            self.refresh_group_files()?;
        }
        if leader_epoch >= 0 && self.epochs.latest_epoch() != Some(leader_epoch) {
            self.epochs.assign(leader_epoch, first_offset)?;
        }
        self.active_mut().append(batches)?;
        self.next_offset = next_offset;
        self.apply_producers(batches)?;
        self.unflushed_messages += i64::from(record_count);
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    pub(super) fn create_segment(&mut self, base: i64, now_ms: i64) -> Result<(), LogError> {
        let seg = Segment::create(&self.dir, base, sizing(&self.config), now_ms)?;
        self.segments.insert(base, seg);
        Ok(())
    }

    /// Seal the active segment and start a new one at `base` (the log end offset).
    pub(super) fn roll_at(&mut self, base: i64, now_ms: i64) -> Result<(), LogError> {
        let created_ms = if now_ms == i64::MAX { 0 } else { now_ms };
        if self.active().is_empty() {
            return Ok(());
        }
        self.mark_dirty()?;
        self.active_mut().seal()?;
        self.create_segment(base, created_ms)?;
        self.refresh_group_files()?;
        // Flush the sealed segment soon, off the append path (Kafka does so after a roll), so the
        // recovery point keeps up with rolled data.
        self.config.runtime.request_flush(&self.group, base);
        // Producer state as of the new segment's base, so recovery replays at most one segment.
        self.take_producer_snapshot(base)?;
        tracing::debug!(dir = %self.dir.display(), base_offset = base, "rolled segment");
        Ok(())
    }
}

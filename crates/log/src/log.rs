//! `Log`: one partition's ordered set of segments, with offsets, flush policy and retention.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamforge_protocol::batch::{BatchError, RecordBatch, RecordBatchMut, RecordIter};

use crate::checkpoint;
use crate::epoch::LeaderEpochCache;
use crate::group_commit::{FlushTicket, GroupCommit};
use crate::segment::{BadBatch, Segment, SegmentSizing};
use crate::{AppendInfo, LogConfig, LogError, ReadInfo, TimestampType};

/// Bound on the number of segments one `read` touches (each contributes one slice).
const MAX_SEGMENTS_PER_READ: usize = 16;

/// One partition's log.
pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    /// Segments by base offset; never empty; the last one is the active segment.
    pub(crate) segments: BTreeMap<i64, Segment>,
    pub(crate) log_start_offset: i64,
    pub(crate) next_offset: i64,
    pub(crate) high_watermark: i64,
    /// Everything below this offset is fsynced.
    pub(crate) recovery_point: i64,
    /// The recovery point last written to the checkpoint file.
    pub(crate) recovery_point_checkpointed: i64,
    pub(crate) epochs: LeaderEpochCache,
    pub(crate) unflushed_messages: i64,
    pub(crate) last_flush_ms: i64,
    pub(crate) group: Arc<GroupCommit>,
}

pub(crate) fn sizing(config: &LogConfig) -> SegmentSizing {
    SegmentSizing {
        segment_bytes: config.segment_bytes,
        index_max_bytes: config.segment_index_bytes,
        index_interval_bytes: config.index_interval_bytes,
    }
}

fn batch_error(e: BatchError) -> LogError {
    match e {
        BatchError::UnsupportedMagic(m) => LogError::UnsupportedMagic(m),
        BatchError::InvalidHeader(why) => LogError::InvalidRecord(why.to_string()),
        other => LogError::CorruptMessage(other.to_string()),
    }
}

impl Log {
    /// Open (or create) the log in `dir` (`<data-dir>/<topic>-<partition>`), recovering after an
    /// unclean shutdown. `now_ms` is the wall clock (passed in so tests control time).
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log, LogError> {
        crate::recovery::open(dir, config, now_ms)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub(crate) fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Validate every batch in `batches`: header, size, CRC, and (for compacted topics) keys.
    /// Returns (number of batches, number of records).
    fn validate(&self, batches: &[u8]) -> Result<(usize, u32), LogError> {
        if batches.is_empty() {
            return Err(LogError::InvalidRecord("no record batches".into()));
        }
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
            view.validate_header().map_err(batch_error)?;
            if view.is_control() {
                return Err(LogError::InvalidRecord(
                    "producers may not write control batches".into(),
                ));
            }
            if self.config.compact && view.compression() == 0 {
                for record in RecordIter::new(&view).map_err(batch_error)? {
                    if record.map_err(batch_error)?.key_len < 0 {
                        return Err(LogError::InvalidRecord(
                            "compacted topic requires keys on every record".into(),
                        ));
                    }
                }
            }
            record_count = record_count.saturating_add(view.record_count() as u32);
            batch_count += 1;
            position += view.size_bytes();
        }
        Ok((batch_count, record_count))
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
        let (_, record_count) = self.validate(batches)?;
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
        })
    }

    /// Append batches whose offsets were assigned by a leader (replication, later issues).
    pub fn append_as_follower(&mut self, batches: &[u8]) -> Result<AppendInfo, LogError> {
        let (_, record_count) = self.validate(batches)?;
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
        })
    }

    fn append_assigned(
        &mut self,
        batches: &[u8],
        first_offset: i64,
        next_offset: i64,
        record_count: u32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(), LogError> {
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
                seg.delete()?;
            }
            self.create_segment(first_offset, now_ms)?;
        }
        if leader_epoch >= 0 && self.epochs.latest_epoch() != Some(leader_epoch) {
            self.epochs.assign(leader_epoch, first_offset)?;
        }
        self.active_mut().append(batches)?;
        self.next_offset = next_offset;
        self.unflushed_messages += i64::from(record_count);
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    fn create_segment(&mut self, base: i64, now_ms: i64) -> Result<(), LogError> {
        let seg = Segment::create(&self.dir, base, sizing(&self.config), now_ms)?;
        self.segments.insert(base, seg);
        Ok(())
    }

    /// Seal the active segment and start a new one at `base` (the log end offset).
    fn roll_at(&mut self, base: i64, now_ms: i64) -> Result<(), LogError> {
        let created_ms = if now_ms == i64::MAX { 0 } else { now_ms };
        if self.active().is_empty() {
            return Ok(());
        }
        self.active_mut().seal()?;
        self.create_segment(base, created_ms)?;
        self.refresh_group_files()?;
        tracing::debug!(dir = %self.dir.display(), base_offset = base, "rolled segment");
        Ok(())
    }

    /// Read whole batches starting with the one that contains `offset`, at most `max_bytes`
    /// (but always at least one whole batch if `min_one_message`), and never past
    /// `max_offset` (exclusive; the high watermark for consumers).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<ReadInfo, LogError> {
        if offset < self.log_start_offset || offset > self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end: self.next_offset,
            });
        }
        let mut info = ReadInfo::default();
        if offset >= max_offset || offset == self.next_offset {
            return Ok(info);
        }
        let first_base = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(offset);
        let mut at = offset;
        for (_, seg) in self
            .segments
            .range(first_base..)
            .take(MAX_SEGMENTS_PER_READ)
        {
            let remaining = max_bytes.saturating_sub(info.bytes);
            let min_one = min_one_message && info.bytes == 0;
            if remaining == 0 && !min_one {
                break;
            }
            if at >= max_offset {
                break;
            }
            match seg.read(at, remaining, max_offset, min_one) {
                Some((slice, next)) => {
                    info.bytes += slice.len();
                    info.slices.push(slice);
                    at = next;
                }
                None => {
                    if !seg.is_empty() && seg.next_offset() > at {
                        // Data here but the first batch does not fit the budget.
                        break;
                    }
                }
            }
        }
        Ok(info)
    }

    /// First offset whose record timestamp is >= `timestamp_ms`, with that timestamp
    /// (ListOffsets by time). `None` if none.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        for seg in self.segments.values() {
            if seg.is_empty() || seg.max_timestamp() < timestamp_ms {
                continue;
            }
            if seg.next_offset() <= self.log_start_offset {
                continue;
            }
            if let Some(found) = seg.find_by_timestamp(timestamp_ms, self.log_start_offset) {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Offset and timestamp of the record with the largest timestamp (ListOffsets -3):
    /// `(offset, timestamp)`.
    pub fn max_timestamp_and_offset(&self) -> Option<(i64, i64)> {
        let mut best: Option<&Segment> = None;
        for seg in self.segments.values() {
            if seg.is_empty() || seg.next_offset() <= self.log_start_offset {
                continue;
            }
            if best.is_none_or(|b| seg.max_timestamp() > b.max_timestamp()) {
                best = Some(seg);
            }
        }
        best.and_then(|s| s.max_timestamp_record())
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    /// Set by the replica manager (single broker: = log end offset after each append). Clamped
    /// to `[log start, log end]`.
    pub fn set_high_watermark(&mut self, offset: i64) {
        self.high_watermark = offset.clamp(self.log_start_offset, self.next_offset);
    }
    /// Offsets below this are fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    /// Bytes on disk (all segments).
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size_bytes).sum()
    }
    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// Apply changed topic configs (AlterConfigs) to this log. Index and segment sizes apply to
    /// segments created from now on.
    pub fn update_config(&mut self, config: LogConfig) {
        self.config = config;
    }

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
                return Ok(());
            };
            if second > self.log_start_offset {
                return Ok(());
            }
            if let Some(seg) = self.segments.remove(&first) {
                tracing::info!(dir = %self.dir.display(), base_offset = first, "deleting segment below log start");
                seg.delete()?;
            }
        }
    }

    /// Remove everything at and after `offset` (follower truncation).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.next_offset {
            return Ok(());
        }
        if offset <= self.log_start_offset {
            return self.truncate_fully_and_start_at(offset.max(0));
        }
        // Drop whole segments starting at or after `offset`.
        let doomed: Vec<i64> = self.segments.range(offset..).map(|(b, _)| *b).collect();
        for base in doomed {
            if self.segments.len() == 1 {
                break;
            }
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete()?;
            }
        }
        let active = self.active_mut();
        if active.base_offset() >= offset {
            // Only possible when every segment started at or after `offset`.
            return self.truncate_fully_and_start_at(offset);
        }
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
        Ok(())
    }

    /// Delete everything and start again at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        let all: Vec<i64> = self.segments.keys().copied().collect();
        for base in all {
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete()?;
            }
        }
        self.create_segment(offset, 0)?;
        self.log_start_offset = offset;
        self.next_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.epochs.clear()?;
        self.group.reset_durable(offset);
        self.refresh_group_files()?;
        checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, offset)?;
        self.write_recovery_checkpoint()?;
        Ok(())
    }

    /// Periodic housekeeping: roll by `segment.ms`, retention by time/size, `flush.ms`, and the
    /// recovery-point checkpoint.
    pub fn tick(&mut self, now_ms: i64) -> Result<(), LogError> {
        // Group-commit fsyncs happen outside the log; pick up how far they got.
        let durable = self.group.durable_offset().min(self.next_offset);
        if durable > self.recovery_point {
            self.recovery_point = durable;
        }
        if !self.active().is_empty() && self.active().age_ms(now_ms) > self.config.segment_ms {
            let base = self.next_offset;
            self.roll_at(base, now_ms)?;
        }
        self.apply_retention(now_ms)?;
        if self.next_offset > self.recovery_point
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms
        {
            self.flush()?;
            self.last_flush_ms = now_ms;
        }
        if self.recovery_point != self.recovery_point_checkpointed {
            self.write_recovery_checkpoint()?;
        }
        Ok(())
    }

    /// Delete old segments by `retention.ms` and `retention.bytes` (only segments wholly below
    /// the high watermark; the active one after rolling, as Kafka does).
    fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError> {
        let mut deletable = 0usize;
        let mut size_excess = if self.config.retention_bytes >= 0 {
            self.size_bytes() as i64 - self.config.retention_bytes
        } else {
            i64::MIN
        };
        let bases: Vec<(i64, i64, i64, u64)> = self
            .segments
            .values()
            .map(|s| {
                (
                    s.base_offset(),
                    s.next_offset(),
                    s.max_timestamp(),
                    s.size_bytes(),
                )
            })
            .collect();
        for (base, next, max_ts, size) in &bases {
            let _ = base;
            if *size == 0 || *next > self.high_watermark {
                break;
            }
            let by_time = self.config.retention_ms >= 0
                && now_ms.saturating_sub(*max_ts) > self.config.retention_ms;
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
        if deletable == self.segments.len() {
            let base = self.next_offset;
            self.roll_at(base, now_ms)?;
        }
        for (base, _, _, _) in bases.iter().take(deletable) {
            if let Some(seg) = self.segments.remove(base) {
                tracing::info!(dir = %self.dir.display(), base_offset = *base, "retention deletes segment");
                seg.delete()?;
            }
        }
        let first = *self.segments.keys().next().expect("active segment remains");
        if first > self.log_start_offset {
            self.log_start_offset = first;
            checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, first)?;
            self.epochs.truncate_from_start(first)?;
        }
        Ok(())
    }

    /// fsync everything appended so far and advance the recovery point.
    pub fn flush(&mut self) -> Result<(), LogError> {
        let from = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        for (_, seg) in self.segments.range(from..) {
            seg.flush()?;
        }
        self.recovery_point = self.next_offset;
        self.unflushed_messages = 0;
        self.group.mark_durable(self.next_offset);
        Ok(())
    }

    /// A ticket to wait (outside the log's lock) until everything appended so far is fsynced,
    /// sharing the fsync with every other waiter (group commit; acks=all uses it).
    pub fn flush_ticket(&self) -> FlushTicket {
        FlushTicket {
            group: Arc::clone(&self.group),
            offset: self.next_offset,
        }
    }

    /// The log's group-commit state (durable offset, fsync count).
    pub fn group_commit(&self) -> &Arc<GroupCommit> {
        &self.group
    }

    /// Tell group commit which files may hold data that is not yet durable.
    pub(crate) fn refresh_group_files(&self) -> Result<(), LogError> {
        let durable = self.group.durable_offset();
        let mut files = Vec::new();
        for seg in self.segments.values() {
            if seg.next_offset() > durable || seg.is_empty() {
                files.push((seg.base_offset(), seg.file_handle()?));
            }
        }
        if files.is_empty() {
            let active = self.active();
            files.push((active.base_offset(), active.file_handle()?));
        }
        self.group.set_files(files);
        Ok(())
    }

    pub(crate) fn write_recovery_checkpoint(&mut self) -> Result<(), LogError> {
        checkpoint::write_offset(
            &self.dir,
            checkpoint::RECOVERY_POINT_FILE,
            self.recovery_point,
        )?;
        self.recovery_point_checkpointed = self.recovery_point;
        Ok(())
    }

    /// Flush and write the clean-shutdown marker.
    pub fn close(mut self) -> Result<(), LogError> {
        self.active_mut().close()?;
        self.flush()?;
        self.write_recovery_checkpoint()?;
        checkpoint::write_offset(&self.dir, checkpoint::LOG_START_FILE, self.log_start_offset)?;
        std::fs::File::create(self.dir.join(checkpoint::CLEAN_SHUTDOWN_FILE))?.sync_all()?;
        checkpoint::sync_dir(&self.dir)?;
        Ok(())
    }

    /// Leader epoch of the last batch at or below the end, and the end offset of `epoch`
    /// (OffsetForLeaderEpoch): `(epoch, end_offset)`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.next_offset)
    }
    /// Latest leader epoch recorded in the log, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }
    /// The leader-epoch cache entries `(epoch, start offset)`.
    pub fn leader_epochs(&self) -> &[(i32, i64)] {
        self.epochs.entries()
    }

    /// Check the CRC of every batch in every segment (a full scrub). Returns the first bad batch
    /// with its segment's base offset.
    pub fn verify(&self) -> Option<(i64, BadBatch)> {
        self.segments
            .values()
            .find_map(|s| s.verify().map(|b| (s.base_offset(), b)))
    }
}

impl From<LogError> for io::Error {
    fn from(e: LogError) -> io::Error {
        match e {
            LogError::Io(e) => e,
            other => io::Error::other(other.to_string()),
        }
    }
}

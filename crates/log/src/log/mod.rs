//! `Log`: one partition's ordered set of segments, with offsets, flush policy and retention.

mod append;
mod idempotence;
mod maintenance;
mod rate_limit;
mod txn;
pub use txn::TxnMarker;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamforge_protocol::batch::BatchError;

use crate::checkpoint;
use crate::epoch::LeaderEpochCache;
use crate::group_commit::{FlushTicket, GroupCommit};
use crate::producer_state::ProducerStateManager;
use crate::segment::{BadBatch, Segment, SegmentSizing};
use crate::{LogConfig, LogError, ReadInfo};

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
    /// The recovery point last written to the checkpoint file, or handed out to be written
    /// (`tick_deferred`).
    pub(crate) recovery_point_checkpointed: i64,
    /// The checkpoint file (shared with deferred advances).
    pub(crate) checkpoint: Arc<checkpoint::RecoveryCheckpoint>,
    pub(crate) epochs: LeaderEpochCache,
    pub(crate) unflushed_messages: i64,
    pub(crate) last_flush_ms: i64,
    pub(crate) group: Arc<GroupCommit>,
    pub(crate) producers: ProducerStateManager,
    /// Aborted transactions of the segments (the `.txnindex` files, in memory).
    pub(crate) aborted: crate::txn_index::AbortedTxns,
    /// Producers being checked with their transaction coordinator (KIP-890 guards).
    pub(crate) txn_verifications: crate::txn_verification::TxnVerifications,
    /// Opened after a clean shutdown and not modified yet: the clean-shutdown marker is still on
    /// disk and the active segment's indexes are still trimmed. The first mutation fixes both
    /// (`mark_dirty`), so a clean open costs no fsync.
    pub(crate) dirty_pending: bool,
    /// Segments whose indexes `open` rebuilt from a walk of their batches (unclean-shutdown
    /// scan, or a missing/inconsistent index). 0 after a clean shutdown with intact files.
    pub(crate) segments_rebuilt_at_open: usize,
    /// Bytes whose CRC `open` checked (0 after a clean shutdown; after an unclean one, the data
    /// past the recovery point).
    pub(crate) recovery_checked_bytes: u64,
    /// When the last periodic background flush was asked for (`request_background_flush`).
    pub(crate) background_flush_started_ms: i64,
    /// When retention was last checked (`retention_check_interval_ms`); the open time at first.
    pub(crate) retention_checked_ms: i64,
    /// Limits the damaged-batch warning, which every fetch retry would repeat.
    pub(crate) damaged_warnings: rate_limit::WarnLimiter,
}

/// The damaged-batch warning limiter of a newly opened log.
pub(crate) fn damaged_warnings() -> rate_limit::WarnLimiter {
    rate_limit::WarnLimiter::new(rate_limit::DAMAGED_BATCH_WARN_INTERVAL)
}

pub(crate) fn sizing(config: &LogConfig) -> SegmentSizing {
    SegmentSizing {
        segment_bytes: config.segment_bytes,
        index_max_bytes: config.segment_index_bytes,
        index_interval_bytes: config.index_interval_bytes,
        preallocate_window_bytes: config.preallocate_window_bytes,
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
            if (remaining == 0 && !min_one) || at >= max_offset {
                break;
            }
            if seg.next_offset() <= at {
                // Empty (the active segment after a roll), or wholly below `at`.
                continue;
            }
            let read = seg
                .read(at, remaining, max_offset, min_one)
                .map_err(|bad| self.damaged(seg, bad))?;
            let Some((slice, next)) = read else {
                // Data here, but its next batch does not fit the budget (or starts at or past
                // `max_offset`): the read ends here, never in a later segment.
                break;
            };
            debug_assert!(next > at, "a read returns the batches after {at}");
            info.bytes += slice.len();
            info.slices.push(slice);
            at = next;
            if at < seg.next_offset() {
                // The budget or `max_offset` stopped the read inside this segment: what follows
                // in it comes first, so the next segment must not be read (it would skip it).
                break;
            }
        }
        Ok(info)
    }

    /// A read met a damaged batch below the log end: say where (the broker answers the
    /// partition with CORRUPT_MESSAGE), never an empty success.
    fn damaged(&self, seg: &Segment, bad: BadBatch) -> LogError {
        let path = seg.log_path().display().to_string();
        if let Some(suppressed) = self
            .damaged_warnings
            .allow(self.config.runtime.clock().monotonic())
        {
            tracing::warn!(
                path,
                position = bad.position,
                offset = bad.offset,
                error = %bad.error,
                suppressed,
                "damaged record batch; reads of this partition from that offset fail \
                 (at most one such line per partition per 10 s; `suppressed` since the last)"
            );
        }
        LogError::DamagedBatch {
            path,
            position: bad.position,
            offset: bad.offset,
            reason: bad.error,
        }
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
    /// Segments whose indexes were rebuilt when this log was opened (0 after a clean shutdown
    /// with intact files; recovery logs each rebuild at WARN or DEBUG).
    pub fn segments_rebuilt_at_open(&self) -> usize {
        self.segments_rebuilt_at_open
    }
    /// Bytes of record batches whose CRC was checked when this log was opened: 0 after a clean
    /// shutdown, else about the data written since the last flush before the crash.
    pub fn recovery_checked_bytes(&self) -> u64 {
        self.recovery_checked_bytes
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

    /// Periodic background flush (the broker's `log_flush_background_ms`): if data was appended
    /// that is not durable yet and the last request was at least `interval_ms` ago, ask the
    /// background flusher to fsync everything appended so far. Only queues a job (at most one per
    /// log); the fsync runs on the flusher thread, and the next `tick` moves the recovery point.
    /// Returns whether a flush was asked for. `interval_ms <= 0` disables it.
    pub fn request_background_flush(&mut self, now_ms: i64, interval_ms: i64) -> bool {
        if interval_ms <= 0
            || self.group.durable_offset() >= self.next_offset
            || now_ms.saturating_sub(self.background_flush_started_ms) < interval_ms
        {
            return false;
        }
        self.background_flush_started_ms = now_ms;
        self.config
            .runtime
            .request_flush(&self.group, self.next_offset);
        true
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
        // The replaced handles may be the last ones of a deleted segment: closing them frees its
        // pages, which the reaper thread does instead of this one.
        self.config.runtime.release(self.group.set_files(files));
        Ok(())
    }

    /// Before the first change after a clean open: expand the active segment's indexes and
    /// durably remove the clean-shutdown marker, so a crash from now on is seen as unclean.
    pub(crate) fn mark_dirty(&mut self) -> Result<(), LogError> {
        if !self.dirty_pending {
            return Ok(());
        }
        self.active_mut().unseal()?;
        match std::fs::remove_file(self.dir.join(checkpoint::CLEAN_SHUTDOWN_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        checkpoint::sync_dir(&self.dir)?;
        self.dirty_pending = false;
        Ok(())
    }

    pub(crate) fn write_recovery_checkpoint(&mut self) -> Result<(), LogError> {
        // Epoch entries of the data below the new recovery point are on disk before it is.
        self.epochs.persist_deferred()?;
        self.checkpoint.write(self.recovery_point)?;
        self.recovery_point_checkpointed = self.recovery_point;
        Ok(())
    }

    /// Flush and write the clean-shutdown marker.
    pub fn close(mut self) -> Result<(), LogError> {
        self.take_producer_snapshot(self.next_offset)?;
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

    /// Zero-copy views of every sealed segment (all but the active one), oldest first, to
    /// verify with [`crate::verify_segment`] after releasing the log's lock (background scrub).
    pub fn sealed_segments(&self) -> Vec<crate::SealedSegment> {
        let active = self.active().base_offset();
        self.segments
            .values()
            .filter(|s| s.base_offset() != active && !s.is_empty())
            .map(|s| crate::SealedSegment {
                base_offset: s.base_offset(),
                path: s.log_path(),
                bytes: s.all_bytes(),
            })
            .collect()
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

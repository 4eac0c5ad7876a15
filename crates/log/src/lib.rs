//! One Kafka partition's log on disk: segments (`.log`, sparse mmap `.index`, `.timeindex`),
//! append, read by offset/time, truncate, roll, retention, recovery, flush policy.
//!
//! This file is the public API the broker codes against. Bodies marked `todo!()` are being
//! implemented (issue 2); signatures may grow, but keep them source compatible.
#![deny(unsafe_code)] // only `mmap` (the file-mapping module) may allow it, each block with `// SAFETY:`

use std::path::{Path, PathBuf};

use bytes::Bytes;

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

/// Per-partition configuration (Kafka topic-level config names in the comments).
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `segment.bytes` (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms` (default 7 days).
    pub segment_ms: i64,
    /// `segment.index.bytes` (default 10 MiB): preallocated size of each index file.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u64,
    /// `max.message.bytes` (default 1048588): the largest record batch accepted.
    pub max_message_bytes: u64,
    /// `retention.ms` (default 7 days; -1 = unlimited).
    pub retention_ms: i64,
    /// `retention.bytes` (default -1 = unlimited).
    pub retention_bytes: i64,
    /// `flush.messages` (default i64::MAX = leave it to the OS).
    pub flush_messages: i64,
    /// `flush.ms` (default i64::MAX).
    pub flush_ms: i64,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `cleanup.policy` contains `compact`: keyless records are rejected (INVALID_RECORD).
    pub compact: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            timestamp_type: TimestampType::CreateTime,
            compact: false,
        }
    }
}

/// Errors, each mapping to the Kafka error code a broker returns for it.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("corrupt record batch: {0}")]
    CorruptMessage(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: u64 },
    #[error("offset {offset} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    #[error("storage error: {0}")]
    Io(#[from] std::io::Error),
    #[error("log corrupted on disk: {0}")]
    Corrupted(String),
}

impl LogError {
    /// The Kafka protocol error code for this error.
    pub fn kafka_code(&self) -> i16 {
        match self {
            LogError::CorruptMessage(_) => 2,            // CORRUPT_MESSAGE
            LogError::InvalidRecord(_) => 87,            // INVALID_RECORD
            LogError::MessageTooLarge { .. } => 10,      // MESSAGE_TOO_LARGE
            LogError::OffsetOutOfRange { .. } => 1,      // OFFSET_OUT_OF_RANGE
            LogError::InvalidTimestamp(_) => 32,         // INVALID_TIMESTAMP
            LogError::UnsupportedMagic(_) => 2,          // CORRUPT_MESSAGE (magic < 2 unsupported)
            LogError::Io(_) | LogError::Corrupted(_) => 56, // KAFKA_STORAGE_ERROR
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record.
    pub first_offset: i64,
    /// Offset assigned to the last record.
    pub last_offset: i64,
    /// Largest record timestamp (after LogAppendTime rewriting).
    pub max_timestamp: i64,
    /// `-1` unless the log uses LogAppendTime, then the time stamped on the batches.
    pub log_append_time_ms: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// Number of records appended.
    pub record_count: u32,
}

/// The result of a read: whole batches as zero-copy slices of segment files.
#[derive(Debug, Clone, Default)]
pub struct ReadInfo {
    /// Batches, in offset order, each slice holding one or more whole batches.
    pub slices: Vec<Bytes>,
    /// Total bytes in `slices`.
    pub bytes: usize,
}

/// One partition's log.
pub struct Log {
    _dir: PathBuf,
}

impl Log {
    /// Open (or create) the log in `dir` (`<data-dir>/<topic>-<partition>`), recovering after an
    /// unclean shutdown. `now_ms` is the wall clock (passed in so tests control time).
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log, LogError> {
        let _ = (dir, config, now_ms);
        todo!()
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
        let _ = (batches, leader_epoch, now_ms);
        todo!()
    }

    /// Append batches whose offsets were assigned by a leader (replication, later issues).
    pub fn append_as_follower(&mut self, batches: &[u8]) -> Result<AppendInfo, LogError> {
        let _ = batches;
        todo!()
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
        let _ = (offset, max_bytes, max_offset, min_one_message);
        todo!()
    }

    /// First offset whose batch max timestamp is >= `timestamp_ms`, with that timestamp
    /// (ListOffsets by time). `None` if none.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        let _ = timestamp_ms;
        todo!()
    }

    /// Offset and timestamp of the record with the largest timestamp (ListOffsets -3).
    pub fn max_timestamp_and_offset(&self) -> Option<(i64, i64)> {
        todo!()
    }

    pub fn log_start_offset(&self) -> i64 {
        todo!()
    }
    pub fn log_end_offset(&self) -> i64 {
        todo!()
    }
    pub fn high_watermark(&self) -> i64 {
        todo!()
    }
    /// Set by the replica manager (single broker: = log end offset after each append).
    pub fn set_high_watermark(&mut self, offset: i64) {
        let _ = offset;
        todo!()
    }
    /// Bytes on disk (all segments).
    pub fn size_bytes(&self) -> u64 {
        todo!()
    }
    pub fn config(&self) -> &LogConfig {
        todo!()
    }
    /// Apply changed topic configs (AlterConfigs) to this log.
    pub fn update_config(&mut self, config: LogConfig) {
        let _ = config;
        todo!()
    }

    /// DeleteRecords: move the log start offset to `offset` (<= high watermark), deleting
    /// whole segments below it. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, LogError> {
        let _ = offset;
        todo!()
    }
    /// Remove everything at and after `offset` (follower truncation).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let _ = offset;
        todo!()
    }
    /// Delete everything and start again at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        let _ = offset;
        todo!()
    }
    /// Periodic housekeeping: roll by `segment.ms`, retention by time/size, `flush.ms`.
    pub fn tick(&mut self, now_ms: i64) -> Result<(), LogError> {
        let _ = now_ms;
        todo!()
    }
    /// fsync everything appended so far and advance the recovery point.
    pub fn flush(&mut self) -> Result<(), LogError> {
        todo!()
    }
    /// Flush and write the clean-shutdown marker.
    pub fn close(self) -> Result<(), LogError> {
        todo!()
    }
    /// Leader epoch of the last batch at or below the end, and the end offset of `epoch`
    /// (OffsetForLeaderEpoch): `(epoch, end_offset)`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let _ = epoch;
        todo!()
    }
    /// Latest leader epoch recorded in the log, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        todo!()
    }
}

//! One Kafka partition's log on disk: segments (`.log`, sparse mmap `.index`, `.timeindex`),
//! append, read by offset/time, truncate, roll, retention, recovery, flush policy.
//!
//! This file is the public API the broker codes against. Bodies marked `todo!()` are being
//! implemented (issue 2); signatures may grow, but keep them source compatible.
#![deny(unsafe_code)] // only `mmap` (the file-mapping module) may allow it, each block with `// SAFETY:`

mod background_flush;
mod checkpoint;
pub mod cleaner;
mod epoch;
mod group_commit;
mod index;
mod log;
mod mmap;
mod producer_snapshot;
mod producer_state;
mod reaper;
mod recovery;
mod runtime;
mod scrub;
mod segment;
mod stored_batch;
#[cfg(test)]
mod tests;
mod txn_index;
#[cfg(test)]
mod txn_tests;
mod txn_verification;

use bytes::Bytes;
use streamforge_protocol::ResponseError;

pub use crate::background_flush::MAX_PENDING_BACKGROUND_FLUSHES;
pub use crate::checkpoint::RecoveryPointAdvance;
pub use crate::cleaner::{CleanerConfig, CleanerLogs, LockedLog, LogCleaner};
pub use crate::group_commit::{FlushTicket, GroupCommit};
pub use crate::log::{Log, TxnMarker};
pub use crate::producer_state::{BATCHES_TO_RETAIN, BatchMetadata, NO_TXN, ProducerEntry};
pub use crate::runtime::LogRuntime;
pub use crate::scrub::{SealedSegment, verify_segment};
pub use crate::segment::{BadBatch, file_stem};
pub use crate::txn_index::{
    AbortedTxn, ENTRY_BYTES as TXN_INDEX_ENTRY_BYTES, decode as decode_txn_index,
    encode_entries as encode_txn_index,
};
pub use crate::txn_verification::{VERIFICATIONS_MAX, VerificationGuard};

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
    /// `log.retention.check.interval.ms` (broker-wide, default 5 minutes): how often `tick`
    /// applies `retention.ms` and `retention.bytes`; the first check is one interval after the
    /// log is opened. `<= 0` = at every tick.
    pub retention_check_interval_ms: i64,
    /// `flush.messages` (default i64::MAX = leave it to the OS).
    pub flush_messages: i64,
    /// `flush.ms` (default i64::MAX).
    pub flush_ms: i64,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `cleanup.policy` contains `compact`: keyless records are rejected (INVALID_RECORD) and
    /// the log cleaner keeps only the latest record per key (`crate::cleaner`).
    pub compact: bool,
    /// `cleanup.policy` contains `delete` (default): `retention.ms` / `retention.bytes` delete
    /// old segments. `compact` alone never deletes by retention, as in Kafka.
    pub delete: bool,
    /// `delete.retention.ms` (default 1 day): how long the cleaner keeps a tombstone after the
    /// pass that first kept it (its batch's delete horizon).
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio` (default 0.5): dirty bytes / cleanable bytes that make the
    /// log worth cleaning.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.insync.replicas` (default 1): ISR members an acks=all write needs. Not used by the
    /// log itself; it rides here as the other topic-config defaults do.
    pub min_insync_replicas: usize,
    /// `unclean.leader.election.enable` (default false): a partition whose ISR is gone may
    /// elect a replica outside it. Not used by the log; the controller reads the broker-wide
    /// default, and it rides here so DescribeConfigs reports it as a topic's default.
    pub unclean_leader_election_enable: bool,
    /// `min.compaction.lag.ms` (default 0): a segment with a record newer than this stays dirty.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (default i64::MAX): a dirty segment older than this is cleaned
    /// whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `producer.id.expiration.ms` (default 1 day): idempotent-producer state is forgotten
    /// after this long without a write from the producer.
    pub producer_id_expiration_ms: i64,
    /// Disk blocks reserved ahead of the active segment's write position (default 16 MiB; 0 =
    /// off): `fallocate(FALLOC_FL_KEEP_SIZE)` in steps of this size, so appends write into
    /// already-allocated blocks instead of reserving delayed-allocation blocks page by page.
    /// The file's size stays its logical size (readers, recovery and uploads see no tail);
    /// the reservation past the end is released when the segment is sealed or the log closed.
    /// A bounded window, unlike Kafka's whole-segment `preallocate`.
    pub preallocate_window_bytes: u64,
    /// The clock and background threads this log shares with the other logs of its broker
    /// (not a Kafka setting; the default is the process-wide runtime, see `LogRuntime`).
    pub runtime: std::sync::Arc<LogRuntime>,
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
            retention_check_interval_ms: 300_000,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            timestamp_type: TimestampType::CreateTime,
            compact: false,
            delete: true,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            preallocate_window_bytes: 16 << 20,
            runtime: LogRuntime::process_default(),
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
    /// A record inside a batch failed validation (INVALID_RECORD or CORRUPT_MESSAGE, with the
    /// index of the record for the ProduceResponse's `record_errors`).
    #[error("{0}")]
    Records(streamforge_protocol::validate::RecordError),
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
    /// A read met a batch it cannot parse below the log end (a bad length, header or CRC in a
    /// segment file). Kafka answers a fetch that hits a `CorruptRecordException` with
    /// CORRUPT_MESSAGE; the data before the damage stays readable.
    #[error("damaged record batch in {path} at byte {position} (offset {offset}): {reason}")]
    DamagedBatch {
        path: String,
        position: u64,
        offset: i64,
        reason: String,
    },
    #[error("out of order sequence number: {0}")]
    OutOfOrderSequence(String),
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    #[error("marker from coordinator epoch {marker} below the producer's {current}")]
    CoordinatorFenced { marker: i32, current: i32 },
}

impl LogError {
    /// The Kafka protocol error code for this error.
    pub fn kafka_code(&self) -> i16 {
        self.response_error().code()
    }

    /// The Kafka error for this error (`kafka_code` is its wire code).
    pub fn response_error(&self) -> ResponseError {
        match self {
            LogError::CorruptMessage(_) => ResponseError::CorruptMessage,
            LogError::InvalidRecord(_) => ResponseError::InvalidRecord,
            LogError::Records(e) => e.kind.response_error(),
            LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            LogError::InvalidTimestamp(_) => ResponseError::InvalidTimestamp,
            // Magic < 2 is unsupported: CORRUPT_MESSAGE, as Kafka 4 answers.
            LogError::UnsupportedMagic(_) => ResponseError::CorruptMessage,
            LogError::Io(_) | LogError::Corrupted(_) => ResponseError::KafkaStorageError,
            LogError::DamagedBatch { .. } => ResponseError::CorruptMessage,
            LogError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber,
            LogError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
            LogError::CoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced,
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
    /// The batch was a retry of one already in the log (idempotent producer): nothing was
    /// appended and the offsets are the original ones.
    pub duplicate: bool,
    /// The leader epoch the append was made in (a duplicate's too: the leadership that
    /// answered it); a follower's append: its last batch's.
    pub leader_epoch: i32,
}

/// The result of a read: whole batches as zero-copy slices of segment files.
#[derive(Debug, Clone, Default)]
pub struct ReadInfo {
    /// Batches, in offset order, each slice holding one or more whole batches.
    pub slices: Vec<Bytes>,
    /// Total bytes in `slices`.
    pub bytes: usize,
}

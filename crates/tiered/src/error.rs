//! Errors of the tiered-storage crate.

use streamforge_protocol::ResponseError;

/// Everything that can go wrong while moving segments to or reading them from object storage.
#[derive(Debug, thiserror::Error)]
pub enum TieredError {
    /// The object store failed (unreachable, slow, returned an error). Retriable.
    #[error("object store error: {0}")]
    Store(#[from] object_store::Error),
    /// Reading a local segment file failed.
    #[error("local I/O error on {path}: {source}")]
    LocalIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A local segment about to be uploaded is not a clean sequence of record batches.
    #[error("local segment {path} is corrupt at byte {position}: {reason}")]
    LocalCorrupt {
        path: String,
        position: u64,
        reason: String,
    },
    /// Remote bytes failed their CRC-32C (or framing) check: never served to a client.
    #[error("remote object {key} is corrupt at byte {position}: {reason}")]
    RemoteCorrupt {
        key: String,
        position: u64,
        reason: String,
    },
    /// A manifest or remote index object could not be decoded.
    #[error("invalid remote metadata {key}: {reason}")]
    BadMetadata { key: String, reason: String },
    /// The requested offset is not held by the remote store.
    #[error("offset {offset} is not in remote storage")]
    OffsetNotRemote { offset: i64 },
    /// The storage configuration is invalid (bad URL, missing bucket, ...).
    #[error("invalid remote storage configuration: {0}")]
    Config(String),
    /// The partition is not registered for tiering.
    #[error("partition {0} is not tiered")]
    UnknownPartition(String),
    /// A bounded operation gave up after its retry budget.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted { attempts: u32, last: String },
    /// A newer partition leader has claimed the manifest: this broker must not write it.
    #[error("remote manifest is owned by leader epoch {stored}, ours is {ours}")]
    Fenced { stored: i32, ours: i32 },
    /// A read_committed read would consult more remote transaction indexes than allowed (a
    /// transaction stayed open across that many segments with aborts): refused, not served
    /// without its aborted transactions.
    #[error("aborted transactions of [{start}, {upper}) span more than {indexes} remote indexes")]
    TxnIndexWalkTooLong {
        start: i64,
        upper: i64,
        indexes: usize,
    },
    /// The tiering service is shutting down.
    #[error("tiered storage is shutting down")]
    ShuttingDown,
}

impl TieredError {
    /// The Kafka error code a Fetch/ListOffsets answer carries when a remote read fails.
    /// Kafka reports remote-storage failures as KAFKA_STORAGE_ERROR (56, retriable): the
    /// client retries instead of consuming corrupt or missing data.
    pub fn kafka_code(&self) -> i16 {
        match self {
            TieredError::OffsetNotRemote { .. } => ResponseError::OffsetOutOfRange,
            _ => ResponseError::KafkaStorageError,
        }
        .code()
    }

    /// Whether retrying the same operation later may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            TieredError::Store(_)
                | TieredError::RetriesExhausted { .. }
                | TieredError::LocalIo { .. }
        )
    }
}

pub type Result<T, E = TieredError> = std::result::Result<T, E>;

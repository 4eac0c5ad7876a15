//! Protocol-level errors and the Kafka error codes StreamForge returns.

/// Errors while parsing frames and headers. Each one closes only the offending connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("frame size {size} is negative or zero")]
    InvalidFrameSize { size: i32 },
    #[error("frame of {size_bytes} bytes exceeds socket.request.max.bytes {max_bytes}")]
    FrameTooLarge { size_bytes: usize, max_bytes: usize },
    #[error("truncated request header ({have_bytes} bytes)")]
    TruncatedHeader { have_bytes: usize },
    #[error("malformed request header: {0}")]
    MalformedHeader(String),
    #[error("malformed {api} v{version} request body: {reason}")]
    MalformedBody {
        api: &'static str,
        version: i16,
        reason: String,
    },
    #[error("cannot encode {api} v{version} response: {reason}")]
    Encode {
        api: &'static str,
        version: i16,
        reason: String,
    },
}

/// Kafka error codes (the subset StreamForge returns), named as in Kafka's `Errors` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i16)]
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    InvalidFetchSize = 4,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    MessageTooLarge = 10,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    InvalidRequiredAcks = 21,
    InvalidTimestamp = 32,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    InvalidRequest = 42,
    PolicyViolation = 44,
    KafkaStorageError = 56,
    UnknownTopicId = 100,
    InvalidRecord = 87,
    ResourceNotFound = 91,
    InvalidUpdateVersion = 95,
}

impl ErrorCode {
    pub fn code(self) -> i16 {
        self as i16
    }
}

impl From<ErrorCode> for i16 {
    fn from(e: ErrorCode) -> i16 {
        e as i16
    }
}

//! The client's error type.
use kafka_protocol::ResponseError;

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("I/O error talking to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection to {0} closed")]
    ConnectionClosed(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("corrupt record data: {0}")]
    Corrupt(String),
    #[error("compression error: {0}")]
    Compression(String),
    #[error("broker returned {error} ({code}){}", context_suffix(.context))]
    Kafka {
        code: i16,
        error: ResponseError,
        context: String,
    },
    #[error("timed out after {0} ms")]
    Timeout(u64),
    #[error("broker does not support {api} (key {key}) at any version this client speaks")]
    UnsupportedApi { api: &'static str, key: i16 },
    #[error("no broker reachable among {0}")]
    NoBrokers(String),
    #[error("unknown topic or partition {0}")]
    UnknownTopicOrPartition(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("client is closed")]
    Closed,
}

fn context_suffix(c: &str) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!(": {c}")
    }
}

impl ClientError {
    pub fn corrupt(msg: impl Into<String>) -> Self {
        ClientError::Corrupt(msg.into())
    }

    /// An error for a non-zero Kafka error code.
    pub fn kafka(code: i16, context: impl Into<String>) -> Self {
        ClientError::Kafka {
            code,
            error: ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)),
            context: context.into(),
        }
    }

    /// Ok for code 0, else the Kafka error.
    pub fn check(code: i16, context: impl FnOnce() -> String) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(Self::kafka(code, context()))
        }
    }

    /// The Kafka error code, if this is a broker error.
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether retrying (after refreshing metadata / reconnecting) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Io { .. }
            | ClientError::ConnectionClosed(_)
            | ClientError::Timeout(_)
            | ClientError::NoBrokers(_) => true,
            ClientError::Kafka { error, .. } => error.is_retriable(),
            _ => false,
        }
    }
}

//! An async Kafka client: producer, consumer and admin over the Kafka wire protocol.
//!
//! Works against StreamForge and any Kafka-compatible broker. Used by the `streamforge` CLI,
//! the benchmark and (later) follower replication.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod compression;
pub mod conn;
pub mod error;
pub mod partitioner;
pub mod records;

pub use cluster::{BrokerInfo, ClientConfig, Cluster, Metadata, PartitionInfo, TopicInfo};
pub use compression::Compression;
pub use error::{ClientError, Result};
pub use records::{Header, Record};

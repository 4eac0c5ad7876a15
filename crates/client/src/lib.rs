//! An async Kafka client: producer, consumer and admin over the Kafka wire protocol.
//!
//! Works against StreamForge and any Kafka-compatible broker. Used by the `streamforge` CLI,
//! the benchmark and (later) follower replication.
#![forbid(unsafe_code)]

pub mod accumulator;
pub mod admin;
pub mod assignor;
mod buffers;
pub mod cluster;
pub mod compression;
pub mod conn;
pub mod consumer;
pub mod error;
pub mod group;
mod log_dirs;
pub mod offsets;
pub mod partitioner;
pub mod producer;
pub mod quorum;
pub mod records;

pub use accumulator::BatchRecord;
pub use admin::{Admin, NewTopic, ResetTarget};
pub use assignor::Assignor;
pub use cluster::{BrokerInfo, ClientConfig, Cluster, Metadata, PartitionInfo, TopicInfo};
pub use compression::Compression;
pub use consumer::{ConsumedBatch, Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};
pub use error::{ClientError, Result};
pub use producer::{
    Acks, BatchDelivery, DeliveredRun, DeliveryFuture, Producer, ProducerConfig, ProducerRecord,
    RecordMetadata,
};
pub use records::{Header, Record};

//! Cluster metadata (issue 14): the metadata log's records, the immutable image they build, the
//! sans-io controller that writes them and the quorum that replicates them.
#![forbid(unsafe_code)]

pub mod controller;
pub mod delta;
pub mod image;
pub mod node;
pub mod quorum;
pub mod records;
pub mod snapshot;

pub use delta::{LocalChanges, LocalPartition, MetadataDelta, PartitionDelta};
pub use image::{ApplyError, BrokerInfo, LogPosition, MetadataImage, PartitionState, TopicImage};
pub use records::{BrokerId, NO_LEADER, Record, RecordError};
pub use snapshot::{Snapshot, SnapshotError};

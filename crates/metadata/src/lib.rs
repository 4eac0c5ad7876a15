//! Cluster metadata (issue 14): the metadata log's records, the immutable image they build, the
//! sans-io controller that writes them and the quorum that replicates them.
#![forbid(unsafe_code)]

pub mod records;

pub use records::{BrokerId, Record, RecordError};

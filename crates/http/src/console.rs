//! Plain data for the dashboard's write actions (topic configs, partitions, records, produce,
//! group offsets) and the broker page. The broker implements the actions on
//! [`crate::ClusterView`]; every one goes through the same checks as its Kafka request.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::facade::ConfigEntry;

/// One config change: a new value, or `None` to remove the override (back to the default).
#[derive(Debug, Clone, Deserialize)]
pub struct ConfigChange {
    pub name: String,
    pub value: Option<String>,
}

/// One message to append from the dashboard.
#[derive(Debug, Clone)]
pub struct ProduceMessage {
    pub topic: String,
    /// None: the partition is chosen from the key (murmur2, like Kafka's default partitioner)
    /// or, without a key, partition 0.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Produced {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// Where a group's offsets are moved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", tag = "to", content = "value")]
pub enum OffsetTarget {
    Earliest,
    Latest,
    /// An absolute offset (clamped to the partition's log start .. high watermark, as Kafka's
    /// tool does).
    Offset(i64),
    /// The first offset whose timestamp is at or after this time (ms since the epoch); the
    /// high watermark when there is none.
    Timestamp(i64),
}

#[derive(Debug, Clone)]
pub struct OffsetReset {
    pub group: String,
    pub topic: String,
    /// Empty: every partition of the topic.
    pub partitions: Vec<i32>,
    pub target: OffsetTarget,
}

/// One partition's offset after a reset.
#[derive(Debug, Clone, Serialize)]
pub struct ResetOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// The broker page.
#[derive(Debug, Clone, Serialize)]
pub struct BrokerDetail {
    pub node_id: i32,
    pub version: String,
    pub started_at_ms: i64,
    pub data_dir: String,
    /// Bytes of every partition log this broker keeps locally.
    pub log_bytes: u64,
    /// The file system holding the data directory (None where it cannot be read).
    pub disk_total_bytes: Option<u64>,
    pub disk_free_bytes: Option<u64>,
    pub listeners: Vec<String>,
    pub configs: Vec<ConfigEntry>,
}

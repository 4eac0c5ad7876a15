//! The view of the cluster that the dashboard is built on (reads, plus explicit actions).
//!
//! The http crate never reaches into broker internals: the broker implements [`ClusterView`]
//! and hands it to [`crate::start`]. Everything here is plain data (serde-serializable) so the
//! JSON API can pass it through, and so a test can implement the trait with a few vectors.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::Serialize;

/// A boxed future returned by the view (the trait must be object safe).
pub type ViewFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ViewError>> + Send + 'a>>;

/// Why the view could not answer. Each variant maps to one HTTP status.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ViewError {
    /// The topic, partition or group does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or violates a limit (400).
    #[error("{0}")]
    InvalidArgument(String),
    /// The request conflicts with the current state, e.g. the topic already exists (409).
    #[error("{0}")]
    Conflict(String),
    /// This broker does not provide the feature yet (501).
    #[error("{0}")]
    Unsupported(String),
    /// The action is never allowed, e.g. deleting an internal topic (403).
    #[error("{0}")]
    Forbidden(String),
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
    /// Kafka's answer to the same request over the Kafka API: its error (shown by name, e.g.
    /// `INVALID_CONFIG`) and message. The HTTP status follows from the error.
    #[error("{1}")]
    Kafka(kafka_protocol::ResponseError, String),
}

/// Read access to the cluster plus explicit actions: create and delete topic, and the console
/// actions (configs, partitions, records, produce, group offsets), each checked by the broker
/// like its Kafka request.
///
/// Implemented by the broker; every method is cheap enough to call once per HTTP request.
pub trait ClusterView: Send + Sync + 'static {
    /// Brokers, controller, version and start time.
    fn cluster(&self) -> ViewFuture<'_, ClusterInfo>;
    /// All topics with their partitions (internal topics included, flagged).
    fn topics(&self) -> ViewFuture<'_, Vec<TopicInfo>>;
    /// One topic with its configs.
    fn topic(&self, name: String) -> ViewFuture<'_, TopicDetail>;
    /// Messages of one partition starting at an offset or a timestamp.
    fn read_messages(&self, query: MessageQuery) -> ViewFuture<'_, MessagePage>;
    /// Consumer groups; a broker without group support answers an empty list.
    fn groups(&self) -> ViewFuture<'_, Vec<GroupInfo>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// One consumer group with members, assignments and committed offsets.
    fn group(&self, group_id: String) -> ViewFuture<'_, GroupInfo> {
        Box::pin(async move { Err(ViewError::NotFound(format!("group '{group_id}' not found"))) })
    }
    /// Creates a topic (the dashboard asks the operator to confirm first).
    fn create_topic(&self, request: CreateTopic) -> ViewFuture<'_, ()>;
    /// Deletes a topic (the dashboard asks the operator to confirm first).
    fn delete_topic(&self, name: String) -> ViewFuture<'_, ()>;
    /// The Kafka bootstrap address benchmarks started from the dashboard connect to.
    fn bootstrap_address(&self) -> String;

    // ---- console actions (crate::console); a view without them answers 501 ----

    /// Sets (`Some`) or removes (`None`, back to the default) topic config overrides, validated
    /// like IncrementalAlterConfigs.
    fn alter_topic_configs(
        &self,
        topic: String,
        _changes: Vec<crate::console::ConfigChange>,
    ) -> ViewFuture<'_, ()> {
        unsupported(format!("editing the configs of '{topic}'"))
    }
    /// Grows a topic to `total` partitions (CreatePartitions).
    fn create_partitions(&self, topic: String, total: i32) -> ViewFuture<'_, ()> {
        unsupported(format!("adding partitions to '{topic}' ({total})"))
    }
    /// Deletes the records of one partition below `before_offset` (DeleteRecords); answers the
    /// new log start offset.
    fn delete_records(
        &self,
        topic: String,
        partition: i32,
        before_offset: i64,
    ) -> ViewFuture<'_, i64> {
        unsupported(format!(
            "deleting records of {topic}-{partition} before {before_offset}"
        ))
    }
    /// Appends one message, validated like a Produce request.
    fn produce(
        &self,
        message: crate::console::ProduceMessage,
    ) -> ViewFuture<'_, crate::console::Produced> {
        unsupported(format!("producing to '{}'", message.topic))
    }
    /// Commits new offsets for an inactive group (like `kafka-consumer-groups --reset-offsets`).
    fn reset_offsets(
        &self,
        reset: crate::console::OffsetReset,
    ) -> ViewFuture<'_, Vec<crate::console::ResetOffset>> {
        unsupported(format!("resetting the offsets of '{}'", reset.group))
    }
    /// Deletes a group's committed offsets of one topic (OffsetDelete); empty = all partitions.
    fn delete_group_offsets(
        &self,
        group: String,
        topic: String,
        partitions: Vec<i32>,
    ) -> ViewFuture<'_, ()> {
        unsupported(format!(
            "deleting the offsets of '{group}' on '{topic}' {partitions:?}"
        ))
    }
    /// Deletes an empty group (DeleteGroups).
    fn delete_group(&self, group: String) -> ViewFuture<'_, ()> {
        unsupported(format!("deleting group '{group}'"))
    }
    /// The transaction coordinator's transactional ids (as ListTransactions and
    /// DescribeTransactions see them); a broker without transactions answers an empty list.
    fn transactions(&self) -> ViewFuture<'_, Vec<crate::transactions::TransactionInfo>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Aborts the open transaction of a transactional id as a timeout would (the producer's
    /// epoch is bumped, so it is fenced) and answers the transaction afterwards.
    fn abort_transaction(
        &self,
        transactional_id: String,
    ) -> ViewFuture<'_, crate::transactions::TransactionInfo> {
        unsupported(format!("aborting the transaction of '{transactional_id}'"))
    }
    /// This broker: data directory, disk use, configs.
    fn broker_detail(&self) -> ViewFuture<'_, crate::console::BrokerDetail> {
        unsupported("the broker page".to_string())
    }
}

fn unsupported<T: Send + 'static>(what: String) -> ViewFuture<'static, T> {
    Box::pin(async move {
        Err(ViewError::Unsupported(format!(
            "{what} is not available here"
        )))
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterInfo {
    pub cluster_id: String,
    /// The node id of the broker serving this dashboard.
    pub node_id: i32,
    pub controller_id: i32,
    /// Every registered broker, fenced ones included.
    pub brokers: Vec<BrokerInfo>,
    /// StreamForge version string.
    pub version: String,
    /// Wall-clock time the broker started (ms since the epoch).
    pub started_at_ms: i64,
    /// The metadata quorum as this broker knows it (None where there is none, e.g. in tests).
    pub quorum: Option<QuorumInfo>,
    /// ISR shrinks and expansions counted on this broker.
    pub isr_changes: IsrChangeTotals,
}

/// The metadata quorum: its leader (the active controller), epoch and voters.
#[derive(Debug, Clone, Serialize)]
pub struct QuorumInfo {
    pub leader_id: i32,
    pub epoch: i32,
    pub voters: Vec<QuorumVoter>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QuorumVoter {
    pub node_id: i32,
    /// Metadata log entries behind the leader, when this broker leads and so knows.
    pub lag: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Fenced by the controller: registered but not heartbeating, or shut down.
    pub fenced: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicInfo {
    pub name: String,
    /// Topic UUID (base64 like Kafka's tools print it), if the broker assigns ids.
    pub topic_id: Option<String>,
    pub internal: bool,
    pub replication_factor: u32,
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    /// Bytes of the local log on disk.
    pub size_bytes: u64,
    /// Bytes held in the object store (None when tiered storage is off for the topic).
    pub remote_size_bytes: Option<u64>,
    /// This broker leads the partition (its role, not only what the image names).
    pub led_here: bool,
    /// While this broker leads the partition with followers: the leader's own replicas, ISR
    /// and each follower's progress (`None`: a lone leader, a follower, or no role).
    pub replication: Option<ReplicationInfo>,
    /// On a follower: messages between its log end and the leader's high watermark (from the
    /// leader's latest Fetch response).
    pub fetcher_lag: Option<i64>,
}

impl PartitionInfo {
    /// The replicas and ISR that count: the leader's own while it tracks followers, else the
    /// metadata image's.
    pub fn current_replicas_and_isr(&self) -> (&[i32], &[i32]) {
        match &self.replication {
            Some(r) => (&r.replicas, &r.isr),
            None => (&self.replicas, &self.isr),
        }
    }

    /// Kafka's `UnderReplicatedPartitions` rule: led here with an ISR smaller than its replicas.
    pub fn under_replicated_here(&self) -> bool {
        let (replicas, isr) = self.current_replicas_and_isr();
        self.led_here && isr.len() < replicas.len()
    }

    /// Kafka's `UnderMinIsrPartitionCount` rule: led here with an ISR smaller than the
    /// effective `min.insync.replicas` (its high watermark waits, KIP-966).
    pub fn under_min_isr_here(&self) -> bool {
        self.led_here && self.replication.as_ref().is_some_and(|r| r.under_min_isr)
    }

    /// Kafka's `AtMinIsr` rule: led here with an ISR of exactly the effective
    /// `min.insync.replicas` (one more replica out and acks=all is refused). A lone leader
    /// (one replica) is at its min ISR of 1, as in Kafka.
    pub fn at_min_isr_here(&self) -> bool {
        if !self.led_here {
            return false;
        }
        match &self.replication {
            Some(r) => r.isr.len() == r.effective_min_isr,
            None => self.replicas.len() <= 1,
        }
    }
}

/// A leader's view of its followers.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicationInfo {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The ISR is under the effective `min.insync.replicas`: the high watermark waits.
    pub under_min_isr: bool,
    /// `min.insync.replicas`, at most the replica count (Kafka's `effectiveMinIsr`).
    pub effective_min_isr: usize,
    pub followers: Vec<FollowerLag>,
}

/// One follower as the leader sees it.
#[derive(Debug, Clone, Serialize)]
pub struct FollowerLag {
    pub broker_id: i32,
    /// `None` before its first fetch in this leader epoch.
    pub log_end_offset: Option<i64>,
    /// Leader log end offset minus the follower's (`None` before its first fetch).
    pub lag_messages: Option<i64>,
    pub in_sync: bool,
    pub time_since_caught_up_ms: i64,
}

/// ISR changes the controller accepted for partitions led here, since the broker started.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct IsrChangeTotals {
    pub shrinks: u64,
    pub expands: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicDetail {
    #[serde(flatten)]
    pub topic: TopicInfo,
    pub configs: Vec<ConfigEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    /// Where the value comes from, Kafka's words: "DEFAULT_CONFIG", "DYNAMIC_TOPIC_CONFIG", ...
    pub source: String,
    pub is_default: bool,
    pub sensitive: bool,
}

/// Where a message read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum ReadStart {
    /// The first message at or after this offset (clamped to the log start offset).
    Offset(i64),
    /// The first message whose timestamp is at or after this time (ms since the epoch).
    Timestamp(i64),
}

#[derive(Debug, Clone)]
pub struct MessageQuery {
    pub topic: String,
    pub partition: i32,
    pub start: ReadStart,
    /// At most this many messages (the http layer bounds it by `MESSAGES_LIMIT_MAX`).
    pub limit: usize,
}

#[derive(Debug, Clone)]
pub struct MessagePage {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// The offset to continue from (one past the last message returned).
    pub next_offset: i64,
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub batch: BatchInfo,
}

/// The record batch a message was stored in.
#[derive(Debug, Clone, Serialize)]
pub struct BatchInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    pub partition_leader_epoch: i32,
    /// "none", "gzip", "snappy", "lz4" or "zstd".
    pub compression: String,
    /// "create_time" or "log_append_time".
    pub timestamp_type: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
    pub control: bool,
    pub size_bytes: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupInfo {
    pub group_id: String,
    /// "Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or "Dead".
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub generation: i32,
    pub coordinator: i32,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<GroupOffset>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Vec<TopicPartitions>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub metadata: String,
    /// The partition's high watermark, when the partition exists; lag is computed from it.
    pub high_watermark: Option<i64>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: i32,
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i16,
    #[serde(default)]
    pub configs: std::collections::BTreeMap<String, String>,
}

fn default_replication_factor() -> i16 {
    1
}

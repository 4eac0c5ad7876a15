//! What goes into the controller (requests from brokers and admin clients, the tick) and the
//! replies that come out.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::image::PartitionState;
use crate::records::{BrokerId, ConfigResource, Endpoint};

/// A broker (re)joins: BrokerRegistration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub broker_id: BrokerId,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
}

/// A broker's periodic BrokerHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerHeartbeat {
    pub broker_id: BrokerId,
    pub broker_epoch: i64,
    /// The offset of the last metadata record the broker has applied.
    pub metadata_offset: i64,
    pub wants_fence: bool,
    /// Controlled shutdown: move this broker's leaderships away first.
    pub wants_shutdown: bool,
}

/// One topic of a CreateTopics request. `-1` means "the default", as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// Explicit replica lists by partition (then both counts must be -1).
    pub assignment: BTreeMap<i32, Vec<BrokerId>>,
    pub configs: BTreeMap<String, String>,
}

/// One topic of a CreatePartitions request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitions {
    pub topic: String,
    /// The new total partition count.
    pub count: i32,
    /// Replica lists for the new partitions, if the client gave them.
    pub assignment: Option<Vec<Vec<BrokerId>>>,
}

/// A topic named in DeleteTopics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicRef {
    Name(String),
    Id(Uuid),
}

/// Incremental config changes for one resource: `None` deletes the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfig {
    pub resource: ConfigResource,
    pub entries: Vec<(String, Option<String>)>,
}

/// ElectLeaders' election type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

/// An ISR change proposed by a partition's leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartition {
    pub broker_id: BrokerId,
    pub broker_epoch: i64,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// Everything the controller reacts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    BrokerRegistration(BrokerRegistration),
    BrokerHeartbeat(BrokerHeartbeat),
    CreateTopics {
        topics: Vec<CreateTopic>,
        validate_only: bool,
    },
    CreatePartitions(Vec<CreatePartitions>),
    DeleteTopics(Vec<TopicRef>),
    AlterConfigs(Vec<AlterConfig>),
    AllocateProducerIds {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    /// `partitions: None` means every partition.
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    },
    AlterPartition(AlterPartition),
    /// Time passed: fence silent brokers, rebalance leaders.
    Tick,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// A created topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedTopic {
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// A producer-id block: ids `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    pub start: i64,
    pub len: i64,
}

/// The answer to the event that produced it. `Err(NotController)` when this controller is not
/// the active one.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    BrokerRegistration(Result<i64, ResponseError>),
    BrokerHeartbeat(Result<HeartbeatReply, ResponseError>),
    CreateTopics(Vec<(String, Result<CreatedTopic, ResponseError>)>),
    CreatePartitions(Vec<(String, Result<(), ResponseError>)>),
    DeleteTopics(Vec<(TopicRef, Result<Uuid, ResponseError>)>),
    AlterConfigs(Vec<(ConfigResource, Result<(), ResponseError>)>),
    AllocateProducerIds(Result<ProducerIdBlock, ResponseError>),
    ElectLeaders(Vec<((String, i32), Result<BrokerId, ResponseError>)>),
    AlterPartition(Result<PartitionState, ResponseError>),
    /// The controller is not active: every request gets NOT_CONTROLLER.
    NotController,
}

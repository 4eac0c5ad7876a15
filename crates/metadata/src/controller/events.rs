//! What goes into the controller (requests from brokers and admin clients, the tick) and the
//! replies that come out.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::image::PartitionState;
use crate::records::{BrokerId, ConfigResource, Endpoint};

/// A broker (re)joins: BrokerRegistration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: BrokerId,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    /// The broker epoch named by the clean-shutdown marker the broker found in its data dir,
    /// or [`NO_PREVIOUS_BROKER_EPOCH`]. Equal to the broker's current epoch only after a
    /// controlled shutdown that closed every log: any other restart is unclean (KIP-966).
    #[serde(default = "no_previous_broker_epoch")]
    pub previous_broker_epoch: i64,
}

/// No clean-shutdown marker: the broker's last stop was unclean (or it is new).
pub const NO_PREVIOUS_BROKER_EPOCH: i64 = -1;

fn no_previous_broker_epoch() -> i64 {
    NO_PREVIOUS_BROKER_EPOCH
}

/// A broker's periodic BrokerHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// Explicit replica lists by partition (then both counts must be -1).
    pub assignment: BTreeMap<i32, Vec<BrokerId>>,
    pub configs: BTreeMap<String, String>,
}

/// One topic of a CreatePartitions request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePartitions {
    pub topic: String,
    /// The new total partition count.
    pub count: i32,
    /// Replica lists for the new partitions, if the client gave them.
    pub assignment: Option<Vec<Vec<BrokerId>>>,
}

/// A topic named in DeleteTopics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopicRef {
    Name(String),
    Id(Uuid),
}

/// Incremental config changes for one resource: `None` deletes the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterConfig {
    pub resource: ConfigResource,
    pub entries: Vec<(String, Option<String>)>,
}

/// ElectLeaders' election type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

/// An ISR change proposed by a partition's leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartition {
    pub broker_id: BrokerId,
    pub broker_epoch: i64,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// One partition of AlterPartitionReassignments: move it to `replicas`, or cancel the
/// reassignment in progress (`None`, the request's null list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassignPartition {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<BrokerId>>,
}

/// A reassignment in progress, as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    /// Every replica: the target ones first, then those being removed.
    pub replicas: Vec<BrokerId>,
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
}

/// Everything the controller reacts to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// KIP-455. `allow_replication_factor_change: false` (KIP-860, v1) refuses a target whose
    /// size differs from the current assignment.
    AlterPartitionReassignments {
        partitions: Vec<ReassignPartition>,
        allow_replication_factor_change: bool,
    },
    /// `None`: every reassignment in progress; else those of the named topics and partitions.
    ListPartitionReassignments(Option<Vec<(String, Vec<i32>)>>),
    /// Time passed: fence silent brokers, rebalance leaders.
    Tick,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// A created topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedTopic {
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// A producer-id block: ids `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdBlock {
    pub start: i64,
    pub len: i64,
}

/// The answer to the event that produced it. `Err(NotController)` when this controller is not
/// the active one.
pub type Reply = ReplyOf<ResponseError>;

/// A reply with errors of type `E`: [`Reply`] in the process, [`WireReply`] (Kafka error
/// codes) when a controller answers a request forwarded by another broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReplyOf<E> {
    BrokerRegistration(Result<i64, E>),
    BrokerHeartbeat(Result<HeartbeatReply, E>),
    CreateTopics(Vec<(String, Result<CreatedTopic, E>)>),
    CreatePartitions(Vec<(String, Result<(), E>)>),
    DeleteTopics(Vec<(TopicRef, Result<Uuid, E>)>),
    AlterConfigs(Vec<(ConfigResource, Result<(), E>)>),
    AllocateProducerIds(Result<ProducerIdBlock, E>),
    ElectLeaders(Vec<((String, i32), Result<BrokerId, E>)>),
    AlterPartition(Result<PartitionState, E>),
    AlterPartitionReassignments(Vec<((String, i32), Result<(), E>)>),
    ListPartitionReassignments(Vec<OngoingReassignment>),
    /// The controller is not active: every request gets NOT_CONTROLLER.
    NotController,
}

/// A reply as it crosses the controller listener: each error as its Kafka error code.
pub type WireReply = ReplyOf<i16>;

impl<E> ReplyOf<E> {
    /// The same reply with every error converted by `f`.
    pub fn map_err<F>(self, f: impl Fn(E) -> F) -> ReplyOf<F> {
        fn each<K, T, E, F>(
            v: Vec<(K, Result<T, E>)>,
            f: &impl Fn(E) -> F,
        ) -> Vec<(K, Result<T, F>)> {
            v.into_iter().map(|(k, r)| (k, r.map_err(f))).collect()
        }
        match self {
            ReplyOf::BrokerRegistration(r) => ReplyOf::BrokerRegistration(r.map_err(f)),
            ReplyOf::BrokerHeartbeat(r) => ReplyOf::BrokerHeartbeat(r.map_err(f)),
            ReplyOf::CreateTopics(v) => ReplyOf::CreateTopics(each(v, &f)),
            ReplyOf::CreatePartitions(v) => ReplyOf::CreatePartitions(each(v, &f)),
            ReplyOf::DeleteTopics(v) => ReplyOf::DeleteTopics(each(v, &f)),
            ReplyOf::AlterConfigs(v) => ReplyOf::AlterConfigs(each(v, &f)),
            ReplyOf::AllocateProducerIds(r) => ReplyOf::AllocateProducerIds(r.map_err(f)),
            ReplyOf::ElectLeaders(v) => ReplyOf::ElectLeaders(each(v, &f)),
            ReplyOf::AlterPartition(r) => ReplyOf::AlterPartition(r.map_err(f)),
            ReplyOf::AlterPartitionReassignments(v) => {
                ReplyOf::AlterPartitionReassignments(each(v, &f))
            }
            ReplyOf::ListPartitionReassignments(v) => ReplyOf::ListPartitionReassignments(v),
            ReplyOf::NotController => ReplyOf::NotController,
        }
    }
}

impl Reply {
    /// For the wire: errors as Kafka error codes.
    pub fn to_wire(self) -> WireReply {
        self.map_err(|e| e.code())
    }

    /// From the wire; a code this build does not know is UNKNOWN_SERVER_ERROR.
    pub fn from_wire(wire: WireReply) -> Reply {
        wire.map_err(|code| {
            ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)
        })
    }

    /// Whether the controller that answered is not (or no longer) the active one: the request
    /// goes to the new one.
    pub fn is_not_controller(&self) -> bool {
        fn any<K, T>(v: &[(K, Result<T, ResponseError>)]) -> bool {
            v.iter()
                .any(|(_, r)| matches!(r, Err(ResponseError::NotController)))
        }
        let nc = |r: Result<(), &ResponseError>| matches!(r, Err(ResponseError::NotController));
        match self {
            ReplyOf::BrokerRegistration(r) => nc(r.as_ref().map(|_| ())),
            ReplyOf::BrokerHeartbeat(r) => nc(r.as_ref().map(|_| ())),
            ReplyOf::AllocateProducerIds(r) => nc(r.as_ref().map(|_| ())),
            ReplyOf::AlterPartition(r) => nc(r.as_ref().map(|_| ())),
            ReplyOf::CreateTopics(v) => any(v),
            ReplyOf::CreatePartitions(v) => any(v),
            ReplyOf::DeleteTopics(v) => any(v),
            ReplyOf::AlterConfigs(v) => any(v),
            ReplyOf::ElectLeaders(v) => any(v),
            ReplyOf::AlterPartitionReassignments(v) => any(v),
            ReplyOf::ListPartitionReassignments(_) => false,
            ReplyOf::NotController => true,
        }
    }
}

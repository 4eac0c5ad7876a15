//! Requests and responses of the coordinator, in domain terms (the broker maps the wire
//! versions of the `kafka-protocol` messages onto these).

use bytes::Bytes;

/// Identifies a parked request so the broker can route a later reply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestToken(pub u64);

/// One assignor a member supports, with its subscription metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    /// v0 has no rebalance timeout: the broker passes the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    /// Empty for a first join.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub client_id: String,
    pub client_host: String,
    /// JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with its id.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    pub error_code: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinGroupMember>,
}

impl JoinGroupResponse {
    pub fn error(member_id: &str, error_code: i16) -> Self {
        JoinGroupResponse {
            error_code,
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v5+; `None` when the client did not send it.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignment: (member id, assignment bytes).
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    pub error_code: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncGroupResponse {
    pub fn error(error_code: i16) -> Self {
        SyncGroupResponse {
            error_code,
            ..Default::default()
        }
    }
}

/// A reply to a parked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeavingMember {
    /// Empty when only the instance id is known (static member leaving by instance id).
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    pub members: Vec<LeavingMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub error_code: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupResponse {
    pub error_code: i16,
    pub members: Vec<LeftMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPartition {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitTopic {
    pub name: String,
    pub partitions: Vec<CommitPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    /// -1 for simple consumers / admin commits.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v2-v4 `retention_time_ms`; -1 = broker default.
    pub retention_time_ms: i64,
    /// The request's API version (v9+ reports GROUP_ID_NOT_FOUND for unknown groups).
    pub api_version: i16,
    pub topics: Vec<CommitTopic>,
}

/// Per-partition results, in request order: (topic, [(partition, error code)]).
pub type CommitResults = Vec<(String, Vec<(i32, i16)>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    pub partition: i32,
    /// -1 when nothing is committed.
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub error_code: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedTopic {
    pub name: String,
    pub partitions: Vec<FetchedOffset>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResult {
    pub error_code: i16,
    pub topics: Vec<FetchedTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteResult {
    pub error_code: i16,
    /// (topic, [(partition, error code)])
    pub topics: Vec<(String, Vec<(i32, i16)>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    pub group_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub error_code: i16,
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

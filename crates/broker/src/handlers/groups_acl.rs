//! Kafka's authorization of the consumer-group APIs (KafkaApis): JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup and OffsetCommit need READ on the group; OffsetFetch and
//! DescribeGroups DESCRIBE; DeleteGroups and OffsetDelete DELETE (else
//! GROUP_AUTHORIZATION_FAILED). OffsetCommit and OffsetDelete need READ on each topic,
//! OffsetFetch DESCRIBE (else TOPIC_AUTHORIZATION_FAILED per partition; a fetch of all the
//! group's offsets leaves such topics out). FindCoordinator needs DESCRIBE on the group or
//! transactional id. ListGroups lists the groups the principal may DESCRIBE (all of them with
//! DESCRIBE on the cluster).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::{GroupId, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse};
use kafka_protocol::messages::{SyncGroupResponse, offset_commit_response};
use kafka_protocol::protocol::StrBytes;
use streamforge_coordinator as coord;
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, Resource};

const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;

/// Whether `req`'s principal may `op` the group.
pub(crate) fn group_allowed(
    state: &BrokerState,
    req: &RequestFrame,
    op: Operation,
    group: &str,
) -> bool {
    Access::of(state, req).group(op, group)
}

fn respond<T>(req: &RequestFrame, body: &T) -> HandlerResult
where
    T: kafka_protocol::protocol::Encodable + streamforge_protocol::error_codes::ErrorCodes,
{
    Ok(Some(req.respond(body)?))
}

/// JoinGroup refused: GROUP_AUTHORIZATION_FAILED with the request's member id.
pub(crate) fn join_denied(req: &RequestFrame, member_id: &StrBytes) -> HandlerResult {
    let mut resp = JoinGroupResponse::default();
    resp.error_code = GROUP_DENIED.code();
    resp.generation_id = -1;
    resp.member_id = member_id.clone();
    if req.api_version >= 7 {
        resp.protocol_name = None;
    }
    respond(req, &resp)
}

pub(crate) fn sync_denied(req: &RequestFrame) -> HandlerResult {
    let mut resp = SyncGroupResponse::default();
    resp.error_code = GROUP_DENIED.code();
    respond(req, &resp)
}

pub(crate) fn heartbeat_denied(req: &RequestFrame) -> HandlerResult {
    let mut resp = HeartbeatResponse::default();
    resp.error_code = GROUP_DENIED.code();
    respond(req, &resp)
}

pub(crate) fn leave_denied(req: &RequestFrame) -> HandlerResult {
    let mut resp = LeaveGroupResponse::default();
    resp.error_code = GROUP_DENIED.code();
    respond(req, &resp)
}

/// OffsetCommit's and OffsetDelete's per-partition code for a topic without READ.
pub(crate) fn topic_read_denied(access: &Access<'_>, topic: &str) -> Option<i16> {
    (!access.topic(Operation::Read, topic)).then(|| ResponseError::TopicAuthorizationFailed.code())
}

/// OffsetDelete refused: GROUP_AUTHORIZATION_FAILED for the request.
pub(crate) fn offset_delete_denied(req: &RequestFrame) -> HandlerResult {
    let mut resp = kafka_protocol::messages::OffsetDeleteResponse::default();
    resp.error_code = GROUP_DENIED.code();
    respond(req, &resp)
}

/// An OffsetCommit answered without the coordinator: every partition gets `code`.
pub(crate) fn commit_all(
    req: &RequestFrame,
    request: &kafka_protocol::messages::OffsetCommitRequest,
    code: i16,
) -> HandlerResult {
    let mut resp = kafka_protocol::messages::OffsetCommitResponse::default();
    for t in &request.topics {
        let mut topic = offset_commit_response::OffsetCommitResponseTopic::default();
        topic.name = t.name.clone();
        for p in &t.partitions {
            let mut partition = offset_commit_response::OffsetCommitResponsePartition::default();
            partition.partition_index = p.partition_index;
            partition.error_code = code;
            topic.partitions.push(partition);
        }
        resp.topics.push(topic);
    }
    respond(req, &resp)
}

/// OffsetFetch of one group: GROUP_AUTHORIZATION_FAILED without DESCRIBE on it; topics the
/// principal may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED when named, and are left out
/// of an all-topics fetch.
pub(crate) fn filter_offsets(
    access: &Access<'_>,
    group: &str,
    all_topics: bool,
    result: &mut coord::OffsetFetchResult,
) {
    if !access.group(Operation::Describe, group) {
        result.error_code = GROUP_DENIED.code();
        result.topics.clear();
        return;
    }
    if all_topics {
        let quiet = access.quiet();
        result
            .topics
            .retain(|t| quiet.topic(Operation::Describe, &t.name));
        return;
    }
    for t in &mut result.topics {
        if !access.topic(Operation::Describe, &t.name) {
            for p in &mut t.partitions {
                p.offset = -1;
                p.leader_epoch = -1;
                p.metadata.clear();
                p.error_code = ResponseError::TopicAuthorizationFailed.code();
            }
        }
    }
}

/// DescribeGroups of a group the principal may not DESCRIBE.
pub(crate) fn described_denied(group_id: &GroupId) -> DescribedGroup {
    let mut g = DescribedGroup::default();
    g.error_code = GROUP_DENIED.code();
    g.group_id = group_id.clone();
    g.authorized_operations = i32::MIN;
    g
}

/// DescribeGroups v3+: the group's authorized-operations bit field when asked for.
pub(crate) fn group_operations(access: &Access<'_>, include: bool, group: &str) -> i32 {
    access.operations_if(include, &Resource::group(group))
}

/// FindCoordinator: the error of a key the principal may not DESCRIBE (`transaction`: the key
/// is a transactional id).
pub(crate) fn coordinator_denied(
    access: &Access<'_>,
    transaction: bool,
    key: &str,
) -> Option<(i16, Option<StrBytes>)> {
    if transaction && !access.transactional_id(Operation::Describe, key) {
        Some((
            ResponseError::TransactionalIdAuthorizationFailed.code(),
            None,
        ))
    } else if !transaction && !access.group(Operation::Describe, key) {
        Some((GROUP_DENIED.code(), None))
    } else {
        None
    }
}

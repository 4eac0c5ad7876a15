//! Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, OffsetDelete (ListGroups, DescribeGroups, DeleteGroups are in
//! `groups_admin.rs`).
//! Each handler maps the wire version onto the coordinator's domain types and back; parked
//! requests (JoinGroup, SyncGroup) are async waits on the group service.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_coordinator as coord;
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::handlers::coordinator_lookup::{CoordinatorNode, coordinator_node};
use crate::handlers::groups_acl::{self as acl, group_allowed};
use crate::handlers::topic_name;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// FindCoordinator key types: groups, transactions (KIP-848 share groups = 2 are not served).
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// Keys answered per batched FindCoordinator (a named bound on work per request).
const FIND_COORDINATOR_KEYS_MAX: usize = 10_000;

pub(crate) fn s(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn opt(value: &Option<StrBytes>) -> Option<String> {
    value.as_ref().map(|v| v.to_string())
}

fn client_id(req: &RequestFrame) -> String {
    req.client_id.clone().unwrap_or_default()
}

pub async fn handle_find_coordinator(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: FindCoordinatorRequest = req.decode()?;
    let mut resp = FindCoordinatorResponse::default();
    let access = Access::of(&state, &req);
    let image = state.replicas.image();
    let listener_name = state.security.endpoint(req.listener).protocol.name();
    let here = state.security.endpoint(req.listener);
    let answer = |key_type: i8, key: &str| -> Answer {
        let topic = match key_type {
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION
                if let Some((code, message)) =
                    acl::coordinator_denied(&access, key_type == KEY_TYPE_TRANSACTION, key) =>
            {
                return Answer::error(code, message);
            }
            KEY_TYPE_GROUP => coord::OFFSETS_TOPIC,
            KEY_TYPE_TRANSACTION => coord::txn::TRANSACTION_STATE_TOPIC,
            other => {
                return Answer::error(
                    ResponseError::InvalidRequest.code(),
                    Some(s(&format!("unsupported coordinator key type {other}"))),
                );
            }
        };
        match coordinator_node(&image, state.node_id(), listener_name, topic, key) {
            CoordinatorNode::Here => Answer {
                error_code: 0,
                error_message: None,
                node_id: state.node_id(),
                host: here.host.clone(),
                port: here.port,
            },
            CoordinatorNode::Other { id, host, port } => Answer {
                error_code: 0,
                error_message: None,
                node_id: id,
                host,
                port,
            },
            not_available => Answer::error(not_available.error_code(), None),
        }
    };
    if req.api_version < 4 {
        let a = answer(request.key_type, &request.key);
        resp.error_code = a.error_code;
        resp.error_message = a.error_message;
        resp.node_id = BrokerId(a.node_id);
        resp.host = s(&a.host);
        resp.port = a.port;
    } else {
        for key in request
            .coordinator_keys
            .iter()
            .take(FIND_COORDINATOR_KEYS_MAX)
        {
            let a = answer(request.key_type, key);
            let mut c = Coordinator::default();
            c.key = key.clone();
            c.error_code = a.error_code;
            c.error_message = a.error_message;
            c.node_id = BrokerId(a.node_id);
            c.host = s(&a.host);
            c.port = a.port;
            resp.coordinators.push(c);
        }
    }
    Ok(Some(req.respond(&resp)?))
}

/// One FindCoordinator answer (v0-3 carry one at the top level, v4+ one per key).
struct Answer {
    error_code: i16,
    error_message: Option<StrBytes>,
    node_id: i32,
    host: String,
    port: i32,
}

impl Answer {
    fn error(error_code: i16, error_message: Option<StrBytes>) -> Answer {
        Answer {
            error_code,
            error_message,
            node_id: -1,
            host: String::new(),
            port: -1,
        }
    }
}

pub async fn handle_join_group(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: JoinGroupRequest = req.decode()?;
    if !group_allowed(&state, &req, Operation::Read, &request.group_id) {
        return acl::join_denied(&req, &request.member_id);
    }
    let domain = coord::JoinGroupRequest {
        group_id: request.group_id.to_string(),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if req.api_version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        member_id: request.member_id.to_string(),
        group_instance_id: opt(&request.group_instance_id),
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .iter()
            .map(|p| coord::Protocol {
                name: p.name.to_string(),
                metadata: p.metadata.clone(),
            })
            .collect(),
        client_id: client_id(&req),
        // Kafka reports hosts as InetAddress.toString() of the peer: "/127.0.0.1".
        client_host: req
            .client_addr
            .map_or_else(String::new, |ip| format!("/{ip}")),
        require_known_member_id: req.api_version >= 4,
    };
    let result = state.groups.join(domain).await;
    let mut resp = JoinGroupResponse::default();
    resp.error_code = result.error_code;
    resp.generation_id = result.generation_id;
    resp.protocol_type = result.protocol_type.as_deref().map(s);
    resp.protocol_name = match (req.api_version >= 7, result.protocol_name.as_deref()) {
        (true, name) => name.map(s),
        // Before v7 the protocol name is not nullable.
        (false, name) => Some(s(name.unwrap_or(""))),
    };
    resp.member_id = s(&result.member_id);
    let mut leader = result.leader.clone();
    let mut members = result.members;
    if result.skip_assignment && req.api_version < 9 {
        // KIP-814: clients before v9 cannot be told to skip the assignment, so the restarted
        // static leader is not told it leads (the group keeps its assignment).
        leader.clear();
        members.clear();
    }
    resp.skip_assignment = result.skip_assignment && req.api_version >= 9;
    resp.leader = s(&leader);
    resp.members = members
        .into_iter()
        .map(|m| {
            let mut member = JoinGroupResponseMember::default();
            member.member_id = s(&m.member_id);
            member.group_instance_id = m.group_instance_id.as_deref().map(s);
            member.metadata = m.metadata;
            member
        })
        .collect();
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_sync_group(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: SyncGroupRequest = req.decode()?;
    if !group_allowed(&state, &req, Operation::Read, &request.group_id) {
        return acl::sync_denied(&req);
    }
    let domain = coord::SyncGroupRequest {
        group_id: request.group_id.to_string(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: opt(&request.group_instance_id),
        protocol_type: opt(&request.protocol_type),
        protocol_name: opt(&request.protocol_name),
        assignments: request
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
    };
    let wait_ms = state.groups.sync_wait_ms(&domain.group_id);
    let generation_id = domain.generation_id;
    let mut result = state.groups.sync(domain, wait_ms).await;
    if result.error_code == 0 {
        // The assignment is answered only once the group's record is on every in-sync replica
        // (Kafka's coordinator completes SyncGroup when its append is committed), so a
        // coordinator failover cannot forget a generation its members already run.
        let group = request.group_id.0.as_str();
        if let Err(code) = sync_stored(&state, group, generation_id).await {
            result = coord::SyncGroupResponse::error(code);
        }
    }
    let mut resp = SyncGroupResponse::default();
    resp.error_code = result.error_code;
    resp.protocol_type = result.protocol_type.as_deref().map(s);
    resp.protocol_name = result.protocol_name.as_deref().map(s);
    resp.assignment = result.assignment;
    Ok(Some(req.respond(&resp)?))
}

/// Waits until what `group`'s coordinator appended so far is replicated to its ISR (at most
/// `offsets.commit.timeout.ms`). A failure is answered as Kafka's
/// `appendGroupMetadataErrorToResponseError` maps it (a timeout or too small an ISR:
/// COORDINATOR_NOT_AVAILABLE; lost leadership: NOT_COORDINATOR), and the generation is not kept:
/// the group rebalances.
async fn sync_stored(state: &BrokerState, group: &str, generation_id: i32) -> Result<(), i16> {
    let timeout = std::time::Duration::from_millis(crate::group_service::OFFSET_COMMIT_TIMEOUT_MS);
    let stored = (state.groups)
        .wait_replicated(&state.produce_purgatory, group, timeout)
        .await;
    let Err(code) = stored else {
        return Ok(());
    };
    let code = if code == ResponseError::RequestTimedOut.code() {
        ResponseError::CoordinatorNotAvailable.code()
    } else {
        code
    };
    tracing::warn!(
        group,
        generation_id,
        code,
        "group assignment not replicated; answering SyncGroup with an error"
    );
    let _ = state.groups.with_group(group, |c, now, out| {
        c.group_store_failed(now, group, generation_id, out)
    });
    Err(code)
}

pub async fn handle_heartbeat(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: HeartbeatRequest = req.decode()?;
    if !group_allowed(&state, &req, Operation::Read, &request.group_id) {
        return acl::heartbeat_denied(&req);
    }
    let domain = coord::HeartbeatRequest {
        group_id: request.group_id.to_string(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: opt(&request.group_instance_id),
    };
    let group_id = domain.group_id.clone();
    let error_code = state
        .groups
        .with_group(&group_id, |c, now, out| c.heartbeat(now, domain, out))
        .map_or_else(|code| code, |(code, _)| code);
    let mut resp = HeartbeatResponse::default();
    resp.error_code = error_code;
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_leave_group(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: LeaveGroupRequest = req.decode()?;
    if !group_allowed(&state, &req, Operation::Read, &request.group_id) {
        return acl::leave_denied(&req);
    }
    let members = if req.api_version >= 3 {
        request
            .members
            .iter()
            .map(|m| coord::LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: opt(&m.group_instance_id),
            })
            .collect()
    } else {
        vec![coord::LeavingMember {
            member_id: request.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let domain = coord::LeaveGroupRequest {
        group_id: request.group_id.to_string(),
        members,
    };
    let group_id = domain.group_id.clone();
    let result = match state
        .groups
        .with_group(&group_id, |c, now, out| c.leave_group(now, domain, out))
    {
        Ok((result, _)) => result,
        Err(error_code) => coord::LeaveGroupResponse {
            error_code,
            members: Vec::new(),
        },
    };
    let mut resp = LeaveGroupResponse::default();
    if req.api_version >= 3 {
        resp.error_code = result.error_code;
        resp.members = result
            .members
            .iter()
            .map(|m| {
                let mut r = MemberResponse::default();
                r.member_id = s(&m.member_id);
                r.group_instance_id = m.group_instance_id.as_deref().map(s);
                r.error_code = m.error_code;
                r
            })
            .collect();
    } else {
        // One member, whose result is the request's result.
        resp.error_code = match result.members.first() {
            Some(m) if result.error_code == 0 => m.error_code,
            _ => result.error_code,
        };
    }
    Ok(Some(req.respond(&resp)?))
}

/// Does this topic partition exist (here or on another broker)?
fn partition_exists(state: &BrokerState, topic: &str, partition: i32) -> bool {
    state.replicas.partition_exists(topic, partition)
}

pub async fn handle_offset_commit(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: OffsetCommitRequest = req.decode()?;
    let access = Access::of(&state, &req);
    if !access.group(Operation::Read, &request.group_id) {
        return acl::commit_all(
            &req,
            &request,
            ResponseError::GroupAuthorizationFailed.code(),
        );
    }
    // Partitions we do not host get UNKNOWN_TOPIC_OR_PARTITION (topics not allowed
    // TOPIC_AUTHORIZATION_FAILED); the rest go to the coordinator.
    let mut unknown: Vec<(String, i32, i16)> = Vec::new();
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let name = t.name.to_string();
        let denied = acl::topic_read_denied(&access, &name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            if let Some(code) = denied {
                unknown.push((name.clone(), p.partition_index, code));
            } else if partition_exists(&state, &name, p.partition_index) {
                partitions.push(coord::CommitPartition {
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if req.api_version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: opt(&p.committed_metadata),
                });
            } else {
                let code = ResponseError::UnknownTopicOrPartition.code();
                unknown.push((name.clone(), p.partition_index, code));
            }
        }
        topics.push(coord::CommitTopic { name, partitions });
    }
    let domain = coord::OffsetCommitRequest {
        group_id: request.group_id.to_string(),
        generation_id: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        group_instance_id: opt(&request.group_instance_id),
        retention_time_ms: if (2..=4).contains(&req.api_version) {
            request.retention_time_ms
        } else {
            -1
        },
        api_version: req.api_version,
        topics,
    };
    // Not coordinated here: every partition the client may commit gets the group's error.
    let (results, stored, routing) =
        match state.groups.with_group(&request.group_id, |c, now, out| {
            c.commit_offsets(now, domain, out)
        }) {
            Ok((results, stored)) => (results, stored, None),
            Err(code) => (Vec::new(), Ok(()), Some(code)),
        };
    // Acknowledged only once replicated to the ISR (Kafka's acks=all for offset commits), so
    // a coordinator failover keeps every acknowledged commit.
    let stored = match stored {
        Ok(()) if routing.is_none() => {
            let timeout =
                std::time::Duration::from_millis(crate::group_service::OFFSET_COMMIT_TIMEOUT_MS);
            let group = request.group_id.0.as_str();
            (state.groups)
                .wait_replicated(&state.produce_purgatory, group, timeout)
                .await
        }
        other => other,
    };
    if let Err(code) = stored {
        tracing::warn!(group = %request.group_id.0, code, "offset commit not stored; answering a retriable error");
    }
    // Answer in request order.
    let mut resp = OffsetCommitResponse::default();
    for t in &request.topics {
        let name = t.name.to_string();
        let committed = results.iter().find(|(n, _)| *n == name);
        let mut topic = OffsetCommitResponseTopic::default();
        topic.name = t.name.clone();
        for p in &t.partitions {
            let refused = unknown
                .iter()
                .find(|(n, i, _)| *n == name && *i == p.partition_index);
            let code = if let Some((_, _, code)) = refused {
                *code
            } else if let Some(code) = routing {
                code
            } else {
                committed
                    .and_then(|(_, ps)| ps.iter().find(|(i, _)| *i == p.partition_index))
                    .map_or(ResponseError::UnknownTopicOrPartition.code(), |(_, c)| *c)
            };
            // Nothing is acknowledged that did not reach the log: a retriable error instead
            // (NOT_COORDINATOR when the partition is led here no more).
            let code = match stored {
                Err(e) if code == 0 => e,
                _ => code,
            };
            let mut partition = OffsetCommitResponsePartition::default();
            partition.partition_index = p.partition_index;
            partition.error_code = code;
            topic.partitions.push(partition);
        }
        resp.topics.push(topic);
    }
    crate::request_metrics::count(
        "OffsetCommit",
        resp.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        Some(crate::request_metrics::FAILED_OFFSET_COMMIT),
    );
    Ok(Some(req.respond(&resp)?))
}

/// The coordinator's offset-fetch result as one response version family's topic list (v8+
/// groups and v0-7 share the fields but not the generated types).
macro_rules! offset_fetch_topics {
    ($topics:expr, $topic_ty:ty, $partition_ty:ty) => {
        $topics
            .into_iter()
            .map(|t| {
                let mut topic = <$topic_ty>::default();
                topic.name = topic_name(&t.name);
                topic.partitions = t
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let mut out = <$partition_ty>::default();
                        out.partition_index = p.partition;
                        out.committed_offset = p.offset;
                        out.committed_leader_epoch = p.leader_epoch;
                        out.metadata = Some(s(&p.metadata));
                        out.error_code = p.error_code;
                        out
                    })
                    .collect();
                topic
            })
            .collect()
    };
}

/// The requested (topic, partitions) of an OffsetFetch; `None` asks for all of the group's.
fn requested_offsets<T>(
    topics: Option<&Vec<T>>,
    parts: impl Fn(&T) -> (String, Vec<i32>),
) -> Option<Vec<(String, Vec<i32>)>> {
    topics.map(|ts| ts.iter().map(parts).collect())
}

/// OffsetFetch v7+ `require_stable` (KIP-447; the Java consumer sets it under
/// read_committed): the group's partitions with transactional offsets not yet committed or
/// aborted, answered UNSTABLE_OFFSET_COMMIT (retriable) per partition, in v7 as in v8+.
fn stable_pending(
    state: &BrokerState,
    require_stable: bool,
    group: &str,
) -> std::collections::BTreeSet<(String, i32)> {
    if require_stable {
        // Held by the group coordinator (transactional records in `__consumer_offsets`), and
        // from data dirs written before that, by the transaction service.
        let mut pending = state.groups.pending_txn_partitions(group);
        pending.extend(state.txns.pending_partitions(group));
        pending
    } else {
        Default::default()
    }
}

pub async fn handle_offset_fetch(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: OffsetFetchRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = OffsetFetchResponse::default();
    if req.api_version >= 8 {
        for g in &request.groups {
            let topics = requested_offsets(g.topics.as_ref(), |t| {
                (t.name.to_string(), t.partition_indexes.clone())
            });
            let mut group = OffsetFetchResponseGroup::default();
            group.group_id = g.group_id.clone();
            // v8+: a group not coordinated here has its own error, the others are answered.
            let pending = stable_pending(&state, request.require_stable, &g.group_id);
            let fetched = state.groups.read_group(&g.group_id, |c| {
                c.fetch_offsets_stable(&g.group_id, topics.as_deref(), &pending)
            });
            let mut result = match fetched {
                Ok(result) => result,
                Err(code) => {
                    group.error_code = code;
                    resp.groups.push(group);
                    continue;
                }
            };
            acl::filter_offsets(&access, &g.group_id, topics.is_none(), &mut result);
            group.error_code = result.error_code;
            group.topics = offset_fetch_topics!(
                result.topics,
                OffsetFetchResponseTopics,
                OffsetFetchResponsePartitions
            );
            resp.groups.push(group);
        }
    } else {
        let topics = requested_offsets(request.topics.as_ref(), |t| {
            (t.name.to_string(), t.partition_indexes.clone())
        });
        // `require_stable` is false below v7.
        let pending = stable_pending(&state, request.require_stable, &request.group_id);
        let fetched = state.groups.read_group(&request.group_id, |c| {
            c.fetch_offsets_stable(&request.group_id, topics.as_deref(), &pending)
        });
        let mut result = match fetched {
            Ok(result) => result,
            Err(code) => {
                // v2-7 carry it at the top; v0-1 clients see no offsets.
                resp.error_code = code;
                return Ok(Some(req.respond(&resp)?));
            }
        };
        acl::filter_offsets(&access, &request.group_id, topics.is_none(), &mut result);
        resp.error_code = result.error_code;
        resp.topics = offset_fetch_topics!(
            result.topics,
            OffsetFetchResponseTopic,
            OffsetFetchResponsePartition
        );
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_offset_delete(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: OffsetDeleteRequest = req.decode()?;
    let access = Access::of(&state, &req);
    if !access.group(Operation::Delete, &request.group_id) {
        return acl::offset_delete_denied(&req);
    }
    let mut known: Vec<(String, Vec<i32>)> = Vec::new();
    for t in &request.topics {
        let name = t.name.to_string();
        let partitions = t
            .partitions
            .iter()
            .map(|p| p.partition_index)
            .filter(|&p| partition_exists(&state, &name, p))
            .filter(|_| access.topic(Operation::Read, &name))
            .collect();
        known.push((name, partitions));
    }
    let group_id = request.group_id.to_string();
    let result = match state.groups.with_group(&group_id, |c, now, out| {
        c.delete_offsets(now, &group_id, &known, out)
    }) {
        Ok((result, _)) => result,
        Err(code) => {
            let mut resp = OffsetDeleteResponse::default();
            resp.error_code = code;
            return Ok(Some(req.respond(&resp)?));
        }
    };
    let mut resp = OffsetDeleteResponse::default();
    resp.error_code = result.error_code;
    if result.error_code == 0 {
        for t in &request.topics {
            let name = t.name.to_string();
            let deleted = result.topics.iter().find(|(n, _)| *n == name);
            let mut topic = OffsetDeleteResponseTopic::default();
            topic.name = t.name.clone();
            let topic_denied = acl::topic_read_denied(&access, &name);
            for p in &t.partitions {
                let code = deleted
                    .and_then(|(_, ps)| ps.iter().find(|(i, _)| *i == p.partition_index))
                    .map_or(ResponseError::UnknownTopicOrPartition.code(), |(_, c)| *c);
                let code = topic_denied.unwrap_or(code);
                let mut partition = OffsetDeleteResponsePartition::default();
                partition.partition_index = p.partition_index;
                partition.error_code = code;
                topic.partitions.push(partition);
            }
            resp.topics.push(topic);
        }
    }
    Ok(Some(req.respond(&resp)?))
}

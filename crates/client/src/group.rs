//! Classic consumer-group membership: FindCoordinator, JoinGroup (with the member-id
//! handshake), leader-side assignment, SyncGroup, background heartbeats and LeaveGroup.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info};

use crate::assignor::{self, Assignor, MemberAssignment};
use crate::cluster::Cluster;
use crate::conn::Connection;
use crate::error::{ClientError, Result};
use kafka_protocol::ResponseError;
use kafka_protocol::error::ParseResponseErrorCode;

const FIND_COORDINATOR_MAX_VERSION: i16 = 3;
const JOIN_GROUP_MAX_VERSION: i16 = 7;
const SYNC_GROUP_MAX_VERSION: i16 = 5;
const HEARTBEAT_MAX_VERSION: i16 = 4;
const LEAVE_GROUP_MAX_VERSION: i16 = 4;
/// Join attempts before giving up (each retriable failure backs off).
pub const MAX_JOIN_ATTEMPTS: u32 = 30;

/// Group membership settings.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub group_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub heartbeat_interval_ms: u64,
    pub assignors: Vec<Assignor>,
}

/// The coordinator of a group: its broker id and a connection.
pub async fn find_coordinator(cluster: &Cluster, group_id: &str) -> Result<(i32, Arc<Connection>)> {
    let mut last = None;
    for attempt in 0..MAX_JOIN_ATTEMPTS {
        let conn = cluster.any_broker().await?;
        let version = conn.version_for::<FindCoordinatorRequest>(FIND_COORDINATOR_MAX_VERSION)?;
        let req = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group_id.to_string()))
            .with_key_type(0);
        let r = conn.send(&req, version).await?;
        if r.error_code == 0 {
            let addr = if r.host.contains(':') {
                format!("[{}]:{}", r.host, r.port)
            } else {
                format!("{}:{}", r.host, r.port)
            };
            return Ok((r.node_id.0, cluster.connection_to(&addr).await?));
        }
        let e = ClientError::kafka(
            r.error_code,
            format!("FindCoordinator for group {group_id}"),
        );
        if !e.is_retriable() {
            return Err(e);
        }
        last = Some(e);
        tokio::time::sleep(backoff(cluster, attempt)).await;
    }
    Err(last.unwrap_or(ClientError::Protocol("FindCoordinator failed".into())))
}

fn backoff(cluster: &Cluster, attempt: u32) -> Duration {
    Duration::from_millis(cluster.config().retry_backoff_ms * u64::from(attempt.min(10) + 1))
}

/// An active membership.
#[derive(Debug)]
pub struct Membership {
    pub group_id: String,
    pub member_id: String,
    pub generation_id: i32,
    pub protocol: String,
    pub assignment: MemberAssignment,
    pub coordinator: Arc<Connection>,
    /// Set by the heartbeat task when the group rebalances or the membership is lost.
    pub rejoin_needed: Arc<AtomicBool>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Joins (or rejoins, keeping `member_id`) the group with a subscription.
pub async fn join(
    cluster: &Arc<Cluster>,
    config: &GroupConfig,
    topics: &[String],
    mut member_id: String,
) -> Result<Membership> {
    let metadata = assignor::encode_subscription(topics)?;
    let mut last = None;
    for attempt in 0..MAX_JOIN_ATTEMPTS {
        let (_, coord) = find_coordinator(cluster, &config.group_id).await?;
        match join_once(cluster, &coord, config, topics, &metadata, &member_id).await {
            Ok(m) => return Ok(m),
            Err(JoinError::NewMemberId(id)) => {
                member_id = id;
                continue;
            }
            Err(JoinError::Fatal(e)) => return Err(e),
            Err(JoinError::Retry(e, reset_member)) => {
                debug!(group = %config.group_id, error = %e, "join retry");
                if reset_member {
                    member_id.clear();
                }
                last = Some(e);
                tokio::time::sleep(backoff(cluster, attempt)).await;
            }
        }
    }
    Err(last.unwrap_or(ClientError::Protocol("join group failed".into())))
}

enum JoinError {
    NewMemberId(String),
    Retry(ClientError, bool),
    Fatal(ClientError),
}

fn classify(code: i16, what: &str) -> JoinError {
    let e = ClientError::kafka(code, what.to_string());
    match code.err() {
        Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration) => {
            JoinError::Retry(e, true)
        }
        Some(
            ResponseError::RebalanceInProgress
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::CoordinatorLoadInProgress,
        ) => JoinError::Retry(e, false),
        _ if e.is_retriable() => JoinError::Retry(e, false),
        _ => JoinError::Fatal(e),
    }
}

impl From<ClientError> for JoinError {
    fn from(e: ClientError) -> Self {
        if e.is_retriable() {
            JoinError::Retry(e, false)
        } else {
            JoinError::Fatal(e)
        }
    }
}

async fn join_once(
    cluster: &Arc<Cluster>,
    coord: &Arc<Connection>,
    config: &GroupConfig,
    topics: &[String],
    metadata: &bytes::Bytes,
    member_id: &str,
) -> std::result::Result<Membership, JoinError> {
    let version = coord.version_for::<JoinGroupRequest>(JOIN_GROUP_MAX_VERSION)?;
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(config.group_id.clone())))
        .with_session_timeout_ms(config.session_timeout_ms)
        .with_rebalance_timeout_ms(config.rebalance_timeout_ms)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(
            config
                .assignors
                .iter()
                .map(|a| {
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str(a.name()))
                        .with_metadata(metadata.clone())
                })
                .collect(),
        );
    let r = coord.send(&req, version).await?;
    if r.error_code == ResponseError::MemberIdRequired.code() {
        return Err(JoinError::NewMemberId(r.member_id.to_string()));
    }
    if r.error_code != 0 {
        return Err(classify(r.error_code, "JoinGroup"));
    }
    let member_id = r.member_id.to_string();
    let protocol = r.protocol_name.map(|s| s.to_string()).unwrap_or_default();
    let generation_id = r.generation_id;
    let is_leader = r.leader.as_str() == member_id;
    let assignments = if is_leader {
        let assignor = Assignor::from_name(&protocol).ok_or_else(|| {
            JoinError::Fatal(ClientError::Protocol(format!(
                "group chose unknown assignor {protocol}"
            )))
        })?;
        let mut members = BTreeMap::new();
        for m in &r.members {
            members.insert(
                m.member_id.to_string(),
                assignor::decode_subscription(m.metadata.clone())?,
            );
        }
        let mut all_topics: Vec<String> = members.values().flatten().cloned().collect();
        all_topics.sort();
        all_topics.dedup();
        let meta = cluster.refresh_metadata(&all_topics).await?;
        let counts: HashMap<String, i32> = meta
            .topics
            .iter()
            .filter(|(n, t)| t.error_code == 0 && all_topics.contains(n))
            .map(|(n, t)| (n.clone(), t.partition_count()))
            .collect();
        let plan = assignor.assign(&members, &counts);
        info!(group = %config.group_id, generation_id, members = members.len(), protocol, "leader computed assignment");
        plan.iter()
            .map(|(m, a)| {
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(m.clone()))
                    .with_assignment(assignor::encode_assignment(a)?))
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let sync_version = coord.version_for::<SyncGroupRequest>(SYNC_GROUP_MAX_VERSION)?;
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(config.group_id.clone())))
        .with_generation_id(generation_id)
        .with_member_id(StrBytes::from_string(member_id.clone()))
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(StrBytes::from_string(protocol.clone())))
        .with_assignments(assignments);
    let s = coord.send(&sync, sync_version).await?;
    if s.error_code != 0 {
        return Err(classify(s.error_code, "SyncGroup"));
    }
    let assignment = assignor::decode_assignment(s.assignment)?;
    let _ = topics;
    let rejoin_needed = Arc::new(AtomicBool::new(false));
    let heartbeat = tokio::spawn(heartbeat_loop(
        coord.clone(),
        config.group_id.clone(),
        member_id.clone(),
        generation_id,
        Duration::from_millis(config.heartbeat_interval_ms),
        rejoin_needed.clone(),
    ));
    info!(group = %config.group_id, member_id, generation_id, partitions = assignment.values().map(Vec::len).sum::<usize>(), "joined group");
    Ok(Membership {
        group_id: config.group_id.clone(),
        member_id,
        generation_id,
        protocol,
        assignment,
        coordinator: coord.clone(),
        rejoin_needed,
        heartbeat,
    })
}

async fn heartbeat_loop(
    coord: Arc<Connection>,
    group_id: String,
    member_id: String,
    generation_id: i32,
    interval: Duration,
    rejoin: Arc<AtomicBool>,
) {
    let Ok(version) = coord.version_for::<HeartbeatRequest>(HEARTBEAT_MAX_VERSION) else {
        rejoin.store(true, Ordering::Release);
        return;
    };
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group_id.clone())))
        .with_generation_id(generation_id)
        .with_member_id(StrBytes::from_string(member_id));
    loop {
        tokio::time::sleep(interval).await;
        match coord.send(&req, version).await {
            Ok(r) if r.error_code == 0 => {}
            Ok(r) => {
                debug!(group = %group_id, code = r.error_code, "heartbeat asks to rejoin");
                rejoin.store(true, Ordering::Release);
                return;
            }
            Err(e) => {
                debug!(group = %group_id, error = %e, "heartbeat failed");
                if coord.is_closed() {
                    rejoin.store(true, Ordering::Release);
                    return;
                }
            }
        }
    }
}

/// Leaves the group (best effort).
pub async fn leave(m: &Membership) -> Result<()> {
    let version = m
        .coordinator
        .version_for::<LeaveGroupRequest>(LEAVE_GROUP_MAX_VERSION)?;
    let mut req = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(m.group_id.clone())));
    if version >= 3 {
        req = req.with_members(vec![
            MemberIdentity::default().with_member_id(StrBytes::from_string(m.member_id.clone())),
        ]);
    } else {
        req = req.with_member_id(StrBytes::from_string(m.member_id.clone()));
    }
    let r = m.coordinator.send(&req, version).await?;
    ClientError::check(r.error_code, || "LeaveGroup".into())
}

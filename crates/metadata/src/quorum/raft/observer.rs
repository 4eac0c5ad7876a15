//! Observers: nodes that follow the committed metadata log without voting (Kafka's broker-only
//! nodes, `process.roles=broker`, which KRaft calls observers). In openraft an observer is a
//! *learner*: a node in the membership's node set but in none of its voter configurations. The
//! leader replicates the log to it like to a voter (AppendEntries, InstallSnapshot on the same
//! quorum listener), but its acknowledgements count for no commit and it never stands for
//! election, so the voters' majority neither needs it nor waits for it.
//!
//! Joining: a starting observer sends a `Join` frame (its id and the address of its own quorum
//! listener) to a voter's quorum listener, next to the Raft RPCs. The leader adds it as a
//! learner (a membership entry, committed before the answer), or answers at once if it already
//! is one at that address; a voter that does not lead names the leader. The learner entry stays
//! in the membership across restarts of the observer, so a restarted observer is caught up by
//! the leader's replication stream (from its own log on disk, or by a snapshot) and asks again
//! only to learn that it is there. A voter id is refused: a voter is never demoted to a learner.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft, RaftMetrics};
use serde::{Deserialize, Serialize};

use super::tcp::{RPC_TIMEOUT_MS, Request, Response, read_response, write_frame};
use super::transport::Transport;
use super::{RaftQuorum, RaftStartError, TypeConfig};
use crate::quorum::{NodeId, VoterStatus};

/// An observer asks again this long after a voter could not add it (unreachable, not leading
/// and not knowing who does, or a membership change in progress).
pub const JOIN_RETRY_MS: u64 = 50;
/// The leader waits at most this long for the learner's membership entry to commit (a leader
/// without a majority cannot commit it; the observer asks again).
pub const JOIN_COMMIT_TIMEOUT_MS: u64 = 5_000;
/// Bound on an observer's address (it travels in every membership entry).
pub const OBSERVER_ADDR_BYTES_MAX: usize = 255;

/// An observer asking to follow the metadata log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRequest {
    pub id: NodeId,
    /// The observer's quorum listener, where the leader sends it the log.
    pub addr: String,
}

/// A voter's answer to [`JoinRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinAnswer {
    /// The observer is a learner at that address in a committed membership.
    Joined,
    /// This voter does not lead: the leader and its quorum listener, when known.
    NotLeader { leader: Option<(NodeId, String)> },
    /// Not now (a membership change in progress, the entry did not commit in time): ask again.
    Retry(String),
    /// Never (the id is a voter's, the address is malformed).
    Refused(String),
}

/// The quorum leader and its quorum-listener address, as `metrics` know them.
fn leader_of(metrics: &RaftMetrics<NodeId, BasicNode>) -> Option<(NodeId, String)> {
    let leader = metrics.current_leader?;
    let node = metrics.membership_config.membership().get_node(&leader)?;
    Some((leader, node.addr.clone()))
}

/// Answer `request` on this voter: add the observer as a learner when this voter leads.
pub(super) async fn answer_join(raft: &Raft<TypeConfig>, request: JoinRequest) -> JoinAnswer {
    let metrics = raft.metrics().borrow().clone();
    if metrics.current_leader != Some(metrics.id) {
        return JoinAnswer::NotLeader {
            leader: leader_of(&metrics),
        };
    }
    let JoinRequest { id, addr } = request;
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|v| v == id) {
        return JoinAnswer::Refused(format!(
            "node {id} is a voter of the metadata quorum and cannot join as an observer"
        ));
    }
    if addr.is_empty() || addr.len() > OBSERVER_ADDR_BYTES_MAX {
        return JoinAnswer::Refused(format!("observer address {addr:?} is not host:port"));
    }
    let node = BasicNode::new(&addr);
    let change: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> =
        match membership.get_node(&id) {
            Some(known) if known.addr == addr => return JoinAnswer::Joined,
            // Restarted with another listener address: point the leader's stream at the new one
            // (safe for a learner: it holds no vote).
            Some(_) => Box::pin(
                raft.change_membership(ChangeMembers::SetNodes(BTreeMap::from([(id, node)])), true),
            ),
            None => Box::pin(raft.add_learner(id, node, false)),
        };
    let timeout = Duration::from_millis(JOIN_COMMIT_TIMEOUT_MS);
    match tokio::time::timeout(timeout, change).await {
        Ok(Ok(_)) => {
            tracing::info!(observer = id, %addr, "observer joined the metadata quorum as a learner");
            JoinAnswer::Joined
        }
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            let leader = f.leader_id.zip(f.leader_node.map(|n| n.addr));
            JoinAnswer::NotLeader { leader }
        }
        Ok(Err(error)) => JoinAnswer::Retry(error.to_string()),
        Err(_) => JoinAnswer::Retry("the learner's membership entry did not commit".into()),
    }
}

/// Ask the voter listening at `addr` to add `request`'s observer, waiting at most `timeout`.
pub(super) async fn ask_join(
    transport: &Transport,
    addr: &str,
    request: &JoinRequest,
    timeout: Duration,
) -> std::io::Result<JoinAnswer> {
    let call = async {
        let mut stream = transport.open(addr).await?;
        write_frame(&mut stream, &Request::Join(request.clone())).await?;
        match read_response(&mut stream).await? {
            Response::Join(answer) => Ok(answer),
            _ => Err(std::io::Error::other("answer of another kind")),
        }
    };
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "join timed out",
            ))
        })
}

impl RaftQuorum {
    /// Join the quorum of `voters` (id → quorum listener) as an observer answering at `addr`
    /// (this node's own quorum listener): ask the voters, following the leader they name, until
    /// one adds this node as a learner, at most `wait`. Never call `initialize` on an observer.
    pub async fn join_as_observer(
        &self,
        voters: &BTreeMap<NodeId, String>,
        addr: &str,
        wait: Duration,
    ) -> Result<(), RaftStartError> {
        if voters.contains_key(&self.id) {
            return Err(RaftStartError::Config(format!(
                "node {} is a voter, not an observer",
                self.id
            )));
        }
        let deadline = Instant::now() + wait;
        let request = JoinRequest {
            id: self.id,
            addr: addr.to_string(),
        };
        let mut round_robin = voters.values().cycle();
        let mut hint: Option<String> = None;
        let mut chased = false;
        loop {
            // The leader a voter named, else the one this node knows (a restart keeps its
            // membership), else the next voter.
            let target = hint
                .take()
                .or_else(|| self.leader_addr().map(|(_, a)| a))
                .or_else(|| round_robin.next().cloned())
                .ok_or_else(|| RaftStartError::Config("no voters to join".into()))?;
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = left.min(Duration::from_millis(RPC_TIMEOUT_MS));
            match ask_join(&self.transport, &target, &request, timeout).await {
                Ok(JoinAnswer::Joined) => return Ok(()),
                Ok(JoinAnswer::Refused(why)) => return Err(RaftStartError::Raft(why)),
                Ok(JoinAnswer::NotLeader { leader }) => {
                    hint = leader.map(|(_, a)| a).filter(|a| *a != target);
                }
                Ok(JoinAnswer::Retry(why)) => tracing::debug!(%target, %why, "join: ask again"),
                Err(error) => self
                    .transport
                    .report(&target, "join: voter unreachable", &error),
            }
            if Instant::now() >= deadline {
                return Err(RaftStartError::Raft(format!(
                    "no quorum leader added node {} as an observer within {} ms",
                    self.id,
                    wait.as_millis()
                )));
            }
            // Follow a named leader at once, but only one hop: two voters naming each other
            // (leadership moving) must not spin.
            chased = hint.is_some() && !chased;
            if !chased {
                tokio::time::sleep(Duration::from_millis(JOIN_RETRY_MS)).await;
            }
        }
    }

    /// The observers (learners) of the membership and, as the leader sees it, how far each
    /// one's log is behind (`None` on a node that does not lead).
    pub fn learners(&self) -> Vec<VoterStatus> {
        self.member_status(|m| m.learner_ids().collect())
    }

    /// Each member `ids` picks from the membership, with how many entries its log is behind
    /// the leader's (`None` on a node that does not lead): voters and learners alike.
    pub(super) fn member_status(
        &self,
        ids: impl FnOnce(&openraft::Membership<NodeId, BasicNode>) -> Vec<NodeId>,
    ) -> Vec<VoterStatus> {
        let metrics = self.raft.metrics().borrow().clone();
        let last = metrics.last_log_index.unwrap_or(0);
        let matched = metrics.replication.as_ref();
        ids(metrics.membership_config.membership())
            .into_iter()
            .map(|id| {
                let lag_entries = matched
                    .and_then(|m| m.get(&id))
                    .map(|log_id| last.saturating_sub(log_id.as_ref().map_or(0, |l| l.index)));
                VoterStatus { id, lag_entries }
            })
            .collect()
    }

    /// Whether this node is a voter of the membership it knows (an observer never is).
    pub fn is_voter(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let mut voters = metrics.membership_config.membership().voter_ids();
        voters.any(|v| v == self.id)
    }
}

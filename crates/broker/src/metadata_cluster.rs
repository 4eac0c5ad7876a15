//! Cluster mode of the metadata service: with `--controller-quorum-voters`, this broker is one
//! voter of a Raft quorum ([`RaftQuorum`] over TCP on its controller listener) and, when it is
//! the quorum leader, the active controller (Kafka's combined mode), or, when its node id is
//! not a voter (`process.roles=broker`), an observer: a learner that follows the committed log
//! on its own controller listener and never votes or leads. Without voters it is the one-voter
//! [`DurableQuorum`] of itself, as before; all sit behind [`BrokerQuorum`].

use std::collections::BTreeMap;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use openraft::{BasicNode, RaftMetrics};
use streamforge_metadata::Snapshot;
use streamforge_metadata::controller::{Event, Reply};
use streamforge_metadata::node::{AWAITING_REPLIES_MAX, RequestId};
use streamforge_metadata::quorum::raft::forward::{self, Forwarded};
use streamforge_metadata::quorum::raft::transport::Transport;
use streamforge_metadata::quorum::raft::{RaftQuorum, RaftTiming};
use streamforge_metadata::quorum::{
    CommittedBatch, DurableQuorum, LeaderAndEpoch, MetadataQuorum, NodeId, QuorumError, VoterStatus,
};
use streamforge_metadata::records::Record;
use tokio::sync::watch;

use crate::metadata_service::{MetadataError, MetadataService};
use crate::security::controller::ControllerSecurity;

/// The static quorum of `--controller-quorum-voters` and this node's controller listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Voter id → its controller listener (`host:port`).
    pub voters: BTreeMap<NodeId, String>,
    /// Where this node listens for Raft RPCs and forwarded controller events. For a broker-only
    /// node it is also the address the leader sends the metadata log to.
    pub listen: String,
    /// What this node is in the cluster (`process.roles`).
    pub roles: ProcessRoles,
    /// What the controller listener speaks (`--controller-listener-security-protocol`); every
    /// node of the cluster must speak the same.
    pub security: ControllerSecurity,
}

/// Kafka's `process.roles` in a cluster: a voter and controller that is also a broker
/// (`broker,controller`, combined mode), or a broker only (an observer of the metadata quorum).
/// A controller-only node is not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessRoles {
    Combined,
    Broker,
}

impl ProcessRoles {
    /// `process.roles` as Kafka writes it: `broker`, `controller,broker` or `broker,controller`.
    pub fn parse(text: &str) -> Result<ProcessRoles, String> {
        let mut roles: Vec<&str> = text.split(',').map(str::trim).collect();
        roles.sort_unstable();
        match roles.as_slice() {
            ["broker"] => Ok(ProcessRoles::Broker),
            ["broker", "controller"] => Ok(ProcessRoles::Combined),
            ["controller"] => Err(
                "process.roles=controller (a controller that is not a broker) is not supported; \
                 use broker,controller (combined) or broker"
                    .into(),
            ),
            _ => Err(format!(
                "process.roles '{text}' is not broker, controller,broker or broker,controller"
            )),
        }
    }

    pub fn as_kafka(self) -> &'static str {
        match self {
            ProcessRoles::Combined => "broker,controller",
            ProcessRoles::Broker => "broker",
        }
    }
}

/// The metadata log of this broker: one voter of itself, or a voter of a Raft quorum.
#[derive(Debug)]
pub enum BrokerQuorum {
    Durable(DurableQuorum),
    Raft(RaftQuorum),
}

macro_rules! each {
    ($self:ident, $q:ident => $e:expr) => {
        match $self {
            BrokerQuorum::Durable($q) => $e,
            BrokerQuorum::Raft($q) => $e,
        }
    };
}

impl MetadataQuorum for BrokerQuorum {
    fn node_id(&self) -> NodeId {
        each!(self, q => q.node_id())
    }
    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError> {
        each!(self, q => q.propose(records))
    }
    fn read_committed(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError> {
        each!(self, q => q.read_committed(from_offset, max_batches))
    }
    fn snapshot(&self) -> Snapshot {
        each!(self, q => q.snapshot())
    }
    fn leader(&self) -> LeaderAndEpoch {
        each!(self, q => q.leader())
    }
    fn is_ready_leader(&self) -> bool {
        each!(self, q => q.is_ready_leader())
    }
    fn voters(&self) -> Vec<VoterStatus> {
        each!(self, q => q.voters())
    }
    fn observers(&self) -> Vec<VoterStatus> {
        each!(self, q => q.observers())
    }
}

/// Start this node's member of the metadata quorum: a voter, or an observer for a broker-only
/// node. Blocking: call from a blocking thread inside the runtime.
pub fn start_member(
    node_id: i32,
    cluster: &ClusterOptions,
    dir: &std::path::Path,
) -> std::io::Result<RaftQuorum> {
    match cluster.roles {
        ProcessRoles::Combined => start_voter(node_id, cluster, dir),
        ProcessRoles::Broker => start_observer(node_id, cluster, dir),
    }
}

/// How long a starting broker-only node asks the voters to add it as an observer (they may
/// start after it), as long as a voter's registration waits for a controller.
pub const OBSERVER_JOIN_WAIT_MS: u64 = 120_000;

/// Start this broker-only node as an observer: its Raft member (log, vote and snapshot in
/// `<dir>/raft/`, as a voter's) on its controller listener, added as a learner by the quorum
/// leader, which then sends it every committed batch. It never initializes a membership and
/// never stands for election. Blocking: call from a blocking thread inside the runtime.
pub fn start_observer(
    node_id: i32,
    cluster: &ClusterOptions,
    dir: &std::path::Path,
) -> std::io::Result<RaftQuorum> {
    let id = NodeId::try_from(node_id)
        .map_err(|_| std::io::Error::other("a broker's node id must not be negative"))?;
    if cluster.voters.contains_key(&id) {
        return Err(std::io::Error::other(format!(
            "node {node_id} is in --controller-quorum-voters: a voter is not a broker-only node"
        )));
    }
    block_on(async {
        let transport = controller_transport(cluster)?;
        let listener = bind_controller_listener(&cluster.listen).await?;
        let timing = RaftTiming::default();
        let quorum = RaftQuorum::start_tcp_durable_over(id, timing, listener, dir, transport)
            .await
            .map_err(std::io::Error::other)?;
        let wait = Duration::from_millis(OBSERVER_JOIN_WAIT_MS);
        if let Err(error) = quorum
            .join_as_observer(&cluster.voters, &cluster.listen, wait)
            .await
        {
            quorum.shutdown().await;
            return Err(std::io::Error::other(error));
        }
        let protocol = cluster.security.protocol().name();
        tracing::info!(node_id, listen = %cluster.listen, protocol, voters = ?cluster.voters, "broker-only node following the metadata quorum as an observer");
        Ok(quorum)
    })
}

/// The controller listener's transport (its TLS files are read now: a broken one stops the
/// node at startup with the reason).
fn controller_transport(cluster: &ClusterOptions) -> std::io::Result<Transport> {
    cluster.security.transport().map_err(|e| {
        std::io::Error::other(format!(
            "controller listener ({}): {e}",
            cluster.security.protocol().name()
        ))
    })
}

async fn bind_controller_listener(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("controller listener {addr}: {e}")))
}

/// Start this node's voter on its controller listener and form the static quorum. Every voter
/// initializes the same membership (openraft allows it; the first election settles it). The
/// Raft log, vote and snapshot live in `<dir>/raft/` (fsynced before openraft is told), so a
/// voter restarted from the same data dir keeps them. Blocking: call from a blocking thread
/// inside the runtime.
pub fn start_voter(
    node_id: i32,
    cluster: &ClusterOptions,
    dir: &std::path::Path,
) -> std::io::Result<RaftQuorum> {
    let id = NodeId::try_from(node_id)
        .map_err(|_| std::io::Error::other("a controller's node id must not be negative"))?;
    if !cluster.voters.contains_key(&id) {
        return Err(std::io::Error::other(format!(
            "node {node_id} is not in --controller-quorum-voters"
        )));
    }
    block_on(async {
        let transport = controller_transport(cluster)?;
        let listener = bind_controller_listener(&cluster.listen).await?;
        let timing = RaftTiming::default();
        let quorum = RaftQuorum::start_tcp_durable_over(id, timing, listener, dir, transport)
            .await
            .map_err(std::io::Error::other)?;
        if let Err(error) = quorum.initialize_with_addresses(&cluster.voters).await {
            // Already initialized (a leader reached us first): the membership is the same.
            tracing::debug!(%error, "quorum membership already initialized");
        }
        let protocol = cluster.security.protocol().name();
        tracing::info!(node_id, listen = %cluster.listen, protocol, voters = ?cluster.voters, "controller quorum voter started");
        Ok(quorum)
    })
}

/// What the quorum knows changes: entries applied, leader or term.
pub type Changes = watch::Receiver<RaftMetrics<NodeId, BasicNode>>;

/// Wait (blocking) until `changes` moves past what was last seen, or `timeout` passes.
pub fn wait_change(changes: &mut Changes, timeout: Duration) {
    let wait = tokio::time::timeout(timeout, changes.changed());
    // A closed channel means the voter stopped: the caller's deadline ends its loop.
    if let Ok(Err(_)) = block_on(wait) {
        std::thread::sleep(timeout);
    }
}

/// Run `future` to completion from synchronous code: a blocking thread, or a runtime worker
/// (a few transaction paths reach the metadata service from async handlers), which
/// `block_in_place` hands its other tasks away from first.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(move || handle.block_on(future))
}

/// Send `event` to the controller at `addr` (blocking) over one of `raft`'s pooled
/// connections, waiting at most `timeout`.
pub fn forward_blocking(
    raft: &RaftQuorum,
    addr: &str,
    event: Event,
    timeout: Duration,
) -> std::io::Result<Forwarded> {
    block_on(raft.forward(addr, event, timeout))
}

/// Time left before `deadline` (zero when past).
pub fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The cluster id of a cluster without `--cluster-id`: derived from the voters list, so every
/// broker of the cluster computes the same one (Kafka's 22-character URL-safe base64 of 16
/// bytes; here FNV-1a 128 of the list).
pub fn derived_cluster_id(voters: &BTreeMap<NodeId, String>) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let text: Vec<String> = voters.iter().map(|(id, a)| format!("{id}@{a}")).collect();
    let hash = text
        .join(",")
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u128::from(b)).wrapping_mul(PRIME));
    crate::encode_cluster_id(hash)
}

/// How long a request waits for a controller to answer (elections included) before it gets
/// NOT_CONTROLLER.
pub const CONTROLLER_WAIT_MS: u64 = 10_000;
/// How long a controlled shutdown waits for a controller (the last broker of a cluster that is
/// stopping has none) before the broker closes its logs anyway.
pub const SHUTDOWN_WAIT_MS: u64 = 3_000;
/// A request whose controller is unknown or unreachable asks again after at most this long
/// (sooner when the quorum's leader changes).
const RETRY_WAIT_MS: u64 = 50;

/// Answers events forwarded to this voter, as the active controller or NOT_CONTROLLER.
pub struct ForwardTo(pub Weak<MetadataService>);

impl forward::ForwardHandler for ForwardTo {
    fn handle(&self, event: Event) -> Forwarded {
        let Some(service) = self.0.upgrade() else {
            return Forwarded::not_controller();
        };
        let Some(raft) = service.raft.clone() else {
            return Forwarded::not_controller();
        };
        let deadline = Instant::now() + Duration::from_millis(CONTROLLER_WAIT_MS);
        match service.request_active(&raft, event, deadline) {
            Ok(reply) => Forwarded {
                committed_offset: service.image.read().position().offset,
                reply: reply.to_wire(),
            },
            Err(error) => {
                tracing::warn!(%error, "forwarded controller event");
                Forwarded::not_controller()
            }
        }
    }
}

impl MetadataService {
    /// Cluster mode: the active controller answers `event` (here, or over the controller
    /// listener), NOT_CONTROLLER answers are retried on the new leader until `wait_ms` passes,
    /// and the reply is returned once what it wrote has been replayed here.
    pub(crate) fn request_cluster(
        &self,
        raft: &RaftQuorum,
        event: Event,
        wait_ms: u64,
    ) -> Result<Reply, MetadataError> {
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        let mut changes = raft.changes();
        loop {
            changes.borrow_and_update();
            let reply = match raft.leader_addr() {
                Some((leader, _)) if leader == self.node_id as NodeId => {
                    self.request_active(raft, event.clone(), deadline)?
                }
                Some((leader, addr)) => {
                    let timeout = remaining(deadline).max(Duration::from_millis(RETRY_WAIT_MS));
                    match forward_blocking(raft, &addr, event.clone(), timeout) {
                        Ok(answer) => {
                            let reply = Reply::from_wire(answer.reply);
                            if !reply.is_not_controller() {
                                self.wait_applied(raft, answer.committed_offset, deadline)?;
                            }
                            reply
                        }
                        Err(error) => {
                            tracing::debug!(%error, leader, "controller unreachable");
                            Reply::NotController
                        }
                    }
                }
                None => Reply::NotController,
            };
            tracing::debug!(?reply, "controller reply");
            if !reply.is_not_controller() || Instant::now() >= deadline {
                return Ok(reply);
            }
            wait_change(
                &mut changes,
                remaining(deadline).min(Duration::from_millis(RETRY_WAIT_MS)),
            );
        }
    }

    /// As the active controller: handle `event`, then wait for the commit notifications until
    /// its reply is released (NOT_CONTROLLER when this node does not lead, or at `deadline`).
    pub(crate) fn request_active(
        &self,
        raft: &RaftQuorum,
        event: Event,
        deadline: Instant,
    ) -> Result<Reply, MetadataError> {
        let id: RequestId = self.next_request.fetch_add(1, Ordering::Relaxed);
        let mut changes = raft.changes();
        let now_ms = self.now_ms();
        let (decided_at, epoch) = {
            let mut node = self.node.lock();
            // Catch up and follow leadership first: an inactive controller answers nothing.
            let replies = self.poll_locked(&mut node, now_ms)?;
            self.keep_released(replies);
            let Some(epoch) = node.active_epoch() else {
                return Ok(Reply::NotController);
            };
            let now = node.handle(id, event, now_ms);
            self.keep_released(now);
            // The controller decided on its image with records not yet committed (another
            // request's): the reply waits until those have committed too.
            (node.controller().image().position().offset, epoch)
        };
        loop {
            changes.borrow_and_update();
            let active = {
                let mut node = self.node.lock();
                let replies = self.poll_locked(&mut node, self.now_ms())?;
                self.keep_released(replies);
                node.active_epoch() == Some(epoch)
            };
            let applied = self.image.read().position().offset >= decided_at;
            if applied && let Some(reply) = self.released.lock().remove(&id) {
                return Ok(reply);
            }
            // Leadership moved on (a restarted voter briefly resumes its old term as leader
            // until it hears the newer one): what it proposed in that term may never commit,
            // so the caller asks the current controller now rather than at its deadline.
            if !active || Instant::now() >= deadline {
                self.released.lock().remove(&id);
                return Ok(Reply::NotController);
            }
            wait_change(&mut changes, remaining(deadline));
        }
    }

    /// Wait until this node has replayed the log through `offset` (a forwarded reply's commit).
    fn wait_applied(
        &self,
        raft: &RaftQuorum,
        offset: i64,
        deadline: Instant,
    ) -> Result<(), MetadataError> {
        let started = Instant::now();
        let mut changes = raft.changes();
        loop {
            changes.borrow_and_update();
            {
                let mut node = self.node.lock();
                let replies = self.poll_locked(&mut node, self.now_ms())?;
                self.keep_released(replies);
            }
            if self.image.read().position().offset >= offset {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(MetadataError::NotApplied {
                    offset,
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            wait_change(&mut changes, remaining(deadline));
        }
    }

    /// The quorum's observers (broker-only nodes), with their lag as the leader sees it.
    pub fn quorum_observers(&self) -> Vec<VoterStatus> {
        self.node.lock().quorum().observers()
    }

    /// The number of voters in a cluster; `None` for the one-voter quorum of itself.
    pub fn voter_count(&self) -> Option<usize> {
        self.raft.as_ref().map(|r| r.voters().len())
    }

    /// Replay what committed; the delta not yet handed to the replica manager.
    pub fn sync(&self) -> Result<streamforge_metadata::MetadataDelta, MetadataError> {
        {
            let mut node = self.node.lock();
            let replies = self.poll_locked(&mut node, self.now_ms())?;
            self.keep_released(replies);
        }
        Ok(self.take_pending())
    }

    /// Keep released replies for their waiting requests (cluster mode), dropping those of
    /// requests too old to still be waiting.
    pub(crate) fn keep_released(&self, replies: Vec<(RequestId, Reply)>) {
        if self.raft.is_none() || replies.is_empty() {
            return;
        }
        let mut released = self.released.lock();
        released.extend(replies);
        let newest = self.next_request.load(Ordering::Relaxed);
        let oldest = newest.saturating_sub(AWAITING_REPLIES_MAX as u64);
        while released
            .first_key_value()
            .is_some_and(|(id, _)| *id < oldest)
        {
            released.pop_first();
        }
    }
}

/// Cluster mode: replay what commits as it commits and hand it to `apply` (the replica
/// manager), until `shutdown`. Followers of the metadata log learn new topics, deletions,
/// leader changes and configs this way without being asked.
pub fn follow_commits(
    service: &MetadataService,
    shutdown: &watch::Receiver<bool>,
    mut apply: impl FnMut(),
) {
    let Some(raft) = service.raft.clone() else {
        return;
    };
    let mut changes = raft.changes();
    while !*shutdown.borrow() {
        changes.borrow_and_update();
        apply();
        wait_change(&mut changes, Duration::from_millis(FOLLOW_WAIT_MS));
    }
}

/// How long a starting broker waits for the other voters to register before it creates the
/// internal topics with the brokers it has.
pub const BROKERS_WAIT_MS: u64 = 120_000;
/// How often that wait looks at the image (start-up only).
pub const BROKERS_POLL_MS: u64 = 50;

/// The follower loop wakes at least this often (to see the shutdown).
const FOLLOW_WAIT_MS: u64 = 500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_cluster_id_depends_only_on_the_voters() {
        let voters = |port: u16| {
            BTreeMap::from([
                (1, format!("127.0.0.1:{port}")),
                (2, "127.0.0.1:9193".to_string()),
            ])
        };
        let id = derived_cluster_id(&voters(9093));
        assert_eq!(id.len(), 22);
        assert_eq!(id, derived_cluster_id(&voters(9093)));
        assert_ne!(id, derived_cluster_id(&voters(9094)));
    }

    #[test]
    fn process_roles_parse_as_kafka_writes_them() {
        assert_eq!(ProcessRoles::parse("broker"), Ok(ProcessRoles::Broker));
        for combined in [
            "broker,controller",
            "controller,broker",
            " controller , broker",
        ] {
            assert_eq!(ProcessRoles::parse(combined), Ok(ProcessRoles::Combined));
        }
        let controller_only = ProcessRoles::parse("controller").unwrap_err();
        assert!(
            controller_only.contains("not supported"),
            "{controller_only}"
        );
        for bad in ["", "brokers", "broker,broker", "broker,controller,x"] {
            assert!(ProcessRoles::parse(bad).is_err(), "{bad}");
        }
    }
}

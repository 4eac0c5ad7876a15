//! The metadata quorum on `openraft`: a Raft log of [`Batch`]es whose state machine is the
//! [`CommittedLog`](crate::quorum::CommittedLog), behind [`MetadataQuorum`].
//!
//! [`RaftQuorum::propose`] hands the batch to the local Raft task (it returns at once; the
//! batch shows up in [`MetadataQuorum::read_committed`] when a majority has it). Leadership,
//! the epoch (Raft term) and follower lag come from openraft's metrics.
//!
//! [`RaftQuorum::start`] / [`RaftQuorum::start_tcp`] keep the Raft log and state machine in
//! memory; [`RaftQuorum::start_durable`] / [`RaftQuorum::start_tcp_durable`] keep them in
//! `<dir>/raft/` ([`log_file`], [`store`]), so a voter restarted from its directory keeps its
//! vote, its log and its last snapshot.

pub mod forward;
pub mod log_file;
mod network;
pub mod observer;
mod store;
pub mod tcp;
pub mod transport;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod forward_tests;
#[cfg(test)]
mod observer_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod storage_suite;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transport_tests;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use tokio::sync::mpsc;

pub use log_file::{LOG_CACHE_ENTRIES_MAX, RaftLogFile};
pub use network::Router;
use network::RouterFactory;
pub use store::{LogStore, StateMachine};

use super::PROPOSALS_IN_FLIGHT_MAX;
use super::{CommittedBatch, LeaderAndEpoch, MetadataQuorum, NodeId, QuorumError, VoterStatus};
use crate::records::Record;
use crate::snapshot::Snapshot;

/// One Raft log entry: a batch of metadata records and who proposed it. On the wire (the TCP
/// transport) the records travel in their own binary encoding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Batch {
    pub proposer: NodeId,
    pub seq: u64,
    #[serde(with = "records_as_bytes")]
    pub records: Vec<Record>,
}

mod records_as_bytes {
    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::records::Record;

    pub fn serialize<S: Serializer>(records: &[Record], s: S) -> Result<S::Ok, S::Error> {
        let encoded: Result<Vec<Vec<u8>>, _> = records.iter().map(Record::encode).collect();
        s.collect_seq(encoded.map_err(S::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Record>, D::Error> {
        let encoded = Vec::<Vec<u8>>::deserialize(d)?;
        encoded
            .iter()
            .map(|b| Record::decode(b).map_err(D::Error::custom))
            .collect()
    }
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "batch {}/{} ({} records)",
            self.proposer,
            self.seq,
            self.records.len()
        )
    }
}

openraft::declare_raft_types!(
    /// The openraft types of the metadata quorum.
    pub TypeConfig:
        D = Batch,
        R = (),
);

/// Raft timing for the metadata quorum (openraft's names, in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

impl Default for RaftTiming {
    /// Kafka's `controller.quorum.election.timeout.ms` is 1000; a heartbeat a fifth of that.
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval_ms: 200,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
        }
    }
}

/// Log entries applied since the last snapshot before openraft builds the next one (and then
/// purges the log behind it): what a restart replays, and what the log file holds, stay bounded.
pub const SNAPSHOT_LOGS_SINCE_LAST: u64 = 1000;
/// Entries kept in the log behind a snapshot, so a follower slightly behind catches up from the
/// log rather than by a snapshot transfer.
pub const LOGS_KEPT_AFTER_SNAPSHOT: u64 = 256;
/// The subdirectory of a voter's directory holding its Raft files.
pub const RAFT_DIR: &str = "raft";

/// Why a Raft voter could not start or join.
#[derive(Debug, thiserror::Error)]
pub enum RaftStartError {
    #[error("invalid raft config: {0}")]
    Config(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("raft storage: {0}")]
    Storage(#[from] std::io::Error),
}

/// A voter's storage: in memory, or opened from a directory.
struct Storage {
    log: LogStore,
    state_machine: StateMachine,
    /// The first proposal sequence number of this start.
    first_seq: u64,
}

impl Storage {
    fn memory() -> Storage {
        Storage {
            log: LogStore::default(),
            state_machine: StateMachine::default(),
            first_seq: 0,
        }
    }

    /// The Raft log, vote and snapshot in `<dir>/raft/`.
    fn open(dir: &Path) -> Result<Storage, RaftStartError> {
        let dir = dir.join(RAFT_DIR);
        let incarnation = log_file::next_incarnation(&dir)?;
        Ok(Storage {
            log: LogStore::open(&dir)?,
            state_machine: StateMachine::open(&dir)?,
            first_seq: incarnation << 32,
        })
    }
}

/// One voter of the openraft-based quorum.
#[derive(Clone)]
pub struct RaftQuorum {
    id: NodeId,
    raft: Raft<TypeConfig>,
    state_machine: StateMachine,
    next_seq: Arc<AtomicU64>,
    in_flight: Arc<AtomicUsize>,
    /// Proposals go through one task so they enter the Raft log in proposal order.
    submit: mpsc::Sender<Batch>,
    /// The TCP listener's task, when there is one.
    server: Option<Arc<tokio::task::AbortHandle>>,
    /// Who answers controller events forwarded to this voter over TCP.
    forward: forward::ForwardSlot,
    /// Connections to the active controller for this voter's own forwarded events.
    forward_pool: Arc<forward::ForwardPool>,
    /// How the quorum listener's connections are secured (plain TCP in-process).
    transport: transport::Transport,
}

impl std::fmt::Debug for RaftQuorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftQuorum")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl RaftQuorum {
    /// Start voter `id` on the in-process `router` (inside a tokio runtime).
    pub async fn start(
        id: NodeId,
        timing: RaftTiming,
        router: &Router,
    ) -> Result<RaftQuorum, RaftStartError> {
        let network = RouterFactory {
            from: id,
            router: router.clone(),
        };
        let quorum = RaftQuorum::start_with(id, timing, network, Storage::memory()).await?;
        router.add(id, quorum.raft.clone());
        Ok(quorum)
    }

    /// [`RaftQuorum::start`] with the Raft log, vote and snapshot in `<dir>/raft/` (created if
    /// missing; a voter restarted from the same `dir` keeps them).
    pub async fn start_durable(
        id: NodeId,
        timing: RaftTiming,
        router: &Router,
        dir: &Path,
    ) -> Result<RaftQuorum, RaftStartError> {
        let network = RouterFactory {
            from: id,
            router: router.clone(),
        };
        let quorum = RaftQuorum::start_with(id, timing, network, Storage::open(dir)?).await?;
        router.add(id, quorum.raft.clone());
        Ok(quorum)
    }

    /// Start voter `id` answering Raft RPCs on `listener` and reaching the others over TCP at
    /// the addresses in the membership ([`RaftQuorum::initialize_with_addresses`]).
    pub async fn start_tcp(
        id: NodeId,
        timing: RaftTiming,
        listener: tokio::net::TcpListener,
    ) -> Result<RaftQuorum, RaftStartError> {
        let plain = transport::Transport::default();
        RaftQuorum::start_tcp_with(id, timing, listener, Storage::memory(), plain).await
    }

    /// [`RaftQuorum::start_tcp`] with the Raft log, vote and snapshot in `<dir>/raft/` (what a
    /// broker runs: a voter restarted from the same `dir` keeps them).
    pub async fn start_tcp_durable(
        id: NodeId,
        timing: RaftTiming,
        listener: tokio::net::TcpListener,
        dir: &Path,
    ) -> Result<RaftQuorum, RaftStartError> {
        let plain = transport::Transport::default();
        RaftQuorum::start_tcp_with(id, timing, listener, Storage::open(dir)?, plain).await
    }

    /// [`RaftQuorum::start_tcp_durable`] with every connection of the quorum listener, served
    /// and opened, secured by `transport` (the controller listener's security protocol).
    pub async fn start_tcp_durable_over(
        id: NodeId,
        timing: RaftTiming,
        listener: tokio::net::TcpListener,
        dir: &Path,
        transport: transport::Transport,
    ) -> Result<RaftQuorum, RaftStartError> {
        RaftQuorum::start_tcp_with(id, timing, listener, Storage::open(dir)?, transport).await
    }

    async fn start_tcp_with(
        id: NodeId,
        timing: RaftTiming,
        listener: tokio::net::TcpListener,
        storage: Storage,
        transport: transport::Transport,
    ) -> Result<RaftQuorum, RaftStartError> {
        let network = tcp::TcpNetwork {
            transport: transport.clone(),
        };
        let mut quorum = RaftQuorum::start_with(id, timing, network, storage).await?;
        quorum.forward_pool = Arc::new(forward::ForwardPool::new(transport.clone()));
        quorum.transport = transport.clone();
        let served = tcp::serve(
            listener,
            quorum.raft.clone(),
            quorum.forward.clone(),
            transport,
        );
        let server = tokio::spawn(served);
        quorum.server = Some(Arc::new(server.abort_handle()));
        Ok(quorum)
    }

    async fn start_with<N>(
        id: NodeId,
        timing: RaftTiming,
        network: N,
        storage: Storage,
    ) -> Result<RaftQuorum, RaftStartError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
        let config = Config {
            cluster_name: "streamforge-metadata".into(),
            heartbeat_interval: timing.heartbeat_interval_ms,
            election_timeout_min: timing.election_timeout_min_ms,
            election_timeout_max: timing.election_timeout_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_LOGS_SINCE_LAST),
            max_in_snapshot_log_to_keep: LOGS_KEPT_AFTER_SNAPSHOT,
            ..Default::default()
        };
        let config = Arc::new(
            config
                .validate()
                .map_err(|e| RaftStartError::Config(e.to_string()))?,
        );
        let state_machine = storage.state_machine;
        let raft = Raft::new(id, config, network, storage.log, state_machine.clone())
            .await
            .map_err(|e| RaftStartError::Raft(e.to_string()))?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (submit, batches) = mpsc::channel(PROPOSALS_IN_FLIGHT_MAX);
        tokio::spawn(submit_in_order(raft.clone(), batches, in_flight.clone()));
        Ok(RaftQuorum {
            id,
            raft,
            state_machine,
            next_seq: Arc::new(AtomicU64::new(storage.first_seq)),
            in_flight,
            submit,
            server: None,
            forward: forward::ForwardSlot::default(),
            forward_pool: Arc::default(),
            transport: transport::Transport::default(),
        })
    }

    /// Form the quorum from `voters` and their quorum-listener addresses (once, on one voter of
    /// a fresh cluster).
    pub async fn initialize_with_addresses(
        &self,
        voters: &BTreeMap<NodeId, String>,
    ) -> Result<(), RaftStartError> {
        let members: BTreeMap<NodeId, BasicNode> = voters
            .iter()
            .map(|(&v, addr)| (v, BasicNode::new(addr)))
            .collect();
        self.raft
            .initialize(members)
            .await
            .map_err(|e| RaftStartError::Raft(e.to_string()))
    }

    /// Form the quorum from `voters` (call on one of them, once, on a fresh cluster).
    pub async fn initialize(&self, voters: &[NodeId]) -> Result<(), RaftStartError> {
        let members: BTreeMap<NodeId, BasicNode> =
            voters.iter().map(|&v| (v, BasicNode::default())).collect();
        self.raft
            .initialize(members)
            .await
            .map_err(|e| RaftStartError::Raft(e.to_string()))
    }

    /// Stop this voter's Raft task.
    pub async fn shutdown(&self) {
        if let Some(server) = &self.server {
            server.abort();
        }
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }

    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// Answer controller events forwarded to this voter with `handler`.
    pub fn set_forward_handler(&self, handler: Arc<dyn forward::ForwardHandler>) {
        self.forward.set(handler);
    }

    /// Send `event` to the active controller at `addr` (its quorum listener) over a pooled
    /// connection, waiting at most `timeout`.
    pub async fn forward(
        &self,
        addr: &str,
        event: crate::controller::Event,
        timeout: std::time::Duration,
    ) -> std::io::Result<forward::Forwarded> {
        self.forward_pool.forward(addr, event, timeout).await
    }

    /// The quorum leader and its quorum-listener address (from the membership).
    pub fn leader_addr(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        let node = metrics.membership_config.membership().get_node(&leader)?;
        Some((leader, node.addr.clone()))
    }

    /// Why this member's Raft core stopped on its own, if it did (`None` while it runs and
    /// after `shutdown`): openraft stops it for good at the first failed write of the log or
    /// the vote (a full disk), see [`fatal_error`].
    pub fn failure(&self) -> Option<String> {
        fatal_error(&self.raft.metrics().borrow())
    }

    /// Changes to what this voter knows (entries applied, leader, term), to wait on instead of
    /// polling.
    pub fn changes(
        &self,
    ) -> tokio::sync::watch::Receiver<openraft::RaftMetrics<NodeId, BasicNode>> {
        self.raft.metrics()
    }
}

/// The error a Raft core stopped with, from its metrics (`None` while it runs, and after a
/// requested shutdown).
pub fn fatal_error(metrics: &openraft::RaftMetrics<NodeId, BasicNode>) -> Option<String> {
    match &metrics.running_state {
        Ok(()) | Err(openraft::error::Fatal::Stopped) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Hand batches to Raft one at a time, in order; count each as in flight until it resolves.
async fn submit_in_order(
    raft: Raft<TypeConfig>,
    mut batches: mpsc::Receiver<Batch>,
    in_flight: Arc<AtomicUsize>,
) {
    while let Some(batch) = batches.recv().await {
        let seq = batch.seq;
        match raft.client_write_ff(batch).await {
            Ok(done) => {
                let in_flight = in_flight.clone();
                let raft = raft.clone();
                tokio::spawn(async move {
                    if matches!(done.await, Ok(Ok(_))) {
                        // Followers learn the commit from the next AppendEntries: send it now
                        // instead of at the next heartbeat (up to `heartbeat_interval_ms` later),
                        // so every broker applies a committed change within a round trip.
                        if let Err(error) = raft.trigger().heartbeat().await {
                            tracing::debug!(%error, "heartbeat after commit");
                        }
                    } else {
                        tracing::debug!(seq, "metadata proposal not committed");
                    }
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Err(error) => {
                tracing::debug!(%error, seq, "raft stopped");
                in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl MetadataQuorum for RaftQuorum {
    fn node_id(&self) -> NodeId {
        self.id
    }

    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError> {
        let leader = self.raft.metrics().borrow().current_leader;
        if leader != Some(self.id) {
            return Err(QuorumError::NotLeader { leader });
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= PROPOSALS_IN_FLIGHT_MAX {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(QuorumError::TooManyInFlight);
        }
        let seq = self.next_seq.fetch_add(1, Ordering::AcqRel);
        let batch = Batch {
            proposer: self.id,
            seq,
            records,
        };
        // Cannot be full: in_flight bounds what is queued.
        self.submit
            .try_send(batch)
            .map_err(|_| QuorumError::Shutdown)?;
        Ok(seq)
    }

    fn is_ready_leader(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        // openraft commits a blank entry at the start of each term: once it is applied, every
        // entry of earlier terms is applied too.
        metrics.current_leader == Some(self.id)
            && metrics
                .last_applied
                .is_some_and(|l| l.leader_id.term == metrics.current_term)
    }

    fn read_committed(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError> {
        self.state_machine
            .inner
            .lock()
            .log
            .read(from_offset, max_batches)
    }

    fn snapshot(&self) -> Snapshot {
        self.state_machine.inner.lock().log.snapshot()
    }

    fn leader(&self) -> LeaderAndEpoch {
        let metrics = self.raft.metrics().borrow().clone();
        let epoch = i32::try_from(metrics.current_term).unwrap_or(i32::MAX);
        LeaderAndEpoch {
            leader: metrics.current_leader,
            epoch,
        }
    }

    fn voters(&self) -> Vec<VoterStatus> {
        self.member_status(|m| m.voter_ids().collect())
    }

    fn observers(&self) -> Vec<VoterStatus> {
        self.learners()
    }
}

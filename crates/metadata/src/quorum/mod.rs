//! The metadata quorum behind a small trait, so the broker, a one-voter deployment and the
//! simulator drive the same controller and image through the same calls.
//!
//! A proposal is a batch of records that commits atomically or not at all. Every committed
//! batch names its proposer and the proposer's sequence number, so a driver tells its own
//! batches from others' and knows when to send the replies that waited on them (and that a
//! batch it proposed is lost when a later one of a newer epoch commits first).
//!
//! Implementations: [`LocalQuorum`] (one voter, commits on propose) and, in [`raft`], the
//! `openraft`-based quorum.

mod durable;
mod files;
mod local;
mod log;
pub mod raft;

pub use durable::{DurableQuorum, LOG_BATCHES_MAX};
pub use files::FRAME_BYTES_MAX;
use local::LOCAL_EPOCH;
pub use local::LocalQuorum;
pub use log::{BATCHES_RETAINED_MAX, CommittedBatch, CommittedLog};

use crate::records::Record;
use crate::snapshot::Snapshot;

/// A quorum member's id (in combined mode, the broker's node id).
pub type NodeId = u64;

/// Bound on proposals submitted and not yet committed or failed, per node.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 1024;

/// Who leads the quorum, as this node knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderAndEpoch {
    pub leader: Option<NodeId>,
    /// The quorum epoch (Raft term).
    pub epoch: i32,
}

/// A voter and, as seen by the leader, how far its log is behind the leader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoterStatus {
    pub id: NodeId,
    /// Log entries behind the leader; `None` when unknown (this node does not lead).
    pub lag_entries: Option<u64>,
}

/// Why a quorum call did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumError {
    #[error("not the quorum leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    #[error("{PROPOSALS_IN_FLIGHT_MAX} proposals already in flight")]
    TooManyInFlight,
    #[error("offset {from} is before the first retained offset {first}: load the snapshot")]
    Compacted { from: i64, first: i64 },
    #[error("the quorum has shut down")]
    Shutdown,
    #[error("metadata log storage: {0}")]
    Storage(String),
}

/// The metadata log as the rest of the broker sees it.
pub trait MetadataQuorum {
    fn node_id(&self) -> NodeId;

    /// Submit `records` as one batch. Only the leader accepts; the returned sequence number
    /// appears in the [`CommittedBatch`] if it commits.
    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError>;

    /// Committed batches holding offsets at or after `from_offset`, oldest first, at most
    /// `max_batches`. [`QuorumError::Compacted`] when those were folded into a snapshot.
    fn read_committed(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError>;

    /// The image of everything committed, as a snapshot (for readers behind the retained log).
    fn snapshot(&self) -> Snapshot;

    fn leader(&self) -> LeaderAndEpoch;

    /// This node leads and has applied every record committed in earlier epochs: only then
    /// may its controller decide (on a complete image).
    fn is_ready_leader(&self) -> bool;

    fn voters(&self) -> Vec<VoterStatus>;

    /// Nodes that follow the log without voting (Kafka's observers), with their lag as the
    /// leader sees it. A quorum without observers has none.
    fn observers(&self) -> Vec<VoterStatus> {
        Vec::new()
    }
}

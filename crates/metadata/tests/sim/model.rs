//! A model of the Raft quorum for the simulator: it keeps Raft's guarantees (one leader per
//! term, a leader needs a majority to commit, a new leader has every committed batch, a
//! deposed leader's uncommitted batches either survive into the next term or vanish) and
//! exposes each node's possibly stale view of them through `MetadataQuorum`. openraft itself
//! is tested against the real implementation in the crate's unit tests; here the subject is the
//! controller and brokers on top, under failures.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;

use rand::Rng;
use rand::rngs::StdRng;
use streamforge_metadata::Record;
use streamforge_metadata::quorum::{
    CommittedBatch, CommittedLog, LeaderAndEpoch, MetadataQuorum, NodeId, QuorumError, VoterStatus,
};
use streamforge_metadata::snapshot::Snapshot;

/// Steps a leader without a majority keeps its place before the others elect anew.
pub const ELECTION_TIMEOUT_MS: u64 = 1000;

#[derive(Debug)]
struct Pending {
    proposer: NodeId,
    seq: u64,
    term: i32,
    records: Vec<Record>,
    ready_at_ms: u64,
}

#[derive(Debug)]
pub struct Model {
    pub voters: usize,
    pub term: i32,
    pub leader: Option<NodeId>,
    pub alive: Vec<bool>,
    /// Cut links, as (smaller, larger) id pairs.
    pub cut: BTreeSet<(NodeId, NodeId)>,
    log: CommittedLog,
    /// Every committed batch, in order.
    pub history: Vec<CommittedBatch>,
    pending: VecDeque<Pending>,
    /// Per node: how many history batches it has, its known term and leader.
    visible: Vec<usize>,
    node_term: Vec<i32>,
    node_leader: Vec<Option<NodeId>>,
    next_seq: Vec<u64>,
    leader_without_majority_since: Option<u64>,
    pub elections: u64,
    pub dropped: u64,
}

fn ix(id: NodeId) -> usize {
    id as usize - 1
}

impl Model {
    pub fn new(voters: usize) -> Rc<RefCell<Model>> {
        Rc::new(RefCell::new(Model {
            voters,
            term: 0,
            leader: None,
            alive: vec![true; voters],
            cut: BTreeSet::new(),
            log: CommittedLog::default(),
            history: Vec::new(),
            pending: VecDeque::new(),
            visible: vec![0; voters],
            node_term: vec![0; voters],
            node_leader: vec![None; voters],
            next_seq: vec![0; voters],
            leader_without_majority_since: None,
            elections: 0,
            dropped: 0,
        }))
    }

    pub fn ids(&self) -> impl Iterator<Item = NodeId> + use<> {
        1..=self.voters as NodeId
    }

    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        self.alive[ix(a)] && self.alive[ix(b)] && !self.cut.contains(&(a.min(b), a.max(b)))
    }

    fn has_majority(&self, id: NodeId) -> bool {
        self.ids().filter(|&o| self.connected(id, o)).count() * 2 > self.voters
    }

    /// A node restarts: it keeps its durable log (what it had seen) but no leadership.
    pub fn restart(&mut self, id: NodeId) {
        self.alive[ix(id)] = true;
        self.node_leader[ix(id)] = None;
        // A restarted leader comes back as a follower: the others must elect again.
        if self.leader == Some(id) {
            self.leader = None;
        }
    }

    /// One step of the quorum at `now_ms`.
    pub fn step(&mut self, now_ms: u64, rng: &mut StdRng) {
        let leader_ok = self.leader.is_some_and(|l| self.has_majority(l));
        if !leader_ok {
            let since = *self.leader_without_majority_since.get_or_insert(now_ms);
            if self.leader.is_none() || now_ms - since >= ELECTION_TIMEOUT_MS {
                self.elect(rng);
            }
        } else {
            self.leader_without_majority_since = None;
            // Now and then a leader loses an election anyway (a slow heartbeat, a pre-vote).
            if rng.random_ratio(1, 400) {
                self.elect(rng);
            }
        }
        self.commit_ready(now_ms);
        self.propagate(rng);
    }

    fn elect(&mut self, rng: &mut StdRng) {
        let candidates: Vec<NodeId> = self.ids().filter(|&c| self.has_majority(c)).collect();
        if candidates.is_empty() {
            return;
        }
        // The current leader's uncommitted batches: a prefix reached a majority and survives.
        // (A deposed leader's later proposals never do: Raft's log matching keeps every entry
        // after one of term T at term T or later, and only the current term's leader appends.)
        let term = self.term;
        self.pending.retain(|p| p.term == term);
        let survive = rng.random_range(0..=self.pending.len());
        let old: Vec<Pending> = self.pending.drain(..).collect();
        for p in old.into_iter().take(survive) {
            self.commit(p);
        }
        let new = candidates[rng.random_range(0..candidates.len())];
        self.term += 1;
        self.elections += 1;
        self.leader = Some(new);
        self.leader_without_majority_since = None;
        self.node_term[ix(new)] = self.term;
        self.node_leader[ix(new)] = Some(new);
        self.visible[ix(new)] = self.history.len();
    }

    fn commit(&mut self, p: Pending) {
        match self.log.append(p.proposer, p.seq, p.records, p.term) {
            Some(batch) => self.history.push(batch.clone()),
            None => self.dropped += 1,
        }
    }

    fn commit_ready(&mut self, now_ms: u64) {
        let Some(leader) = self.leader else { return };
        // Proposals of a deposed leader's term never commit once a newer term began.
        let term = self.term;
        self.pending.retain(|p| p.term == term);
        if !self.has_majority(leader) {
            return;
        }
        while self
            .pending
            .front()
            .is_some_and(|p| p.ready_at_ms <= now_ms)
        {
            let p = self.pending.pop_front().unwrap_or_else(|| unreachable!());
            self.commit(p);
        }
        self.visible[ix(leader)] = self.history.len();
    }

    /// Nodes that hear from the leader learn its term and catch up (sometimes only partly).
    fn propagate(&mut self, rng: &mut StdRng) {
        let Some(leader) = self.leader else { return };
        for id in self.ids() {
            if id == leader || !self.connected(id, leader) {
                continue;
            }
            self.node_term[ix(id)] = self.term;
            self.node_leader[ix(id)] = Some(leader);
            let have = self.visible[ix(id)];
            let all = self.history.len();
            self.visible[ix(id)] = if rng.random_ratio(3, 4) {
                all
            } else {
                rng.random_range(have..=all)
            };
        }
    }
}

/// One node's window on the model.
#[derive(Debug, Clone)]
pub struct SimQuorum {
    pub id: NodeId,
    pub model: Rc<RefCell<Model>>,
    /// When a proposal made now becomes committable (set by the simulator: network delay).
    pub commit_delay_ms: Rc<RefCell<u64>>,
}

impl MetadataQuorum for SimQuorum {
    fn node_id(&self) -> NodeId {
        self.id
    }

    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError> {
        let mut m = self.model.borrow_mut();
        let i = ix(self.id);
        if m.node_leader[i] != Some(self.id) {
            return Err(QuorumError::NotLeader {
                leader: m.node_leader[i],
            });
        }
        let seq = m.next_seq[i];
        m.next_seq[i] += 1;
        let term = m.node_term[i];
        let ready_at_ms = *self.commit_delay_ms.borrow();
        m.pending.push_back(Pending {
            proposer: self.id,
            seq,
            term,
            records,
            ready_at_ms,
        });
        Ok(seq)
    }

    fn read_committed(&self, from: i64, max: usize) -> Result<Vec<CommittedBatch>, QuorumError> {
        let m = self.model.borrow();
        let visible = &m.history[..m.visible[ix(self.id)]];
        Ok(visible
            .iter()
            .filter(|b| b.last_offset() >= from)
            .take(max)
            .cloned()
            .collect())
    }

    fn snapshot(&self) -> Snapshot {
        self.model.borrow().log.snapshot()
    }

    fn leader(&self) -> LeaderAndEpoch {
        let m = self.model.borrow();
        LeaderAndEpoch {
            leader: m.node_leader[ix(self.id)],
            epoch: m.node_term[ix(self.id)],
        }
    }

    fn is_ready_leader(&self) -> bool {
        let m = self.model.borrow();
        let i = ix(self.id);
        // A deposed leader that has not heard of its successor still believes it is ready.
        m.node_leader[i] == Some(self.id)
            && (m.leader != Some(self.id) || m.visible[i] == m.history.len())
    }

    fn voters(&self) -> Vec<VoterStatus> {
        let m = self.model.borrow();
        m.ids()
            .map(|id| VoterStatus {
                id,
                lag_entries: None,
            })
            .collect()
    }
}

//! One voter: what a single-broker deployment runs. The same trait and the same committed log
//! as a cluster; a proposal commits when it is made, because this voter is the majority.
//! (The log lives in memory; persisting it is part of wiring the quorum into the broker.)

use parking_lot::Mutex;

use super::VoterStatus;
use super::{CommittedBatch, CommittedLog, LeaderAndEpoch, MetadataQuorum, NodeId, QuorumError};
use crate::records::Record;
use crate::snapshot::Snapshot;

/// The epoch of a one-voter quorum: it elects itself once.
pub(super) const LOCAL_EPOCH: i32 = 1;

#[derive(Debug, Default)]
struct State {
    log: CommittedLog,
    next_seq: u64,
}

/// A single-voter quorum.
#[derive(Debug)]
pub struct LocalQuorum {
    node_id: NodeId,
    state: Mutex<State>,
}

impl LocalQuorum {
    pub fn new(node_id: NodeId) -> LocalQuorum {
        LocalQuorum {
            node_id,
            state: Mutex::new(State::default()),
        }
    }
}

impl MetadataQuorum for LocalQuorum {
    fn node_id(&self) -> NodeId {
        self.node_id
    }

    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError> {
        let mut state = self.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.log.append(self.node_id, seq, records, LOCAL_EPOCH);
        Ok(seq)
    }

    fn read_committed(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError> {
        self.state.lock().log.read(from_offset, max_batches)
    }

    fn snapshot(&self) -> Snapshot {
        self.state.lock().log.snapshot()
    }

    fn leader(&self) -> LeaderAndEpoch {
        LeaderAndEpoch {
            leader: Some(self.node_id),
            epoch: LOCAL_EPOCH,
        }
    }

    fn is_ready_leader(&self) -> bool {
        true
    }

    fn voters(&self) -> Vec<VoterStatus> {
        vec![VoterStatus {
            id: self.node_id,
            lag_entries: Some(0),
        }]
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::records::RegisterBroker;

    fn register(id: i32, epoch: i64) -> Record {
        Record::RegisterBroker(RegisterBroker {
            broker_id: id,
            broker_epoch: epoch,
            incarnation_id: Uuid::from_u128(1),
            endpoints: vec![],
            rack: None,
            fenced: true,
        })
    }

    #[test]
    fn one_voter_commits_on_propose_and_reads_from_any_offset() {
        let q = LocalQuorum::new(1);
        assert_eq!(
            q.leader(),
            LeaderAndEpoch {
                leader: Some(1),
                epoch: LOCAL_EPOCH
            }
        );
        q.propose(vec![register(1, 1), register(2, 2)]).unwrap();
        q.propose(vec![register(3, 3)]).unwrap();
        let all = q.read_committed(0, 10).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[1].base.offset, all[1].seq), (2, 1));
        assert_eq!(q.read_committed(2, 10).unwrap().len(), 1);
        assert_eq!(
            q.read_committed(1, 10).unwrap().len(),
            2,
            "offset 1 is inside batch 0"
        );
        assert_eq!(q.snapshot().records.len(), 3);
    }

    #[test]
    fn a_batch_that_does_not_apply_is_dropped_whole() {
        let q = LocalQuorum::new(1);
        q.propose(vec![register(1, 5)]).unwrap();
        // The second record repeats an epoch: the whole batch goes, the first record too.
        q.propose(vec![register(2, 6), register(1, 5)]).unwrap();
        assert_eq!(q.read_committed(0, 10).unwrap().len(), 1);
        assert!(q.snapshot().records.len() == 1);
    }
}

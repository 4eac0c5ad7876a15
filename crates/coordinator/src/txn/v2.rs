//! Transaction version 2 (KIP-890 part 2), as Kafka 4.x serves it to clients that see the
//! `transaction.version` feature at level 2: every EndTxn (v5+) bumps the producer epoch, the
//! markers carry the bumped epoch, and the answer hands it to the producer for its next
//! transaction. A stale producer's late write (a zombie's batch after the markers) then carries
//! an epoch older than the log's and is refused, which closes the hanging-transaction hole.
//!
//! A retried EndTxn is told apart from the next transaction's by its epoch: one below the
//! current epoch is a retry (answered with the current epoch), the current epoch is a new
//! request. Kafka's table (`TransactionCoordinator.endTransaction`), for Empty, CompleteAbort
//! and CompleteCommit (PF = PRODUCER_FENCED, ITS = INVALID_TXN_STATE, EB = epoch bump):
//!
//! | state          | abort retry | abort current | commit retry | commit current |
//! |----------------|-------------|---------------|--------------|----------------|
//! | Empty          | PF          | EB            | PF           | ITS            |
//! | CompleteAbort  | answered    | EB            | PF           | ITS            |
//! | CompleteCommit | ITS         | EB            | answered     | ITS            |
//!
//! A Prepare state (the markers of the last EndTxn on their way: Kafka's pending transition
//! to Complete) answers CONCURRENT_TRANSACTIONS to every EndTxn of the producer id, before the
//! epoch is looked at (KAFKA-18464): a retry of that EndTxn, and the next transaction's EndTxn
//! under the epoch it handed out (an abort with nothing sent yet) both wait for the markers
//! instead of being fenced. Once complete, the table above answers them. A commit at the retry
//! epoch in CompleteAbort can only be the producer's commit overtaken by the coordinator's own
//! abort (a timeout): PRODUCER_FENCED, which clients recover from, as Kafka since KAFKA-20785
//! (it answered the fatal INVALID_TXN_STATE before).

use kafka_protocol::ResponseError;

use super::{TxnCoordinator, TxnEffects, TxnState};

/// `transaction.version` 2: the first level with the per-transaction epoch bump.
pub const TRANSACTION_VERSION_EPOCH_BUMP: i16 = 2;

impl TxnCoordinator {
    /// EndTxn v5+ (transaction version 2). On success the transaction is prepared (or, with no
    /// partitions, completed) under the bumped epoch; the caller answers the id's producer id
    /// and epoch as they are once the effects are applied.
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn_v2(
        &mut self,
        now_ms: i64,
        tid: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
        out: &mut TxnEffects,
    ) -> Result<(), ResponseError> {
        let m = self
            .txns
            .get(tid)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let retry_on_bump =
            m.producer_id == pid && i32::from(m.producer_epoch) == i32::from(epoch) + 1;
        let retry_on_overflow =
            m.previous_producer_id == pid && epoch == i16::MAX - 1 && m.producer_epoch == 0;
        if m.producer_id != pid && !retry_on_overflow {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        // Markers in flight (Kafka's pending Complete transition) come before the epoch check.
        if m.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let current = epoch == m.producer_epoch && m.producer_id == pid;
        let valid = match m.state {
            TxnState::Ongoing | TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => {
                current
            }
            // Answered CONCURRENT_TRANSACTIONS above; Kafka's rule, for the record.
            TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                retry_on_bump || retry_on_overflow || current
            }
        };
        if !valid {
            return Err(ResponseError::ProducerFenced);
        }
        let retry = retry_on_bump || retry_on_overflow;
        match (m.state, commit) {
            (TxnState::Ongoing, _) => {}
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if retry => {
                return Ok(());
            }
            (TxnState::CompleteAbort, true) if retry => return Err(ResponseError::ProducerFenced),
            // Aborting with nothing open still bumps the epoch (the client asked for a fresh
            // one); no partition gets a marker.
            (TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty, false)
                if !retry => {}
            _ => return Err(ResponseError::InvalidTxnState),
        }
        self.bump_for_completion(tid, new_producer_id)?;
        let m = self.txns.get_mut(tid).expect("checked");
        m.client_transaction_version = TRANSACTION_VERSION_EPOCH_BUMP;
        if m.state != TxnState::Ongoing {
            m.partitions.clear();
        }
        self.prepare(tid, commit, now_ms, out);
        Ok(())
    }

    /// Epoch + 1 for the markers; when that exhausts the epoch, a new producer id is taken now
    /// and becomes the producer's once the markers are written (Kafka's `nextProducerId`).
    fn bump_for_completion(
        &mut self,
        tid: &str,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
    ) -> Result<(), ResponseError> {
        let exhausted = self.txns[tid].producer_epoch >= i16::MAX - 1;
        let next = if exhausted {
            new_producer_id().ok_or(ResponseError::CoordinatorNotAvailable)?
        } else {
            -1
        };
        let m = self.txns.get_mut(tid).expect("known id");
        m.last_producer_epoch = m.producer_epoch;
        m.producer_epoch = m.producer_epoch.saturating_add(1);
        m.next_producer_id = next;
        Ok(())
    }
}

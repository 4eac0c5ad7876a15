//! The log's side of transactions (KIP-98): markers appended for the coordinator, the last
//! stable offset, and the aborted-transaction index a read_committed Fetch returns.

use std::collections::BTreeMap;

use streamforge_protocol::batch::{RecordBatch, RecordBatchMut};
use streamforge_protocol::control::{ControlType, build_marker};

use super::{Log, batch_error};
use crate::producer_state::CompletedTxn;
use crate::txn_index::{self, AbortedTxn};
use crate::txn_verification::VerificationGuard;
use crate::{AppendInfo, LogError};

/// A COMMIT or ABORT marker for one producer (one partition of a WriteTxnMarkers request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub kind: ControlType,
}

impl Log {
    /// Append a transaction marker as leader. A marker from an epoch older than the producer's
    /// last is refused (INVALID_PRODUCER_EPOCH), as Kafka fences a zombie coordinator's write.
    pub fn append_txn_marker(
        &mut self,
        marker: TxnMarker,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut batch = build_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.kind,
            now_ms,
        );
        self.check_producers(&batch, 1)?;
        // Kafka: a marker from an older coordinator than the last one applied for the
        // producer is TRANSACTION_COORDINATOR_FENCED (a zombie coordinator after failover).
        if let Some(entry) = self.producers.get(marker.producer_id)
            && marker.coordinator_epoch < entry.coordinator_epoch
        {
            return Err(LogError::CoordinatorFenced {
                marker: marker.coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        let first_offset = self.next_offset;
        {
            let mut view = RecordBatchMut::parse(&mut batch).map_err(batch_error)?;
            view.set_base_offset(first_offset);
            view.set_partition_leader_epoch(leader_epoch);
        }
        debug_assert!(RecordBatch::parse(&batch).is_ok_and(|b| b.is_control()));
        self.append_assigned(
            &batch,
            first_offset,
            first_offset + 1,
            1,
            leader_epoch,
            now_ms,
        )?;
        debug_assert!(
            !self
                .producers
                .ongoing()
                .any(|(_, pid)| pid == marker.producer_id),
            "a marker ends the producer's open transaction"
        );
        Ok(AppendInfo {
            first_offset,
            last_offset: first_offset,
            max_timestamp: now_ms,
            log_append_time_ms: -1,
            log_start_offset: self.log_start_offset,
            record_count: 1,
            duplicate: false,
            leader_epoch,
        })
    }

    /// The first offset of the oldest open transaction, if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producers.first_unstable_offset()
    }

    /// The last stable offset: read_committed consumers read below it. The high watermark,
    /// or the first offset of the oldest open transaction when that is lower.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark;
        self.first_unstable_offset()
            .map_or(hw, |first| first.min(hw))
            .max(self.log_start_offset)
    }

    /// Whether `producer_id` has an open transaction in this log (a transactional batch since
    /// its last marker) under `epoch`: under transaction version 2 each transaction has its own
    /// epoch, so an older one still open here (its marker not yet written) is not this one.
    pub fn has_open_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.get(producer_id).is_some_and(|e| {
            e.current_txn_first_offset != crate::producer_state::NO_TXN && e.epoch == epoch
        })
    }

    /// Before a producer's first transactional batch here is checked with its transaction
    /// coordinator (Kafka's `maybeStartTransactionVerification`): the guard the append must
    /// carry afterwards, or `None` when the producer's transaction is already open here under
    /// `epoch` (nothing to check). `epoch_bump`: a transaction version 2 producer.
    pub fn start_txn_verification(
        &mut self,
        producer_id: i64,
        epoch: i16,
        epoch_bump: bool,
        now_ms: i64,
    ) -> Option<VerificationGuard> {
        if self.has_open_transaction(producer_id, epoch) {
            return None;
        }
        Some(
            self.txn_verifications
                .start(producer_id, epoch, epoch_bump, now_ms),
        )
    }

    /// Whether a transactional batch of `producer_id` at `epoch` with `sequences` (first,
    /// last), checked with the coordinator under `guard`, may be appended now: its
    /// transaction is open here, or the guard is still the producer's (no transactional batch
    /// of the producer, marker or data, was appended since the guard was taken). Passed on to
    /// the append's own checks, which Kafka makes first: a retry of a batch already in the log
    /// (answered as a duplicate) and a stale epoch (INVALID_PRODUCER_EPOCH).
    pub fn txn_verified(
        &self,
        producer_id: i64,
        epoch: i16,
        sequences: Option<(i32, i32)>,
        guard: Option<VerificationGuard>,
    ) -> bool {
        if self.has_open_transaction(producer_id, epoch) {
            return true;
        }
        let duplicate = sequences.is_some_and(|(first, last)| {
            self.producers
                .get(producer_id)
                .is_some_and(|e| e.find_duplicate(epoch, first, last).is_some())
        });
        if duplicate {
            return true;
        }
        if self
            .producers
            .get(producer_id)
            .is_some_and(|e| epoch < e.epoch)
        {
            return true;
        }
        guard.is_some_and(|g| self.txn_verifications.holds(producer_id, g))
    }

    /// Open transactions as (first offset, producer id), oldest first.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.producers.ongoing().collect()
    }

    /// The aborted transactions a read_committed Fetch of `[start, upper)` must report.
    pub fn aborted_transactions(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted.overlapping(start, upper)
    }

    /// Index a transaction an appended marker ended (aborts only: committed records need no
    /// entry). The marker is in the active segment.
    pub(super) fn index_completed_txn(&mut self, done: CompletedTxn) -> Result<(), LogError> {
        if done.kind != ControlType::Abort {
            return Ok(());
        }
        let entry = AbortedTxn {
            producer_id: done.producer_id,
            first_offset: done.first_offset,
            last_offset: done.last_offset,
            last_stable_offset: self.first_unstable_offset().unwrap_or(done.last_offset + 1),
        };
        let base = self.active().base_offset();
        debug_assert!(
            done.last_offset >= base,
            "the marker is in the active segment"
        );
        self.aborted.push(entry);
        txn_index::append(&self.dir, base, &entry)?;
        Ok(())
    }

    /// After a replay of the batches from `from`: the entries of the `.txnindex` files below
    /// `from`, plus the aborts the replay met (`replayed`: transaction and the LSO after it).
    /// Files of the replayed segments are rewritten where they disagree with the log.
    pub(super) fn rebuild_aborted_index(
        &mut self,
        from: i64,
        replayed: &[(CompletedTxn, i64)],
    ) -> Result<(), LogError> {
        let mut on_disk: BTreeMap<i64, Vec<AbortedTxn>> = BTreeMap::new();
        for &base in self.segments.keys() {
            let entries = txn_index::read(&self.dir, base).unwrap_or_else(|e| {
                tracing::warn!(dir = %self.dir.display(), segment = base, error = %e,
                    "damaged transaction index: its entries below the replayed range are lost");
                Vec::new()
            });
            on_disk.insert(base, entries);
        }
        let mut wanted: BTreeMap<i64, Vec<AbortedTxn>> = BTreeMap::new();
        let mut add = |segments: &BTreeMap<i64, _>, e: AbortedTxn| {
            if let Some((&base, _)) = segments.range(..=e.last_offset).next_back() {
                wanted.entry(base).or_default().push(e);
            }
        };
        for e in on_disk.values().flatten() {
            if e.last_offset < from && e.last_offset < self.next_offset {
                add(&self.segments, *e);
            }
        }
        for (done, lso) in replayed {
            if done.kind == ControlType::Abort {
                add(
                    &self.segments,
                    AbortedTxn {
                        producer_id: done.producer_id,
                        first_offset: done.first_offset,
                        last_offset: done.last_offset,
                        last_stable_offset: *lso,
                    },
                );
            }
        }
        self.aborted.clear();
        for (&base, disk) in &on_disk {
            let mut want = wanted.remove(&base).unwrap_or_default();
            want.sort_by_key(|e| e.last_offset);
            want.dedup_by_key(|e| e.last_offset);
            if &want != disk {
                tracing::debug!(dir = %self.dir.display(), segment = base, entries = want.len(), "rewriting transaction index");
                txn_index::rewrite(&self.dir, base, &want)?;
            }
            for e in want {
                self.aborted.push(e);
            }
        }
        Ok(())
    }
}

//! Transactional offset commits as Kafka's group coordinator stores them (KIP-98, KIP-447):
//! a TxnOffsetCommit's offsets are appended to the group's `__consumer_offsets` partition as
//! one transactional batch of the producer (its id and epoch), acks=all, and held pending per
//! (group, producer id) in the group coordinator; the producer's COMMIT or ABORT marker on
//! that partition, appended under the same lock, commits or drops them. A load replays the
//! transactional records with the markers it meets (`group_load.rs`), so what is pending at
//! the end stays pending across a restart or a leadership move. The partition's producer
//! state refuses a batch of an epoch older than the producer's last one there (a timeout's
//! abort or a fencing bumps it): a stale producer's offsets are never held.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use streamforge_coordinator::records::encode_txn_batch;
use streamforge_coordinator::{GroupCoordinator, TxnOffset};
use streamforge_log::{AppendInfo, LogError, TxnMarker, VerificationGuard};
use streamforge_protocol::control::ControlType;

use crate::coordinator_load::{Load, append_error};
use crate::group_service::GroupService;
use crate::partition::{Acks, AppendParams, Partition, PartitionError};
use crate::util::now_ms;

/// (group, producer id) sets of pending transactional offsets a TxnOffsetCommit may add to
/// (a named bound; a load takes what its log holds). Past it the commit is answered
/// COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
const PENDING_TXN_SETS_MAX: usize = 100_000;

/// What a failed transactional offsets append answers (Kafka's group coordinator: a stale
/// producer epoch passes through, the rest as its other appends).
fn txn_append_error(e: &PartitionError) -> i16 {
    match e {
        PartitionError::Log(LogError::InvalidProducerEpoch(_)) => {
            ResponseError::InvalidProducerEpoch.code()
        }
        // A marker of the producer landed since its transaction was checked (Kafka's
        // verification guard): "Record was not part of an ongoing transaction".
        PartitionError::TxnNotVerified => ResponseError::InvalidTxnState.code(),
        PartitionError::NotEnoughReplicas { .. } => ResponseError::CoordinatorNotAvailable.code(),
        e => append_error(e).code(),
    }
}

impl GroupService {
    /// TxnOffsetCommit of `producer` (id, epoch) for `group_id`: `check` (the group's KIP-447
    /// check) runs under the coordinator's lock, then the offsets are appended as the
    /// producer's transactional batch and held, before that lock is let go: a rebalance comes
    /// either before the check (the zombie is refused) or after the hold (the new member's
    /// `require_stable` OffsetFetch finds them pending). The caller waits for the ISR
    /// ([`GroupService::wait_replicated`]) before it answers.
    ///
    /// `guard` is the verification guard taken on the group's partition before the producer's
    /// transaction was checked ([`Self::start_txn_offsets_verification`]): a marker of the
    /// producer appended since refuses the batch (INVALID_TXN_STATE), as Kafka's group
    /// coordinator appends TxnOffsetCommit's offsets under the guard.
    pub fn txn_offset_commit(
        &self,
        group_id: &str,
        producer: (i64, i16),
        guard: Option<VerificationGuard>,
        offsets: Vec<TxnOffset>,
        check: impl FnOnce(&GroupCoordinator) -> Result<(), i16>,
    ) -> Result<(), i16> {
        let mut inner = self.inner.lock();
        let index = inner.coordinator.partition_for(group_id) as usize;
        match inner.loads.get(index) {
            Some(load) => load.serving().map_err(|e| e.code())?,
            None => return Err(ResponseError::NotCoordinator.code()),
        }
        check(&inner.coordinator)?;
        if offsets.is_empty() {
            return Ok(());
        }
        if inner
            .coordinator
            .txn_pending_full(group_id, producer.0, PENDING_TXN_SETS_MAX)
        {
            tracing::warn!(
                limit = PENDING_TXN_SETS_MAX,
                "too many transactions hold offsets"
            );
            return Err(ResponseError::CoordinatorLoadInProgress.code());
        }
        let partition = match inner.loads[index].appendable() {
            Ok(p) => p.clone(),
            Err(e) => return Err(e.code()),
        };
        let now = now_ms();
        let records = inner
            .coordinator
            .txn_offset_records(now, group_id, &offsets);
        let mut batch = encode_txn_batch(&records, now, producer)
            .map_err(|_| ResponseError::UnknownServerError.code())?;
        let bytes = batch.len() as u64;
        partition
            .append_verified(&mut batch, AppendParams { acks: Acks::All }, producer, guard)
            .map_err(|e| {
                tracing::info!(group = group_id, producer_id = producer.0, producer_epoch = producer.1, error = %e, "transactional offsets not appended");
                txn_append_error(&e)
            })?;
        inner.appended_since_snapshot_bytes[index] += bytes;
        inner
            .coordinator
            .hold_txn_offsets(group_id, producer, offsets);
        Ok(())
    }

    /// Before a TxnOffsetCommit's transaction check (KIP-890): the verification guard of the
    /// producer on `group_id`'s partition, which its offsets' append carries (`None` when the
    /// producer's transaction is open there already). `epoch_bump`: transaction version 2
    /// (TxnOffsetCommit v5+).
    pub fn start_txn_offsets_verification(
        &self,
        group_id: &str,
        producer: (i64, i16),
        epoch_bump: bool,
    ) -> Result<Option<VerificationGuard>, i16> {
        let inner = self.inner.lock();
        let index = inner.coordinator.partition_for(group_id) as usize;
        let load = inner
            .loads
            .get(index)
            .ok_or(ResponseError::NotCoordinator.code())?;
        let partition = load.appendable().map_err(|e| e.code())?;
        partition
            .start_txn_verification(producer.0, producer.1, epoch_bump)
            .map_err(|e| txn_append_error(&e))
    }

    /// A transaction marker for `__consumer_offsets` partition `partition` (led here): appended
    /// under the coordinator's lock, then the producer's pending offsets of the groups stored
    /// there are committed or dropped (when the partition is loaded; one still loading meets
    /// the marker in its replay). The caller waits for the marker's ISR before it answers.
    pub(crate) fn write_txn_marker(
        &self,
        partition: &Arc<Partition>,
        marker: TxnMarker,
    ) -> Result<AppendInfo, PartitionError> {
        let mut inner = self.inner.lock();
        let info = partition.write_txn_marker(marker)?;
        let index = partition.index;
        let loaded = matches!(
            inner.loads.get(index as usize),
            Some(Load::Loaded { partition: p, .. }) if Arc::ptr_eq(p, partition)
        );
        if loaded {
            let commit = marker.kind == ControlType::Commit;
            let groups =
                inner
                    .coordinator
                    .complete_txn(now_ms(), index, marker.producer_id, commit);
            if !groups.is_empty() {
                tracing::debug!(
                    partition = index,
                    producer_id = marker.producer_id,
                    commit,
                    ?groups,
                    "transactional offsets completed"
                );
            }
        }
        Ok(info)
    }

    /// The partitions of `group_id` with transactional offsets pending here.
    pub fn pending_txn_partitions(
        &self,
        group_id: &str,
    ) -> std::collections::BTreeSet<(String, i32)> {
        self.inner
            .lock()
            .coordinator
            .pending_txn_partitions(group_id)
    }
}

#[cfg(test)]
#[path = "group_txn_tests.rs"]
mod tests;

//! The transaction coordinator follows the leadership of `__transaction_state` partitions
//! (Kafka's `TransactionCoordinator.onElection` / `onResignation`): a partition newly led
//! here is replayed into an empty coordinator off the request path and its transactional ids
//! (with their pending TxnOffsetCommit offsets) are then taken in one step; a partition led
//! here no more drops them, and with them their transaction timers.

use std::collections::{BTreeSet, HashMap};

use streamforge_coordinator::records::OffsetsRecord;
use streamforge_coordinator::txn::{TRANSACTION_STATE_TOPIC, TxnCoordinator};

use crate::coordinator_load::{self, Led, Load, LoadJob, OnDamaged, follow, still_loading};
use crate::partition::Partition;
use crate::txn_service::{Inner, PendingOffsets, TxnService, TxnServiceError};

impl TxnService {
    /// Brings the loaded partitions in line with `led`: unloads at once, returns the
    /// partitions to load (already answering COORDINATOR_LOAD_IN_PROGRESS).
    pub(crate) fn follow_leadership(&self, led: &[Led]) -> Vec<LoadJob> {
        let mut inner = self.inner.lock();
        self.follow_inner(&mut inner, led)
    }

    pub(crate) fn follow_inner(&self, inner: &mut Inner, led: &[Led]) -> Vec<LoadJob> {
        let (unload, jobs) = follow(&mut inner.loads, led, TRANSACTION_STATE_TOPIC);
        let unloaded = !unload.is_empty();
        for index in unload {
            unload_partition(inner, index);
        }
        if unloaded {
            // Adds waiting for markers of ids served here no more: NOT_COORDINATOR now.
            self.wake_prepared_waiters();
        }
        // Markers of ids served here no more are the new coordinator's to send.
        let coordinator = &inner.coordinator;
        let loads = &inner.loads;
        self.markers.queue.lock().retain(|tid| {
            let index = coordinator.partition_for(tid) as usize;
            loads.get(index).is_some_and(|l| l.serving().is_ok())
        });
        jobs
    }

    /// Replays one partition (blocking) and, if it is still led here under the same epoch,
    /// takes its transactional ids.
    pub(crate) fn load(&self, job: LoadJob) {
        let empty = self.read(TxnCoordinator::empty_like);
        let Some(loaded) = replay_job(empty, &job) else {
            return;
        };
        let mut inner = self.inner.lock();
        install(&mut inner, job, loaded);
    }

    /// [`Self::load`] under the lock already held (a topic this broker just created).
    pub(crate) fn load_inner(&self, inner: &mut Inner, job: LoadJob) {
        // Not through `self.read`: the lock is held here.
        let empty = inner.coordinator.empty_like();
        if let Some(loaded) = replay_job(empty, &job) {
            install(inner, job, loaded);
        }
    }
}

/// Replays `job`'s partition into `coordinator` (empty).
fn replay_job(
    mut coordinator: TxnCoordinator,
    job: &LoadJob,
) -> Option<(TxnCoordinator, PendingOffsets, usize)> {
    let mut pending = HashMap::new();
    match replay_partition(&mut coordinator, &mut pending, &job.partition) {
        Ok(records) => Some((coordinator, pending, records)),
        Err(e) => {
            tracing::error!(partition = job.index, error = %e, "loading {TRANSACTION_STATE_TOPIC} partition failed");
            None
        }
    }
}

fn install(inner: &mut Inner, job: LoadJob, loaded: (TxnCoordinator, PendingOffsets, usize)) {
    if !still_loading(&inner.loads, &job) {
        tracing::info!(
            partition = job.index,
            "{TRANSACTION_STATE_TOPIC} partition moved while loading: discarded"
        );
        return;
    }
    let (coordinator, pending, records) = loaded;
    let ids = coordinator.all().count();
    let prepared = coordinator.prepared_count();
    inner.coordinator.absorb(coordinator);
    inner.pending_offsets.lock().extend(pending);
    inner.loads[job.index as usize] = Load::Loaded {
        partition: job.partition,
        epoch: job.epoch,
    };
    tracing::info!(
        partition = job.index,
        records,
        transactional_ids = ids,
        prepared,
        "loaded {TRANSACTION_STATE_TOPIC} partition"
    );
}

/// Drops partition `index`'s transactional ids and their pending offsets.
fn unload_partition(inner: &mut Inner, index: i32) {
    let gone = inner.coordinator.unload_partition(index);
    let producers: BTreeSet<i64> = gone.iter().map(|(_, pid)| *pid).collect();
    inner
        .pending_offsets
        .lock()
        .retain(|(_, pid), _| !producers.contains(pid));
    tracing::info!(
        partition = index,
        transactional_ids = gone.len(),
        "unloaded {TRANSACTION_STATE_TOPIC} partition"
    );
}

/// Replays `partition` of `__transaction_state` into `coordinator`, and the pending
/// TxnOffsetCommit offsets it holds into `pending`; damaged data fails the replay.
pub(crate) fn replay_partition(
    coordinator: &mut TxnCoordinator,
    pending: &mut PendingOffsets,
    partition: &Partition,
) -> Result<usize, TxnServiceError> {
    // Which producer's offsets a (transactional id, group) record holds.
    let mut owners: HashMap<(String, String), i64> = HashMap::new();
    let apply = |record: OffsetsRecord| {
        let Some(((tid, group), offsets)) = crate::txn_pending::decode(&record) else {
            return coordinator.replay(&record);
        };
        // Later records win: a tombstone removes (tid, group)'s pending offsets.
        if let Some(pid) = owners.remove(&(tid.clone(), group.clone())) {
            pending.remove(&(group.clone(), pid));
        }
        if let Some((pid, offsets)) = offsets {
            owners.insert((tid, group.clone()), pid);
            let set = pending.entry((group, pid)).or_default();
            for o in offsets {
                set.insert((o.topic.clone(), o.partition), o);
            }
        }
        Ok(())
    };
    coordinator_load::replay_partition(partition, TRANSACTION_STATE_TOPIC, OnDamaged::Fail, apply)
        .map_err(|message| TxnServiceError::Replay {
            partition: partition.index,
            message,
        })
}

#[cfg(test)]
#[path = "txn_load_tests.rs"]
mod tests;

//! The group coordinator follows the leadership of `__consumer_offsets` partitions (Kafka's
//! `GroupCoordinator.onElection` / `onResignation`): a partition newly led here is replayed
//! into an empty coordinator off the request path and its groups are then taken in one step;
//! a partition led here no more drops its groups, and its parked JoinGroup/SyncGroup
//! requests end with NOT_COORDINATOR. See `coordinator_load.rs` for the shared rules.

use kafka_protocol::ResponseError;
use streamforge_coordinator::{GroupCoordinator, OFFSETS_TOPIC};

use crate::coordinator_load::{self, Led, Load, LoadJob, OnDamaged, follow, still_loading};
use crate::group_service::{GroupService, GroupServiceError, Inner};
use crate::partition::Partition;
use crate::util::now_ms;

impl GroupService {
    /// Brings the loaded partitions in line with `led` (one slot per partition, `Some` where
    /// this broker leads it): unloads at once, returns the partitions to load (already
    /// answering COORDINATOR_LOAD_IN_PROGRESS).
    pub(crate) fn follow_leadership(&self, led: &[Led]) -> Vec<LoadJob> {
        let mut inner = self.inner.lock();
        let (unload, jobs) = follow(&mut inner.loads, led, OFFSETS_TOPIC);
        for index in unload {
            unload_partition(&mut inner, index);
        }
        jobs
    }

    /// Replays one partition (blocking: call it off the async workers) and, if it is still
    /// led here under the same epoch, takes its groups.
    pub(crate) fn load(&self, job: crate::coordinator_load::LoadJob) {
        let now = now_ms();
        let mut loaded = self.read(|c| c.empty_like(now));
        let replayed = replay_from(&mut loaded, &job.partition, None, now);
        let (records, reached) = match replayed {
            Ok(replayed) => replayed,
            Err(e) => {
                // Its groups keep answering COORDINATOR_LOAD_IN_PROGRESS; the next
                // leadership change tries again.
                tracing::error!(partition = job.index, error = %e, "loading {OFFSETS_TOPIC} partition failed");
                return;
            }
        };
        loaded.finish_replay(now_ms());
        let mut inner = self.inner.lock();
        if !still_loading(&inner.loads, &job) {
            tracing::info!(
                partition = job.index,
                "{OFFSETS_TOPIC} partition moved while loading: discarded"
            );
            return;
        }
        // What was appended while the replay ran (a transaction marker written meanwhile:
        // every append to a `__consumer_offsets` partition is made under this lock), so no
        // marker falls between the replay and the groups being served.
        if let Err(e) = replay_from(&mut loaded, &job.partition, Some(reached), now_ms()) {
            tracing::error!(partition = job.index, error = %e, "loading the tail of {OFFSETS_TOPIC} partition failed");
            return;
        }
        let groups = loaded.group_count();
        inner.coordinator.absorb(loaded);
        let index = job.index as usize;
        inner.appended_since_snapshot_bytes[index] = job.partition.size_bytes().unwrap_or(0);
        inner.loads[index] = Load::Loaded {
            partition: job.partition,
            epoch: job.epoch,
        };
        tracing::info!(
            partition = job.index,
            records,
            groups,
            "loaded {OFFSETS_TOPIC} partition"
        );
    }
}

/// Drops partition `index`'s groups; their parked requests end with NOT_COORDINATOR.
fn unload_partition(inner: &mut Inner, index: i32) {
    let groups = inner.coordinator.unload_partition(index);
    let parked: Vec<_> = inner
        .waiters
        .iter()
        .filter(|(_, w)| w.partition == index)
        .map(|(token, _)| *token)
        .collect();
    for token in &parked {
        if let Some(waiter) = inner.waiters.remove(token) {
            let _ = waiter.tx.send(Err(ResponseError::NotCoordinator.code()));
        }
    }
    if let Some(bytes) = inner.appended_since_snapshot_bytes.get_mut(index as usize) {
        *bytes = 0;
    }
    tracing::info!(
        partition = index,
        groups = groups.len(),
        parked = parked.len(),
        "unloaded {OFFSETS_TOPIC} partition"
    );
}

/// Replays `partition` of `__consumer_offsets` into `coordinator`; stops at damaged data,
/// keeping what was replayed. Transactional offset records stay pending until their
/// producer's marker (Kafka's loading of `__consumer_offsets`).
pub(crate) fn replay_partition(
    coordinator: &mut GroupCoordinator,
    partition: &Partition,
    now: i64,
) -> Result<usize, GroupServiceError> {
    replay_from(coordinator, partition, None, now).map(|(records, _)| records)
}

/// [`replay_partition`] from offset `from` (the log start when `None`); also returns the
/// offset the replay reached.
pub(crate) fn replay_from(
    coordinator: &mut GroupCoordinator,
    partition: &Partition,
    from: Option<i64>,
    now: i64,
) -> Result<(usize, i64), GroupServiceError> {
    let index = partition.index;
    coordinator_load::replay_items(partition, OFFSETS_TOPIC, OnDamaged::Stop, from, |item| {
        coordinator.replay_item(index, &item, now)
    })
    .map_err(|message| GroupServiceError::Replay {
        partition: partition.index,
        message,
    })
}

#[cfg(test)]
#[path = "group_load_tests.rs"]
mod tests;

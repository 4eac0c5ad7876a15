//! The group and transaction coordinators follow the leadership of their internal topic's
//! partitions, as Kafka's do (`onElection` / `onResignation`): when a delta makes this broker
//! leader of `__consumer_offsets-p` (or `__transaction_state-p`), partition p's state is
//! replayed from its log off the request path, and its keys answer
//! COORDINATOR_LOAD_IN_PROGRESS meanwhile; when the leadership leaves, p's state is dropped and
//! its keys answer NOT_COORDINATOR, so clients look the coordinator up again. Appends go to
//! the partition object loaded under the leader epoch of the load: a new epoch, a stopped or
//! a demoted partition refuses them (NOT_COORDINATOR). See docs/GROUPS.md, docs/TRANSACTIONS.md.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use streamforge_coordinator::OFFSETS_TOPIC;
use streamforge_coordinator::records::{OffsetsRecord, ReplayItem, decode_batches_for_replay};
use streamforge_coordinator::txn::TRANSACTION_STATE_TOPIC;
use tokio::sync::watch;

use crate::BrokerState;
use crate::partition::{FetchIsolation, FetchParams, Partition, PartitionError, PartitionRole};
use crate::replica_manager::ReplicaManager;

/// Longest the follower task waits between two looks at the roles when no delta wakes it
/// (a backstop: a partition that went offline changes its role without a delta).
const FOLLOW_INTERVAL_MS: u64 = 1_000;

/// Bytes read per step while replaying a partition.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// What this broker's coordinator holds of one internal partition.
#[derive(Clone, Default)]
pub(crate) enum Load {
    /// Led elsewhere (or not at all): its keys answer NOT_COORDINATOR.
    #[default]
    NotLed,
    /// Led here since `epoch`; its log is being replayed (COORDINATOR_LOAD_IN_PROGRESS).
    Loading { epoch: i32 },
    /// Led here since `epoch` and loaded: requests are served, appends go to `partition`.
    Loaded {
        partition: Arc<Partition>,
        epoch: i32,
    },
}

impl Load {
    /// Whether requests for a key stored here are served, else the error Kafka answers.
    pub(crate) fn serving(&self) -> Result<(), ResponseError> {
        match self {
            Load::Loaded { .. } => Ok(()),
            Load::Loading { .. } => Err(ResponseError::CoordinatorLoadInProgress),
            Load::NotLed => Err(ResponseError::NotCoordinator),
        }
    }

    /// The partition to append to: loaded, and still led here under the epoch of its load
    /// (Kafka fences stale coordinator writes by the leader epoch).
    pub(crate) fn appendable(&self) -> Result<&Arc<Partition>, ResponseError> {
        match self {
            Load::Loaded { partition, epoch }
                if partition.role() == PartitionRole::Leader
                    && partition.leader_epoch() == *epoch =>
            {
                Ok(partition)
            }
            Load::Loading { .. } => Err(ResponseError::CoordinatorLoadInProgress),
            _ => Err(ResponseError::NotCoordinator),
        }
    }

    fn is_loading(&self) -> bool {
        matches!(self, Load::Loading { .. })
    }
}

/// True while any partition is being loaded (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS
/// with the groups it has, as Kafka).
pub(crate) fn any_loading(loads: &[Load]) -> bool {
    loads.iter().any(Load::is_loading)
}

/// A partition led here, with the leader epoch it is led under.
pub(crate) type Led = Option<(Arc<Partition>, i32)>;

/// One slot per partition of `topic`: `Some` where this broker leads it (online), `None`
/// elsewhere. `None` when the topic does not exist.
pub(crate) fn led_partitions(replicas: &ReplicaManager, topic: &str) -> Option<Vec<Led>> {
    let t = replicas.topic(topic)?;
    Some(
        t.slots()
            .iter()
            .map(|slot| {
                slot.as_ref()
                    .filter(|p| p.offline_reason().is_none() && p.role() == PartitionRole::Leader)
                    .map(|p| (p.clone(), p.leader_epoch()))
            })
            .collect(),
    )
}

/// A partition to replay: led here since `epoch`.
#[derive(Clone)]
pub(crate) struct LoadJob {
    pub index: i32,
    pub partition: Arc<Partition>,
    pub epoch: i32,
}

/// Brings `loads` (of `topic`'s partitions) in line with `led`: returns the partitions to
/// unload (led here no more, or led under a new epoch) and the jobs to load, and marks those
/// `Loading`.
pub(crate) fn follow(loads: &mut Vec<Load>, led: &[Led], topic: &str) -> (Vec<i32>, Vec<LoadJob>) {
    if loads.len() < led.len() {
        loads.resize(led.len(), Load::NotLed);
    }
    let mut unload = Vec::new();
    let mut jobs = Vec::new();
    for (index, load) in loads.iter_mut().enumerate() {
        let now = led.get(index).cloned().flatten();
        let same = match (&*load, &now) {
            (Load::NotLed, None) => true,
            (Load::Loading { epoch }, Some((_, e))) => epoch == e,
            (Load::Loaded { partition, epoch }, Some((p, e))) => {
                epoch == e && Arc::ptr_eq(partition, p)
            }
            _ => false,
        };
        if same {
            continue;
        }
        if !matches!(load, Load::NotLed) {
            unload.push(index as i32);
        }
        *load = match now {
            None => Load::NotLed,
            Some((partition, epoch)) => {
                tracing::info!(
                    partition = index,
                    leader_epoch = epoch,
                    "loading {topic} partition"
                );
                jobs.push(LoadJob {
                    index: index as i32,
                    partition,
                    epoch,
                });
                Load::Loading { epoch }
            }
        };
    }
    (unload, jobs)
}

/// Whether a finished load still counts: the partition is still `Loading` under its epoch
/// (leadership may have left, or come back under a newer epoch, meanwhile).
pub(crate) fn still_loading(loads: &[Load], job: &LoadJob) -> bool {
    matches!(loads.get(job.index as usize), Some(Load::Loading { epoch }) if *epoch == job.epoch)
}

/// What a failed coordinator append answers (Kafka's `GroupMetadataManager` mapping): a
/// partition led here no more is NOT_COORDINATOR, the rest COORDINATOR_NOT_AVAILABLE.
pub(crate) fn append_error(e: &PartitionError) -> ResponseError {
    match e {
        PartitionError::NotLeaderOrFollower
        | PartitionError::Gone
        | PartitionError::Offline(_)
        | PartitionError::FencedLeaderEpoch { .. } => ResponseError::NotCoordinator,
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

/// What a replay does when the log holds a damaged batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnDamaged {
    /// Keep what was replayed and stop there (the other partitions are served).
    Stop,
    /// Fail the replay.
    Fail,
}

/// Replays `partition` of `topic` from its local log start to its log end: `apply` gets each
/// record at or past the log start, in offset order. A record `apply` refuses is skipped
/// loudly rather than blocking start-up. Returns how many records were applied, or why the
/// log could not be read. Markers and the transactional flag are not looked at (see
/// [`replay_items`]).
pub(crate) fn replay_partition<E: std::fmt::Display>(
    partition: &Partition,
    topic: &str,
    on_damaged: OnDamaged,
    mut apply: impl FnMut(OffsetsRecord) -> Result<(), E>,
) -> Result<usize, String> {
    let apply_item = |item: ReplayItem| match item {
        ReplayItem::Record(record) | ReplayItem::Transactional { record, .. } => apply(record),
        ReplayItem::Marker { .. } => Ok(()),
    };
    replay_items(partition, topic, on_damaged, None, apply_item).map(|(count, _)| count)
}

/// Replays `partition` of `topic` from `from` (its local log start when `None`, or when
/// `from` is below it) to its log end, with the batches' transactional records and markers
/// told apart (a `__consumer_offsets` load holds a producer's transactional offsets until
/// its marker). Returns how many entries were applied and the offset the replay reached.
pub(crate) fn replay_items<E: std::fmt::Display>(
    partition: &Partition,
    topic: &str,
    on_damaged: OnDamaged,
    from: Option<i64>,
    mut apply: impl FnMut(ReplayItem) -> Result<(), E>,
) -> Result<(usize, i64), String> {
    let offsets = partition.offsets().map_err(|e| e.to_string())?;
    let start = offsets.local_log_start_offset;
    let (mut offset, end) = (from.unwrap_or(start).max(start), offsets.log_end_offset);
    let mut count = 0usize;
    // Each step advances by at least one batch, so the loop is bounded by the record count.
    while offset < end {
        let params = FetchParams {
            fetch_offset: offset,
            max_bytes: REPLAY_READ_BYTES,
            min_one_message: true,
            isolation: FetchIsolation::LogEnd,
            replica_id: -1,
        };
        let read = partition
            .read_local(params)
            .map_err(|e| e.to_string())?
            .records;
        let read = match read {
            Ok(read) => read,
            Err(e @ PartitionError::Log(streamforge_log::LogError::DamagedBatch { .. }))
                if on_damaged == OnDamaged::Stop =>
            {
                tracing::error!(partition = partition.index, error = %e, "{topic} replay stops at damaged data");
                break;
            }
            Err(e) => return Err(e.to_string()),
        };
        if read.bytes == 0 {
            break;
        }
        let mut next = offset;
        for slice in read.slices {
            let items = decode_batches_for_replay(slice).map_err(|e| e.to_string())?;
            for (record_offset, item) in items {
                next = next.max(record_offset + 1);
                if record_offset < offset {
                    continue; // before the log start, inside the first batch
                }
                match apply(item) {
                    Ok(()) => count += 1,
                    Err(e) => {
                        tracing::warn!(partition = partition.index, offset = record_offset, error = %e, "skipping unreadable {topic} record")
                    }
                }
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok((count, offset))
}

/// Follows the roles until shutdown: woken by every applied delta, and every
/// [`FOLLOW_INTERVAL_MS`]. Loads run one at a time on the blocking pool.
pub async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let mut roles = state.replicas.watch_roles();
    loop {
        roles.borrow_and_update();
        follow_once(&state).await;
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = roles.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(FOLLOW_INTERVAL_MS)) => {}
        }
    }
}

/// One look at the roles: unload at once, then load what is newly led here.
pub(crate) async fn follow_once(state: &Arc<BrokerState>) {
    if let Some(led) = led_partitions(&state.replicas, OFFSETS_TOPIC) {
        for job in state.groups.follow_leadership(&led) {
            let groups = state.groups.clone();
            let loaded = tokio::task::spawn_blocking(move || groups.load(job)).await;
            if let Err(e) = loaded {
                tracing::error!(error = %e, "loading a {OFFSETS_TOPIC} partition failed");
            }
        }
    }
    if let Some(led) = led_partitions(&state.replicas, TRANSACTION_STATE_TOPIC) {
        for job in state.txns.follow_leadership(&led) {
            let txns = state.txns.clone();
            let loaded = tokio::task::spawn_blocking(move || txns.load(job)).await;
            if let Err(e) = loaded {
                tracing::error!(error = %e, "loading a {TRANSACTION_STATE_TOPIC} partition failed");
            }
        }
    }
}

#[cfg(test)]
#[path = "coordinator_load_tests.rs"]
pub(crate) mod tests;

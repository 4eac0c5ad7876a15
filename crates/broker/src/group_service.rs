//! Wiring of the sans-io group coordinator into the broker: one coordinator behind a mutex,
//! parked JoinGroup/SyncGroup requests as oneshot waiters, a timer task that feeds the clock,
//! and the `__consumer_offsets` topic as its durable state (appends, start-up replay and
//! snapshot-and-truncate to keep it bounded; see docs/GROUPS.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use streamforge_coordinator::records::{decode_batches_with_offsets, encode_batch};
use streamforge_coordinator::{
    CoordinatorConfig, Effects, GroupCoordinator, JoinGroupRequest, JoinGroupResponse,
    OFFSETS_TOPIC, OffsetsRecord, Reply, RequestToken, SyncGroupRequest, SyncGroupResponse,
};
/// Parked or unroutable JoinGroup/SyncGroup calls end with this (Kafka's error).
const COORDINATOR_NOT_AVAILABLE: i16 =
    kafka_protocol::ResponseError::CoordinatorNotAvailable.code();
use tokio::sync::{Notify, oneshot, watch};

use crate::partition::{
    Acks, AppendParams, FetchIsolation, FetchParams, Partition, PartitionError,
};
use crate::replica_manager::{ReplicaManager, TopicError};
use crate::util::now_ms;

/// Records per batch written to `__consumer_offsets` (keeps batches far below
/// `max.message.bytes` for snapshots of big groups).
const OFFSETS_BATCH_RECORDS_MAX: usize = 500;
/// Bytes read per step while replaying a partition at start-up.
const REPLAY_READ_BYTES: usize = 1 << 20;
/// Kafka's coordinator writes its records with acks=all: a commit is acknowledged once every
/// in-sync replica has it.
const APPEND_PARAMS: AppendParams = AppendParams { acks: Acks::All };
/// Longest the timer task sleeps when no timer is due (bounds clock skew effects).
const TIMER_IDLE_MS: i64 = 1_000;
/// Extra time a parked request waits beyond its rebalance timeout before giving up (the
/// coordinator always answers within the rebalance timeout; this only guards bugs).
const PARKED_GRACE_MS: u64 = 30_000;
/// Parked JoinGroup/SyncGroup requests across all groups (a named bound).
const PARKED_REQUESTS_MAX: usize = 100_000;

/// Settings of the group coordinator and its internal topic.
#[derive(Debug, Clone)]
pub struct GroupsConfig {
    pub coordinator: CoordinatorConfig,
    /// `offsets.topic.segment.bytes` (Kafka: 100 MiB; smaller here so truncation frees space).
    pub offsets_segment_bytes: u64,
    /// Write a snapshot of a partition's live state and drop everything before it once this
    /// many bytes were appended to it since the last snapshot.
    pub offsets_snapshot_trigger_bytes: u64,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig {
            coordinator: CoordinatorConfig::default(),
            offsets_segment_bytes: 16 << 20,
            offsets_snapshot_trigger_bytes: 32 << 20,
        }
    }
}

struct Inner {
    coordinator: GroupCoordinator,
    waiters: HashMap<RequestToken, oneshot::Sender<Reply>>,
    /// Bytes appended per offsets partition since its last snapshot.
    appended_since_snapshot_bytes: Vec<u64>,
}

/// The broker's group coordinator service.
pub struct GroupService {
    inner: Mutex<Inner>,
    /// One slot per `__consumer_offsets` partition; `None` where another broker hosts it.
    partitions: Vec<Option<Arc<Partition>>>,
    next_token: AtomicU64,
    /// Woken when an event may have moved the next deadline earlier.
    timer_wakeup: Notify,
    config: GroupsConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum GroupServiceError {
    #[error("creating {OFFSETS_TOPIC}: {0}")]
    Topic(#[from] TopicError),
    #[error("replaying {OFFSETS_TOPIC}-{partition}: {message}")]
    Replay { partition: i32, message: String },
}

impl GroupService {
    /// Creates `__consumer_offsets` if needed and rebuilds the groups by replaying it.
    pub fn open(
        replicas: &ReplicaManager,
        config: GroupsConfig,
    ) -> Result<GroupService, GroupServiceError> {
        let wanted = config.coordinator.offsets_topic_partitions.max(1);
        let topic =
            match replicas.topic(OFFSETS_TOPIC) {
                Some(t) => t,
                None => {
                    let mut configs = BTreeMap::new();
                    configs.insert("cleanup.policy".to_string(), "compact".to_string());
                    configs.insert(
                        "segment.bytes".to_string(),
                        config.offsets_segment_bytes.to_string(),
                    );
                    configs.insert("retention.ms".to_string(), "-1".to_string());
                    configs.insert("retention.bytes".to_string(), "-1".to_string());
                    configs.insert("segment.index.bytes".to_string(), (1 << 20).to_string());
                    match replicas.create_topic(OFFSETS_TOPIC, wanted, configs, false) {
                        Ok(Some(t)) => t,
                        Ok(None) | Err(TopicError::AlreadyExists(_)) => replicas
                            .topic(OFFSETS_TOPIC)
                            .ok_or(TopicError::UnknownTopic)?,
                        Err(e) => return Err(e.into()),
                    }
                }
            };
        let mut coordinator_config = config.coordinator.clone();
        // An existing topic keeps its partition count: group placement depends on it.
        coordinator_config.offsets_topic_partitions = topic.partition_count();
        coordinator_config.member_id_seed = rand::random();
        let now = now_ms();
        let mut coordinator = GroupCoordinator::new(coordinator_config, now);
        let mut replayed_records = 0usize;
        for partition in topic.hosted() {
            if let Some(why) = partition.offline_reason() {
                // Its groups answer errors (appends to it fail); the others load.
                tracing::error!(
                    partition = partition.index,
                    error = why,
                    "{OFFSETS_TOPIC} partition offline: its groups are not loaded"
                );
                continue;
            }
            replayed_records += replay_partition(&mut coordinator, partition, now)?;
        }
        coordinator.finish_replay(now_ms());
        tracing::info!(
            partitions = topic.partition_count(),
            hosted = topic.hosted_count(),
            records = replayed_records,
            groups = coordinator.group_count(),
            "replayed {OFFSETS_TOPIC}"
        );
        // What is already in each partition counts towards its next snapshot.
        let appended_since_snapshot_bytes = topic
            .slots()
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.size_bytes().unwrap_or(0)))
            .collect();
        Ok(GroupService {
            inner: Mutex::new(Inner {
                coordinator,
                waiters: HashMap::new(),
                appended_since_snapshot_bytes,
            }),
            partitions: topic.slots().to_vec(),
            next_token: AtomicU64::new(1),
            timer_wakeup: Notify::new(),
            config,
        })
    }

    pub fn offsets_partitions(&self) -> i32 {
        self.partitions.len() as i32
    }

    /// Runs one event against the coordinator and applies its effects.
    pub fn with_coordinator<R>(
        &self,
        f: impl FnOnce(&mut GroupCoordinator, i64, &mut Effects) -> R,
    ) -> R {
        self.with_coordinator_durable(f).0
    }

    /// Like [`Self::with_coordinator`], and also tells whether every record the event produced
    /// reached `__consumer_offsets`: an OffsetCommit must not be acknowledged when it did not.
    pub fn with_coordinator_durable<R>(
        &self,
        f: impl FnOnce(&mut GroupCoordinator, i64, &mut Effects) -> R,
    ) -> (R, bool) {
        let mut inner = self.inner.lock();
        let mut out = Effects::default();
        let result = f(&mut inner.coordinator, now_ms(), &mut out);
        let durable = self.apply(&mut inner, out);
        drop(inner);
        self.timer_wakeup.notify_one();
        (result, durable)
    }

    /// Read-only access (describe, list, fetch offsets).
    pub fn read<R>(&self, f: impl FnOnce(&GroupCoordinator) -> R) -> R {
        f(&self.inner.lock().coordinator)
    }

    /// JoinGroup: waits (asynchronously) until the coordinator answers.
    pub async fn join(&self, request: JoinGroupRequest) -> JoinGroupResponse {
        let member_id = request.member_id.clone();
        let wait_ms = request
            .rebalance_timeout_ms
            .max(request.session_timeout_ms)
            .max(0) as u64
            + self
                .config
                .coordinator
                .group_initial_rebalance_delay_ms
                .max(0) as u64
            + PARKED_GRACE_MS;
        let reply = self
            .park(wait_ms, |c, now, token, out| {
                c.join_group(now, token, request, out)
            })
            .await;
        match reply {
            Some(Reply::Join(r)) => r,
            _ => JoinGroupResponse::error(&member_id, COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// How long a SyncGroup of `group_id` may be parked: the group's rebalance timeout.
    pub fn sync_wait_ms(&self, group_id: &str) -> u64 {
        self.read(|c| c.group_rebalance_timeout_ms(group_id))
            .unwrap_or(0)
            .max(0) as u64
    }

    /// SyncGroup: waits until the leader's assignment arrives (or the rebalance fails).
    pub async fn sync(&self, request: SyncGroupRequest, wait_ms: u64) -> SyncGroupResponse {
        let reply = self
            .park(wait_ms + PARKED_GRACE_MS, |c, now, token, out| {
                c.sync_group(now, token, request, out)
            })
            .await;
        match reply {
            Some(Reply::Sync(r)) => r,
            _ => SyncGroupResponse::error(COORDINATOR_NOT_AVAILABLE),
        }
    }

    async fn park(
        &self,
        wait_ms: u64,
        f: impl FnOnce(&mut GroupCoordinator, i64, RequestToken, &mut Effects),
    ) -> Option<Reply> {
        let token = RequestToken(self.next_token.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        {
            let mut inner = self.inner.lock();
            if inner.waiters.len() >= PARKED_REQUESTS_MAX {
                tracing::warn!(
                    limit = PARKED_REQUESTS_MAX,
                    "too many parked group requests"
                );
                return None;
            }
            inner.waiters.insert(token, tx);
            let mut out = Effects::default();
            f(&mut inner.coordinator, now_ms(), token, &mut out);
            self.apply(&mut inner, out);
        }
        self.timer_wakeup.notify_one();
        match tokio::time::timeout(Duration::from_millis(wait_ms), rx).await {
            Ok(Ok(reply)) => Some(reply),
            _ => {
                tracing::error!(token = token.0, "parked group request was never answered");
                self.inner.lock().waiters.remove(&token);
                None
            }
        }
    }

    /// Appends records first (nothing is acknowledged before it is in the log), then answers
    /// parked requests.
    /// Returns false if any append failed.
    fn apply(&self, inner: &mut Inner, out: Effects) -> bool {
        let mut durable = true;
        for append in out.appends {
            let index = append.partition as usize;
            let Some(partition) = self.partitions.get(index).and_then(Option::as_ref) else {
                tracing::error!(
                    partition = append.partition,
                    "offsets partition not hosted here"
                );
                durable = false;
                continue;
            };
            match append_records(partition, &append.records) {
                Ok(bytes) => inner.appended_since_snapshot_bytes[index] += bytes,
                Err(e) => {
                    durable = false;
                    tracing::error!(partition = append.partition, error = %e, "appending to {OFFSETS_TOPIC} failed")
                }
            }
        }
        for (token, reply) in out.replies {
            if let Some(tx) = inner.waiters.remove(&token) {
                // The requester may have gone away; nothing to do then.
                let _ = tx.send(reply);
            }
        }
        durable
    }

    /// Fires due timers, then snapshots partitions that grew past the trigger.
    fn tick(&self) -> i64 {
        let mut inner = self.inner.lock();
        let now = now_ms();
        let mut out = Effects::default();
        inner.coordinator.tick(now, &mut out);
        self.apply(&mut inner, out);
        let trigger = self.config.offsets_snapshot_trigger_bytes;
        for index in 0..self.partitions.len() {
            if inner.appended_since_snapshot_bytes[index] >= trigger {
                self.snapshot_and_truncate(&mut inner, index, now);
            }
        }
        inner.coordinator.next_deadline_ms()
    }

    /// Writes the live state of one partition and moves its log start past everything
    /// older, so whole superseded segments are deleted.
    fn snapshot_and_truncate(&self, inner: &mut Inner, index: usize, now: i64) {
        let Some(partition) = &self.partitions[index] else {
            return;
        };
        let records = inner.coordinator.snapshot_records(index as i32, now);
        let start = match partition.offsets() {
            Ok(offsets) => offsets.log_end_offset,
            Err(e) => {
                tracing::error!(partition = index, error = %e, "snapshot: partition gone");
                return;
            }
        };
        if let Err(e) = append_records(partition, &records) {
            tracing::error!(partition = index, error = %e, "snapshot append failed");
            return;
        }
        match partition.delete_local_records_before(start) {
            Ok(log_start) => {
                inner.appended_since_snapshot_bytes[index] = 0;
                tracing::info!(
                    partition = index,
                    live_records = records.len(),
                    log_start,
                    "snapshotted {OFFSETS_TOPIC} partition and dropped superseded records"
                );
            }
            Err(e) => tracing::error!(partition = index, error = %e, "snapshot truncate failed"),
        }
    }

    /// Test and tooling hook: snapshot every partition now.
    pub fn snapshot_all(&self) {
        let mut inner = self.inner.lock();
        let now = now_ms();
        for index in 0..self.partitions.len() {
            self.snapshot_and_truncate(&mut inner, index, now);
        }
    }
}

/// The timer task: feeds the coordinator's clock until shutdown.
pub async fn run_timer(service: Arc<GroupService>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let next_deadline_ms = service.tick();
        let sleep_ms = (next_deadline_ms - now_ms()).clamp(1, TIMER_IDLE_MS) as u64;
        tokio::select! {
            _ = shutdown.changed() => {
                // Parked JoinGroup/SyncGroup requests end now (COORDINATOR_NOT_AVAILABLE)
                // instead of holding up the shutdown until their rebalance timeout.
                service.inner.lock().waiters.clear();
                return;
            }
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            _ = service.timer_wakeup.notified() => {}
        }
    }
}

fn append_records(partition: &Partition, records: &[OffsetsRecord]) -> Result<u64, String> {
    let mut bytes = 0u64;
    for chunk in records.chunks(OFFSETS_BATCH_RECORDS_MAX) {
        let mut batch = encode_batch(chunk, now_ms()).map_err(|e| e.to_string())?;
        bytes += batch.len() as u64;
        partition
            .append(&mut batch, APPEND_PARAMS)
            .map_err(|e| e.to_string())?;
    }
    Ok(bytes)
}

fn replay_partition(
    coordinator: &mut GroupCoordinator,
    partition: &Partition,
    now: i64,
) -> Result<usize, GroupServiceError> {
    let error = |message: String| GroupServiceError::Replay {
        partition: partition.index,
        message,
    };
    let offsets = partition.offsets().map_err(|e| error(e.to_string()))?;
    let (start, end) = (offsets.local_log_start_offset, offsets.log_end_offset);
    let mut offset = start;
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
            .map_err(|e| error(e.to_string()))?
            .records;
        let read = match read {
            Ok(read) => read,
            Err(e @ PartitionError::Log(streamforge_log::LogError::DamagedBatch { .. })) => {
                // Damaged data on disk: keep what was replayed, serve the other partitions.
                tracing::error!(partition = partition.index, error = %e, "{OFFSETS_TOPIC} replay stops at damaged data");
                break;
            }
            Err(e) => return Err(error(e.to_string())),
        };
        if read.bytes == 0 {
            break;
        }
        let mut next = offset;
        for slice in read.slices {
            let records = decode_batches_with_offsets(slice).map_err(|e| error(e.to_string()))?;
            for (record_offset, record) in records {
                next = next.max(record_offset + 1);
                if record_offset < offset {
                    continue; // before the log start, inside the first batch
                }
                match coordinator.replay(&record, now) {
                    Ok(()) => count += 1,
                    // A record we cannot read is skipped loudly rather than blocking start-up.
                    Err(e) => {
                        tracing::warn!(partition = partition.index, offset = record_offset, error = %e, "skipping unreadable {OFFSETS_TOPIC} record")
                    }
                }
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(count)
}

//! Wiring of the sans-io group coordinator into the broker: one coordinator behind a mutex,
//! parked JoinGroup/SyncGroup requests as oneshot waiters, a timer task that feeds the clock,
//! and the `__consumer_offsets` topic as its durable state (appends, start-up replay and
//! snapshot-and-truncate to keep it bounded; see docs/GROUPS.md). Only the partitions this
//! broker leads are loaded (`group_load.rs` follows leadership); a group of another
//! partition answers NOT_COORDINATOR.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use streamforge_coordinator::records::encode_batch;
use streamforge_coordinator::{
    CoordinatorConfig, Effects, GroupCoordinator, JoinGroupRequest, JoinGroupResponse,
    OFFSETS_TOPIC, OffsetsRecord, Reply, RequestToken, SyncGroupRequest, SyncGroupResponse,
};
/// Parked or unroutable JoinGroup/SyncGroup calls end with this (Kafka's error).
const COORDINATOR_NOT_AVAILABLE: i16 =
    kafka_protocol::ResponseError::CoordinatorNotAvailable.code();
use tokio::sync::{Notify, oneshot, watch};

use crate::coordinator_load::{Load, append_error, led_partitions};
use crate::partition::{Acks, AppendParams, Partition};
use crate::replica_manager::{ReplicaManager, TopicError};
use crate::util::now_ms;

/// Kafka's `offsets.commit.timeout.ms`: how long an offset commit waits for its ISR.
pub const OFFSET_COMMIT_TIMEOUT_MS: u64 = 5_000;

/// Records per batch written to `__consumer_offsets` (keeps batches far below
/// `max.message.bytes` for snapshots of big groups).
const OFFSETS_BATCH_RECORDS_MAX: usize = 500;
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

/// A parked JoinGroup/SyncGroup: the offsets partition of its group, and where its answer
/// goes (an error code when the partition is unloaded first).
pub(crate) struct Waiter {
    pub partition: i32,
    pub tx: oneshot::Sender<Result<Reply, i16>>,
}

pub(crate) struct Inner {
    pub coordinator: GroupCoordinator,
    pub waiters: HashMap<RequestToken, Waiter>,
    /// Bytes appended per offsets partition since its last snapshot.
    pub appended_since_snapshot_bytes: Vec<u64>,
    /// What is loaded of each `__consumer_offsets` partition.
    pub loads: Vec<Load>,
}

impl Inner {
    /// Whether `group_id`'s partition is served here, else the error code to answer.
    fn serving(&self, group_id: &str) -> Result<(), i16> {
        let index = self.coordinator.partition_for(group_id) as usize;
        let load = self.loads.get(index).unwrap_or(&Load::NotLed);
        load.serving().map_err(|e| e.code())
    }
}

/// The broker's group coordinator service.
pub struct GroupService {
    pub(crate) inner: Mutex<Inner>,
    /// Partitions of `__consumer_offsets` (fixed: group placement depends on it).
    partition_count: i32,
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

/// A group request's outcome when its group is served here; the error code otherwise
/// (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
pub type Routed<R> = Result<R, i16>;

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
            }
        }
        // The partitions led here load now, before the listener opens; the others (and
        // the ones that become led here later) follow leadership (`group_load.rs`).
        let led = led_partitions(replicas, OFFSETS_TOPIC).unwrap_or_default();
        let mut loads = vec![Load::NotLed; topic.partition_count().max(0) as usize];
        for (index, (partition, epoch)) in led
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((i, l.clone()?)))
        {
            replayed_records +=
                crate::group_load::replay_partition(&mut coordinator, &partition, now)?;
            loads[index] = Load::Loaded { partition, epoch };
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
                loads,
            }),
            partition_count: topic.partition_count(),
            next_token: AtomicU64::new(1),
            timer_wakeup: Notify::new(),
            config,
        })
    }

    pub fn offsets_partitions(&self) -> i32 {
        self.partition_count
    }

    /// Runs one event for `group_id` if its partition is served here (checked under the
    /// same lock, so no unload comes between); the second result is the append's outcome.
    pub fn with_group<R>(
        &self,
        group_id: &str,
        f: impl FnOnce(&mut GroupCoordinator, i64, &mut Effects) -> R,
    ) -> Routed<(R, Result<(), i16>)> {
        let mut inner = self.inner.lock();
        inner.serving(group_id)?;
        let mut out = Effects::default();
        let result = f(&mut inner.coordinator, now_ms(), &mut out);
        let stored = self.apply(&mut inner, out);
        drop(inner);
        self.timer_wakeup.notify_one();
        Ok((result, stored))
    }

    /// Read-only access to a group served here.
    pub fn read_group<R>(
        &self,
        group_id: &str,
        f: impl FnOnce(&GroupCoordinator) -> R,
    ) -> Routed<R> {
        let inner = self.inner.lock();
        inner.serving(group_id)?;
        Ok(f(&inner.coordinator))
    }

    /// Wait until what `group_id`'s coordinator appended so far is on every ISR member of its
    /// `__consumer_offsets` partition (Kafka writes offset commits with acks=all), at most
    /// `timeout`. A lone leader answers at once. Errors as Kafka's coordinator maps them:
    /// REQUEST_TIMED_OUT, COORDINATOR_NOT_AVAILABLE when the ISR is too small, NOT_COORDINATOR
    /// when the leadership left.
    pub async fn wait_replicated(
        &self,
        purgatory: &crate::partition::purgatory::ProducePurgatory,
        group_id: &str,
        timeout: Duration,
    ) -> Result<(), i16> {
        let partition = {
            let inner = self.inner.lock();
            let index = inner.coordinator.partition_for(group_id) as usize;
            match inner.loads.get(index).map(Load::appendable) {
                Some(Ok(p)) => p.clone(),
                Some(Err(e)) => return Err(e.code()),
                None => return Err(COORDINATOR_NOT_AVAILABLE),
            }
        };
        let end = partition
            .offsets()
            .map_err(|e| append_error(&e).code())?
            .log_end_offset;
        let waited = purgatory.wait(&[(partition, end)], timeout).await;
        match waited.into_iter().next() {
            Some(Ok(())) | None => Ok(()),
            Some(Err(crate::partition::PartitionError::RequestTimedOut)) => {
                Err(kafka_protocol::ResponseError::RequestTimedOut.code())
            }
            Some(Err(e)) => Err(append_error(&e).code()),
        }
    }

    /// Whether `group_id` is coordinated here, else the error code to answer.
    pub fn serves(&self, group_id: &str) -> Result<(), i16> {
        self.inner.lock().serving(group_id)
    }

    /// True while some partition led here is still being loaded.
    pub fn loading(&self) -> bool {
        crate::coordinator_load::any_loading(&self.inner.lock().loads)
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
        let durable = self.apply(&mut inner, out).is_ok();
        drop(inner);
        self.timer_wakeup.notify_one();
        (result, durable)
    }

    /// Where the group coordinator looks up pending transactional offsets (offsets retention
    /// keeps their partitions' offsets).
    pub fn watch_pending_txn_offsets(
        &self,
        pending: Arc<dyn streamforge_coordinator::PendingTxnOffsets>,
    ) {
        self.inner
            .lock()
            .coordinator
            .set_pending_txn_offsets(pending);
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
        let group_id = request.group_id.clone();
        let reply = self
            .park(&group_id, wait_ms, |c, now, token, out| {
                c.join_group(now, token, request, out)
            })
            .await;
        match reply {
            Ok(Reply::Join(r)) => r,
            Ok(_) => JoinGroupResponse::error(&member_id, COORDINATOR_NOT_AVAILABLE),
            Err(code) => JoinGroupResponse::error(&member_id, code),
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
        let group_id = request.group_id.clone();
        let reply = self
            .park(
                &group_id,
                wait_ms + PARKED_GRACE_MS,
                |c, now, token, out| c.sync_group(now, token, request, out),
            )
            .await;
        match reply {
            Ok(Reply::Sync(r)) => r,
            Ok(_) => SyncGroupResponse::error(COORDINATOR_NOT_AVAILABLE),
            Err(code) => SyncGroupResponse::error(code),
        }
    }

    /// Parks a request of `group_id` until the coordinator answers it; `Err` is the code to
    /// answer instead (not served here, unloaded meanwhile, or never answered).
    async fn park(
        &self,
        group_id: &str,
        wait_ms: u64,
        f: impl FnOnce(&mut GroupCoordinator, i64, RequestToken, &mut Effects),
    ) -> Result<Reply, i16> {
        let token = RequestToken(self.next_token.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        {
            let mut inner = self.inner.lock();
            inner.serving(group_id)?;
            if inner.waiters.len() >= PARKED_REQUESTS_MAX {
                tracing::warn!(
                    limit = PARKED_REQUESTS_MAX,
                    "too many parked group requests"
                );
                return Err(COORDINATOR_NOT_AVAILABLE);
            }
            let partition = inner.coordinator.partition_for(group_id);
            inner.waiters.insert(token, Waiter { partition, tx });
            let mut out = Effects::default();
            f(&mut inner.coordinator, now_ms(), token, &mut out);
            // A failed append shows in the reply the coordinator gives (or in its absence).
            let _ = self.apply(&mut inner, out);
        }
        self.timer_wakeup.notify_one();
        match tokio::time::timeout(Duration::from_millis(wait_ms), rx).await {
            Ok(Ok(reply)) => reply,
            _ => {
                tracing::error!(token = token.0, "parked group request was never answered");
                self.inner.lock().waiters.remove(&token);
                Err(COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Appends records first (nothing is acknowledged before it is in the log), then answers
    /// parked requests. `Err` is the first failed append's code (NOT_COORDINATOR when the
    /// partition is not led here under the epoch it was loaded with).
    fn apply(&self, inner: &mut Inner, out: Effects) -> Result<(), i16> {
        let mut stored = Ok(());
        for append in out.appends {
            let index = append.partition as usize;
            let partition = match inner.loads.get(index).map(Load::appendable) {
                Some(Ok(p)) => p.clone(),
                Some(Err(e)) => {
                    tracing::warn!(partition = append.partition, error = %e, "{OFFSETS_TOPIC} partition not led here: records not written");
                    stored = stored.and(Err(e.code()));
                    continue;
                }
                None => {
                    stored = stored.and(Err(COORDINATOR_NOT_AVAILABLE));
                    continue;
                }
            };
            match append_records(&partition, &append.records) {
                Ok(bytes) => inner.appended_since_snapshot_bytes[index] += bytes,
                Err(e) => {
                    tracing::error!(partition = append.partition, error = %e, "appending to {OFFSETS_TOPIC} failed");
                    stored = stored.and(Err(e.code()));
                }
            }
        }
        for (token, reply) in out.replies {
            if let Some(waiter) = inner.waiters.remove(&token) {
                // The requester may have gone away; nothing to do then.
                let _ = waiter.tx.send(Ok(reply));
            }
        }
        stored
    }

    /// Fires due timers, then snapshots partitions that grew past the trigger.
    fn tick(&self) -> i64 {
        let mut inner = self.inner.lock();
        let now = now_ms();
        let mut out = Effects::default();
        inner.coordinator.tick(now, &mut out);
        // Failures are logged; the timers fire again.
        let _ = self.apply(&mut inner, out);
        let trigger = self.config.offsets_snapshot_trigger_bytes;
        for index in 0..inner.loads.len() {
            if inner.appended_since_snapshot_bytes[index] >= trigger {
                self.snapshot_and_truncate(&mut inner, index, now);
            }
        }
        inner.coordinator.next_deadline_ms()
    }

    /// Writes the live state of one partition and moves its log start past everything
    /// older, so whole superseded segments are deleted.
    fn snapshot_and_truncate(&self, inner: &mut Inner, index: usize, now: i64) {
        // Only a loaded partition: a snapshot of one still loading would hold none of its
        // groups and drop every record they have.
        let Some(Ok(partition)) = inner.loads.get(index).map(Load::appendable) else {
            return;
        };
        let partition = partition.clone();
        let records = inner.coordinator.snapshot_records(index as i32, now);
        // Nothing at or past the first open transaction's records goes: a transaction's
        // offsets are pending until its marker, and a load must replay them (the snapshot
        // holds committed offsets only). The last stable offset is also below the high
        // watermark, so only what every in-sync replica has is dropped.
        let start = match partition.offsets() {
            Ok(offsets) => offsets.log_end_offset.min(offsets.last_stable_offset),
            Err(e) => {
                tracing::error!(partition = index, error = %e, "snapshot: partition gone");
                return;
            }
        };
        if let Err(e) = append_records(&partition, &records) {
            tracing::error!(partition = index, error = %e, "snapshot append failed");
            return;
        }
        // Open transactions' offsets again after the plain records, as each producer's batch:
        // their records stay later in the log than the snapshot's (the marker makes them win).
        for (producer, txn_records) in inner.coordinator.snapshot_txn_records(index as i32, now) {
            let appended =
                streamforge_coordinator::records::encode_txn_batch(&txn_records, now, producer)
                    .map_err(|e| AppendError::Encode(e.to_string()))
                    .and_then(|mut batch| Ok(partition.append(&mut batch, APPEND_PARAMS)?));
            if let Err(e) = appended {
                // Nothing is truncated: the transaction's first records stay in the log.
                tracing::error!(partition = index, producer_id = producer.0, error = %e, "snapshot of transactional offsets failed");
                return;
            }
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
        for index in 0..inner.loads.len() {
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

/// Why records did not reach `__consumer_offsets`.
#[derive(Debug, thiserror::Error)]
enum AppendError {
    #[error("encoding: {0}")]
    Encode(String),
    #[error(transparent)]
    Partition(#[from] crate::partition::PartitionError),
}

impl AppendError {
    fn code(&self) -> i16 {
        match self {
            AppendError::Encode(_) => kafka_protocol::ResponseError::UnknownServerError.code(),
            AppendError::Partition(e) => append_error(e).code(),
        }
    }
}

fn append_records(partition: &Partition, records: &[OffsetsRecord]) -> Result<u64, AppendError> {
    let mut bytes = 0u64;
    for chunk in records.chunks(OFFSETS_BATCH_RECORDS_MAX) {
        let mut batch =
            encode_batch(chunk, now_ms()).map_err(|e| AppendError::Encode(e.to_string()))?;
        bytes += batch.len() as u64;
        partition.append(&mut batch, APPEND_PARAMS)?;
    }
    Ok(bytes)
}

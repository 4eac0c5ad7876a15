//! Wiring of the sans-io transaction coordinator into the broker: the coordinator behind a
//! mutex, `__transaction_state` as its durable state (appends before replies, start-up
//! replay), markers written to each partition of a transaction (`Partition::write_txn_marker`;
//! a `__consumer_offsets` partition's marker goes through the group coordinator, which holds
//! the transaction's offsets), a timer task for `transaction.timeout.ms`, and the pending
//! TxnOffsetCommit offsets older data dirs kept in `__transaction_state`. Only
//! the partitions this broker leads are loaded (`txn_load.rs` follows leadership); a
//! transactional id of another partition answers NOT_COORDINATOR.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use streamforge_coordinator::TxnOffset;
use streamforge_coordinator::records::encode_one_batch;
use streamforge_coordinator::txn::{
    TRANSACTION_STATE_TOPIC, TxnConfig, TxnCoordinator, TxnEffects,
};
use tokio::sync::watch;

use crate::BrokerState;
use crate::coordinator_load::{Load, append_error, led_partitions};
use crate::partition::{Acks, AppendParams};
use crate::replica_manager::{ReplicaManager, TopicError};
use crate::util::now_ms;
/// Longest the timer sleeps when no transaction is due (also the retry period of markers
/// that could not be written).
const TIMER_IDLE_MS: i64 = 1_000;
/// `__transaction_state` segment size (Kafka: `transaction.state.log.segment.bytes`, 100 MiB).
const STATE_SEGMENT_BYTES: u64 = 16 << 20;
/// How long a request waits for its `__transaction_state` append to reach the ISR before it
/// answers COORDINATOR_NOT_AVAILABLE (Kafka: `transaction.state.log` appends with acks=all
/// under the request timeout).
const STATE_REPLICATION_TIMEOUT_MS: u64 = 5_000;
/// How long a client's AddPartitionsToTxn (v0-3) or AddOffsetsToTxn that meets the id's
/// previous transaction still prepared (its markers on their way) waits for it to complete
/// before it is answered CONCURRENT_TRANSACTIONS (see [`TxnService::run_after_markers`]).
pub(crate) const PREPARED_WAIT_MS: u64 = 1_000;

pub(crate) struct Inner {
    pub coordinator: TxnCoordinator,
    /// TxnOffsetCommit offsets by (group, producer id) from data dirs written before the group
    /// coordinator stored them in `__consumer_offsets` (`txn_pending.rs`, replayed, never
    /// added to), committed or dropped by their marker (their own lock, taken last; the group
    /// coordinator reads it too).
    pub pending_offsets: Arc<crate::txn_pending::SharedPending>,
    /// What is loaded of each `__transaction_state` partition (empty until the topic exists:
    /// this broker creates it on first use, so every id is served here until then).
    pub loads: Vec<Load>,
}

impl Inner {
    /// Whether `tid`'s partition is served here, else Kafka's error. Callers make the
    /// topic exist first (`TxnService::serving`): with no loads nothing is served, so two
    /// brokers of a cluster never both coordinate one id.
    pub(crate) fn serving(&self, tid: &str) -> Result<(), ResponseError> {
        if self.loads.is_empty() {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let index = self.coordinator.partition_for(tid) as usize;
        self.loads.get(index).unwrap_or(&Load::NotLed).serving()
    }

    /// The coordinator epoch markers of `tid` carry: the leader epoch of its
    /// `__transaction_state` partition as loaded here (Kafka's coordinator epoch).
    fn coordinator_epoch(&self, tid: &str) -> i32 {
        let index = self.coordinator.partition_for(tid) as usize;
        match self.loads.get(index) {
            Some(Load::Loaded { epoch, .. }) => *epoch,
            _ => 0,
        }
    }

    /// The `__transaction_state` partition of `tid` as loaded here, with the log end to wait
    /// for (state appends count once the ISR has them).
    fn state_partition(&self, tid: &str) -> Option<Arc<crate::partition::Partition>> {
        let index = self.coordinator.partition_for(tid) as usize;
        self.loads.get(index)?.appendable().ok().cloned()
    }
}

/// The broker's transaction coordinator service.
pub struct TxnService {
    pub(crate) inner: Mutex<Inner>,
    /// Its partition count when this broker creates it.
    wanted_partitions: i32,
    /// Markers on their way to partitions led elsewhere (or waiting for their ISR here).
    pub(crate) markers: Arc<crate::txn_marker_sender::MarkerChannel>,
    /// Transaction checks sent to other brokers' coordinators (KIP-890, `txn_verify.rs`).
    pub(crate) checks: Arc<crate::txn_verify_sender::CheckChannel>,
    /// Wakes the timer early (a Prepare record reached its ISR: its markers may go).
    timer_wake: Arc<tokio::sync::Notify>,
    /// Woken whenever transactions complete (their markers all written) or ids are served
    /// here no more: the adds waiting in [`TxnService::run_after_markers`] run again.
    completed: tokio::sync::Notify,
}

#[derive(Debug, thiserror::Error)]
pub enum TxnServiceError {
    #[error("creating {TRANSACTION_STATE_TOPIC}: {0}")]
    Topic(#[from] TopicError),
    #[error("replaying {TRANSACTION_STATE_TOPIC}-{partition}: {message}")]
    Replay { partition: i32, message: String },
}

impl TxnService {
    /// Rebuilds the transactions by replaying `__transaction_state` if it exists. Like Kafka,
    /// the topic is created on first use (a transactional InitProducerId), not at start-up.
    pub fn open(
        replicas: &ReplicaManager,
        mut config: TxnConfig,
    ) -> Result<TxnService, TxnServiceError> {
        let Some(topic) = replicas.topic(TRANSACTION_STATE_TOPIC) else {
            return Ok(TxnService {
                inner: Mutex::new(Inner {
                    coordinator: TxnCoordinator::new(config.clone()),
                    pending_offsets: Default::default(),
                    loads: Vec::new(),
                }),
                wanted_partitions: config.state_partitions.max(1),
                markers: Default::default(),
                checks: Default::default(),
                timer_wake: Default::default(),
                completed: Default::default(),
            });
        };
        // An existing topic keeps its partition count: placement depends on it.
        config.state_partitions = topic.partition_count();
        let mut coordinator = TxnCoordinator::new(config);
        let mut pending_offsets = HashMap::new();
        let mut records = 0usize;
        for partition in topic.hosted() {
            if let Some(why) = partition.offline_reason() {
                tracing::error!(
                    partition = partition.index,
                    error = why,
                    "{TRANSACTION_STATE_TOPIC} partition offline: its transactions are not loaded"
                );
            }
        }
        // The partitions led here load now; the others follow leadership (`txn_load.rs`).
        let led = led_partitions(replicas, TRANSACTION_STATE_TOPIC).unwrap_or_default();
        let mut loads = vec![Load::NotLed; topic.partition_count().max(0) as usize];
        for (index, led) in led.into_iter().enumerate() {
            let Some((partition, epoch)) = led else {
                continue;
            };
            records += crate::txn_load::replay_partition(
                &mut coordinator,
                &mut pending_offsets,
                &partition,
            )?;
            loads[index] = Load::Loaded { partition, epoch };
        }
        tracing::info!(
            records,
            transactional_ids = coordinator.all().count(),
            prepared = coordinator.prepared_count(),
            "replayed {TRANSACTION_STATE_TOPIC}"
        );
        Ok(TxnService {
            inner: Mutex::new(Inner {
                coordinator,
                pending_offsets: Arc::new(crate::txn_pending::SharedPending::from(pending_offsets)),
                loads,
            }),
            wanted_partitions: topic.partition_count(),
            markers: Default::default(),
            checks: Default::default(),
            timer_wake: Default::default(),
            completed: Default::default(),
        })
    }

    /// Creates `__transaction_state` (compacted, `transaction.state.log.num.partitions`
    /// partitions) on first use, and loads the partitions led here at once (they are new).
    fn ensure_topic(&self, replicas: &ReplicaManager, inner: &mut Inner) -> Result<(), String> {
        if !inner.loads.is_empty() {
            return Ok(());
        }
        if replicas.topic(TRANSACTION_STATE_TOPIC).is_none() {
            self.create_topic(replicas)?;
        }
        let led = led_partitions(replicas, TRANSACTION_STATE_TOPIC).unwrap_or_default();
        for job in self.follow_inner(inner, &led) {
            self.load_inner(inner, job);
        }
        Ok(())
    }

    fn create_topic(&self, replicas: &ReplicaManager) -> Result<(), String> {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), STATE_SEGMENT_BYTES.to_string());
        configs.insert("retention.ms".to_string(), "-1".to_string());
        configs.insert("segment.index.bytes".to_string(), (1 << 20).to_string());
        let n = self.wanted_partitions;
        let topic = match replicas.create_topic(TRANSACTION_STATE_TOPIC, n, configs, false) {
            Ok(Some(t)) => t,
            Ok(None) | Err(TopicError::AlreadyExists(_)) => replicas
                .topic(TRANSACTION_STATE_TOPIC)
                .ok_or_else(|| "topic vanished".to_string())?,
            Err(e) => return Err(format!("creating {TRANSACTION_STATE_TOPIC}: {e}")),
        };
        tracing::info!(
            partitions = topic.partition_count(),
            "created {TRANSACTION_STATE_TOPIC}"
        );
        Ok(())
    }

    /// Runs one event and applies its effects (appends, then markers, then completions).
    /// The event is for transactional id `tid`: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
    /// when its partition is not served here. `Err(COORDINATOR_NOT_AVAILABLE)` (or
    /// NOT_COORDINATOR when the partition is led here no more) replaces the result when a
    /// state record could not be appended: nothing is acknowledged that is not in the log.
    pub fn run<R>(
        &self,
        state: &BrokerState,
        tid: &str,
        f: impl FnOnce(&mut TxnCoordinator, i64, &mut TxnEffects) -> Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        let mut inner = self.inner.lock();
        self.serving(&state.replicas, &mut inner, tid)?;
        let mut out = TxnEffects::default();
        let result = f(&mut inner.coordinator, now_ms(), &mut out);
        let stored = self.apply(state, &mut inner, out);
        drop(inner);
        // The timer is not woken per request: it looks again within TIMER_IDLE_MS, so a
        // timeout fires at most that late (Kafka checks every 10 s), and the hot path of a
        // transaction (AddPartitionsToTxn, EndTxn) saves a thread hop and a lock round.
        stored?;
        result
    }

    /// [`Self::run`] for a client's add (AddPartitionsToTxn v0-3, AddOffsetsToTxn): while it
    /// is answered CONCURRENT_TRANSACTIONS (the id's previous transaction is prepared, its
    /// markers on their way to other brokers) it runs again each time transactions complete,
    /// for at most [`PREPARED_WAIT_MS`]; then the client gets CONCURRENT_TRANSACTIONS.
    ///
    /// Kafka answers such an add CONCURRENT_TRANSACTIONS at once and the client retries after
    /// its backoff: librdkafka's AddOffsetsToTxn backoff is `retry.backoff.ms` (100 ms,
    /// doubling), and a consume-transform-produce loop sends it right after the previous
    /// commit, so every transaction waited 100 ms for markers written in a few. The wait is
    /// Kafka's own server-side retry of an add that meets CONCURRENT_TRANSACTIONS (its
    /// leader's for Produce v12), answered as soon as the markers are written.
    pub async fn run_after_markers<R>(
        &self,
        state: &BrokerState,
        tid: &str,
        mut f: impl FnMut(&mut TxnCoordinator, i64, &mut TxnEffects) -> Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(PREPARED_WAIT_MS);
        retry_concurrent(&self.completed, deadline, || self.run(state, tid, &mut f)).await
    }

    /// Wakes the adds waiting for transactions to complete (some did, or ids left this
    /// coordinator): they run again.
    pub(crate) fn wake_prepared_waiters(&self) {
        self.completed.notify_waiters();
    }

    /// The first transactional batch of a producer on a partition (KIP-890): with `add`
    /// (Produce v12, transaction version 2) the partition joins the producer's transaction,
    /// otherwise it must already be in it (part 1's verification). `append` runs under the
    /// coordinator's lock, so no marker of this producer can come between the check and the
    /// append (markers are written under the same lock). Errors are the coordinator's (the
    /// Produce translates them); NOT_COORDINATOR when the id is coordinated elsewhere.
    pub fn verified_append<T>(
        &self,
        state: &BrokerState,
        producer: (&str, i64, i16),
        partition: (String, i32),
        add: bool,
        append: impl FnOnce() -> T,
    ) -> Result<T, ResponseError> {
        let (tid, pid, epoch) = producer;
        let mut inner = self.inner.lock();
        let checked = if let Err(e) = self.serving(&state.replicas, &mut inner, tid) {
            // NOT_COORDINATOR: the coordinator is another broker, which the caller asks.
            Err(e)
        } else if add {
            let mut out = TxnEffects::default();
            let added = inner.coordinator.add_partitions(
                now_ms(),
                tid,
                pid,
                epoch,
                std::slice::from_ref(&partition),
                &mut out,
            );
            let stored = self.apply(state, &mut inner, out);
            added.and(stored)
        } else {
            let code = inner.coordinator.verify_partitions(
                tid,
                pid,
                epoch,
                std::slice::from_ref(&partition),
            )[0];
            match code {
                0 => Ok(()),
                c => Err(ResponseError::try_from_code(c).unwrap_or(ResponseError::InvalidTxnState)),
            }
        };
        checked.map(|()| append())
    }

    /// Whether `tid` is served here: the topic is created (or its led partitions followed)
    /// first when nothing is loaded yet, so a broker never answers for an id from empty state.
    fn serving(
        &self,
        replicas: &ReplicaManager,
        inner: &mut Inner,
        tid: &str,
    ) -> Result<(), ResponseError> {
        if inner.loads.is_empty() {
            self.ensure_topic(replicas, inner).map_err(|e| {
                tracing::warn!(error = %e, "{TRANSACTION_STATE_TOPIC} is not available");
                ResponseError::CoordinatorNotAvailable
            })?;
        }
        inner.serving(tid)
    }

    /// Whether `tid` is served here, the topic created first if needed (tests).
    #[cfg(test)]
    pub(crate) fn serve(&self, replicas: &ReplicaManager, tid: &str) -> Result<(), ResponseError> {
        let mut inner = self.inner.lock();
        self.serving(replicas, &mut inner, tid)
    }

    /// Waits until `tid`'s `__transaction_state` partition has everything appended so far in
    /// its ISR (Kafka appends transaction state with acks=all), at most `timeout`; a timeout
    /// or a lost leadership is a retriable error for the client.
    pub async fn wait_replicated(
        &self,
        purgatory: &crate::partition::purgatory::ProducePurgatory,
        tid: &str,
        timeout: Duration,
    ) -> Result<(), ResponseError> {
        let Some(partition) = self.inner.lock().state_partition(tid) else {
            return Err(ResponseError::NotCoordinator);
        };
        let end = partition
            .offsets()
            .map_err(|e| append_error(&e))?
            .log_end_offset;
        match purgatory
            .wait(&[(partition, end)], timeout)
            .await
            .into_iter()
            .next()
        {
            Some(Ok(())) | None => Ok(()),
            Some(Err(crate::partition::PartitionError::RequestTimedOut)) => {
                Err(ResponseError::CoordinatorNotAvailable)
            }
            Some(Err(e)) => Err(append_error(&e)),
        }
    }

    /// `result` of a request for `tid` once the state it appended is in the ISR (errors are
    /// answered as they are: a retry finds the state as it was left).
    pub async fn replicated<R>(
        &self,
        state: &BrokerState,
        tid: &str,
        result: Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        // Errors are answered as they are.
        result.as_ref().map_err(|e| *e)?;
        let timeout = Duration::from_millis(STATE_REPLICATION_TIMEOUT_MS);
        self.wait_replicated(&state.produce_purgatory, tid, timeout)
            .await
            .inspect_err(|e| {
                tracing::warn!(transactional_id = tid, error = %e, "{TRANSACTION_STATE_TOPIC} append not replicated in time; answering a retriable error");
            })?;
        result
    }

    /// Read-only access (describe, list).
    pub fn read<R>(&self, f: impl FnOnce(&TxnCoordinator) -> R) -> R {
        f(&self.inner.lock().coordinator)
    }

    /// Read-only access for transactional id `tid` served here (verification checks).
    pub fn read_for<R>(
        &self,
        tid: &str,
        f: impl FnOnce(&TxnCoordinator) -> R,
    ) -> Result<R, ResponseError> {
        let inner = self.inner.lock();
        inner.serving(tid)?;
        Ok(f(&inner.coordinator))
    }

    /// The partitions of `group` with pending transactional offsets replayed from an older
    /// data dir's `__transaction_state` (OffsetFetch's `require_stable` asks the group
    /// coordinator too).
    pub fn pending_partitions(&self, group: &str) -> std::collections::BTreeSet<(String, i32)> {
        crate::txn_pending::pending_partitions(&self.pending_offsets().lock(), group)
    }

    /// The pending offsets as the group coordinator sees them (offsets retention skips them).
    pub fn pending_offsets(&self) -> Arc<crate::txn_pending::SharedPending> {
        Arc::clone(&self.inner.lock().pending_offsets)
    }

    /// Appends first; each marker request's completion may append again (a bounded loop: a
    /// completion asks for no markers).
    pub(crate) fn apply(
        &self,
        state: &BrokerState,
        inner: &mut Inner,
        mut out: TxnEffects,
    ) -> Result<(), ResponseError> {
        self.write_tombstones(&state.replicas, inner, std::mem::take(&mut out.expirations));
        loop {
            let mut stored = Ok(());
            for append in std::mem::take(&mut out.appends) {
                let appended =
                    self.append_record(&state.replicas, inner, append.partition, &append.record);
                if let Err(e) = appended {
                    tracing::error!(partition = append.partition, error = %e, "appending to {TRANSACTION_STATE_TOPIC} failed");
                    stored = stored.and(Err(e));
                }
            }
            // A transition not in the log: its markers must not be written.
            stored?;
            let markers = std::mem::take(&mut out.markers);
            if markers.is_empty() {
                return Ok(());
            }
            for m in markers {
                let key = crate::txn_markers::TxnKey {
                    transactional_id: m.transactional_id.clone(),
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    commit: m.commit,
                };
                // Being sent already (the tick asks again for every prepared transaction).
                if self.markers.queue.lock().is_pending(&key) {
                    continue;
                }
                // No marker before the Prepare record is in the ISR (as Kafka): a failover
                // to a replica without it must not find COMMIT markers already written.
                if self.hold_until_replicated(inner, &m.transactional_id) {
                    tracing::debug!(transactional_id = %m.transactional_id, "markers wait for the Prepare record's ISR");
                    continue;
                }
                let epoch = inner.coordinator_epoch(&m.transactional_id);
                let elsewhere = self.write_markers(state, inner, &m, epoch);
                if elsewhere.is_empty() {
                    inner
                        .coordinator
                        .markers_written(&m.transactional_id, now_ms(), &mut out);
                    self.wake_prepared_waiters();
                } else if self.markers.queue.lock().submit(key, epoch, &elsewhere) {
                    tracing::debug!(transactional_id = %m.transactional_id, partitions = elsewhere.len(), "markers queued for the sender");
                    self.markers.wake();
                }
            }
        }
    }

    /// True when `tid`'s state partition has followers that lack its log end yet: a task
    /// wakes the timer once they have it (bounded), whose tick asks for the markers again.
    fn hold_until_replicated(&self, inner: &Inner, tid: &str) -> bool {
        use crate::partition::replica::Replication;
        let Some(p) = inner.state_partition(tid) else {
            return false;
        };
        if p.replica_status().is_none() {
            return false;
        }
        let Ok(end) = p.offsets().map(|o| o.log_end_offset) else {
            return false;
        };
        if !matches!(p.replication(end), Ok(Replication::Pending)) {
            return false;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let wake = self.timer_wake.clone();
        runtime.spawn(async move {
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(STATE_REPLICATION_TIMEOUT_MS);
            let mut hw = p.watch_high_watermark();
            while matches!(p.replication(end), Ok(Replication::Pending)) {
                if tokio::time::timeout_at(deadline, hw.changed())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            wake.notify_one();
        });
        true
    }

    /// Expired ids' tombstones, one append per batch; an id leaves memory only once its
    /// batch is in the log. A failed append keeps the batch's ids (the next check writes them
    /// again), so no id is forgotten here that a restart's replay would bring back.
    pub(crate) fn write_tombstones(
        &self,
        replicas: &ReplicaManager,
        inner: &mut Inner,
        batches: Vec<streamforge_coordinator::txn::ExpiryBatch>,
    ) {
        for batch in batches {
            match self.append_records(replicas, inner, batch.partition, &batch.records) {
                Ok(()) => {
                    inner.coordinator.tombstones_written(&batch);
                }
                Err(e) => {
                    tracing::warn!(partition = batch.partition, ids = batch.ids.len(), error = %e, "appending expired transactional ids' tombstones to {TRANSACTION_STATE_TOPIC} failed: kept until the next check");
                }
            }
        }
    }

    /// The smallest `max.message.bytes` of the state partitions loaded here (it bounds a
    /// batch of expiry tombstones), or `None` when none is loaded.
    fn state_batch_bytes_max(inner: &Inner) -> Option<usize> {
        inner
            .loads
            .iter()
            .filter_map(|l| l.appendable().ok()?.max_message_bytes())
            .min()
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
    }

    /// Appends to the partition as loaded (led here under the epoch of its load), else
    /// NOT_COORDINATOR; other failures are COORDINATOR_NOT_AVAILABLE.
    pub(crate) fn append_record(
        &self,
        replicas: &ReplicaManager,
        inner: &mut Inner,
        partition: i32,
        record: &streamforge_coordinator::OffsetsRecord,
    ) -> Result<(), ResponseError> {
        self.append_records(replicas, inner, partition, std::slice::from_ref(record))
    }

    /// [`TxnService::append_record`] for several records in one batch.
    fn append_records(
        &self,
        replicas: &ReplicaManager,
        inner: &mut Inner,
        partition: i32,
        records: &[streamforge_coordinator::OffsetsRecord],
    ) -> Result<(), ResponseError> {
        self.ensure_topic(replicas, inner).map_err(|e| {
            tracing::error!(error = %e, "{TRANSACTION_STATE_TOPIC} is not available");
            ResponseError::CoordinatorNotAvailable
        })?;
        let p = inner
            .loads
            .get(partition as usize)
            .ok_or(ResponseError::CoordinatorNotAvailable)?
            .appendable()?;
        let mut batch =
            encode_one_batch(records, now_ms()).map_err(|_| ResponseError::UnknownServerError)?;
        p.append(&mut batch, AppendParams { acks: Acks::All })
            .map_err(|e| append_error(&e))?;
        Ok(())
    }

    /// Timeouts, and markers that could not be written before (retried).
    fn tick(&self, state: &BrokerState) -> i64 {
        let mut inner = self.inner.lock();
        let now = now_ms();
        let mut out = TxnEffects::default();
        if let Some(bytes) = Self::state_batch_bytes_max(&inner) {
            inner.coordinator.set_state_batch_bytes_max(bytes);
        }
        inner.coordinator.tick(now, &mut out);
        inner.coordinator.retry_prepared(&mut out);
        // Failures are logged; the transactions stay pending and are retried next tick.
        let _ = self.apply(state, &mut inner, out);
        inner
            .coordinator
            .next_deadline_ms()
            .unwrap_or(now + TIMER_IDLE_MS)
    }
}

/// The timer task: transaction timeouts and marker retries, until shutdown.
/// Runs `attempt` until it is answered other than CONCURRENT_TRANSACTIONS, again each time
/// `completed` is woken, until `deadline` (then its last answer).
async fn retry_concurrent<R>(
    completed: &tokio::sync::Notify,
    deadline: tokio::time::Instant,
    mut attempt: impl FnMut() -> Result<R, ResponseError>,
) -> Result<R, ResponseError> {
    loop {
        // Registered before the attempt: a completion between the two is not missed.
        let woken = completed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let result = attempt();
        if !matches!(result, Err(ResponseError::ConcurrentTransactions))
            || tokio::time::timeout_at(deadline, woken).await.is_err()
        {
            return result;
        }
    }
}

pub async fn run_timer(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let service = state.txns.clone();
        let st = state.clone();
        let next = tokio::task::spawn_blocking(move || service.tick(&st))
            .await
            .unwrap_or_else(|_| now_ms() + TIMER_IDLE_MS);
        let sleep_ms = (next - now_ms()).clamp(1, TIMER_IDLE_MS) as u64;
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = state.txns.timer_wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
        }
    }
}

pub(crate) type PendingOffsets = HashMap<(String, i64), BTreeMap<(String, i32), TxnOffset>>;

#[cfg(test)]
mod retry_concurrent_tests {
    use std::time::{Duration, Instant};

    use kafka_protocol::ResponseError;
    use tokio::sync::Notify;

    use super::retry_concurrent;

    const LONG: Duration = Duration::from_secs(30);

    fn deadline(after: Duration) -> tokio::time::Instant {
        tokio::time::Instant::now() + after
    }

    #[tokio::test]
    async fn an_add_meeting_a_prepared_transaction_runs_again_when_it_completes() {
        let completed = std::sync::Arc::new(Notify::new());
        let waker = completed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waker.notify_waiters();
        });
        let mut attempts = 0;
        let started = Instant::now();
        let result = retry_concurrent(&completed, deadline(LONG), || {
            attempts += 1;
            if attempts == 1 {
                Err(ResponseError::ConcurrentTransactions)
            } else {
                Ok(attempts)
            }
        })
        .await;
        assert_eq!(result, Ok(2));
        assert!(
            started.elapsed() < LONG / 2,
            "answered on the completion, not the deadline"
        );
    }

    #[tokio::test]
    async fn a_completion_during_the_attempt_is_not_missed() {
        let completed = Notify::new();
        let mut attempts = 0;
        let started = Instant::now();
        let result = retry_concurrent(&completed, deadline(LONG), || {
            attempts += 1;
            if attempts == 1 {
                // The markers finish between the coordinator's answer and the wait.
                completed.notify_waiters();
                Err(ResponseError::ConcurrentTransactions)
            } else {
                Ok(attempts)
            }
        })
        .await;
        assert_eq!(result, Ok(2));
        assert!(started.elapsed() < LONG / 2);
    }

    #[tokio::test]
    async fn without_a_completion_the_client_gets_concurrent_transactions_at_the_deadline() {
        let completed = Notify::new();
        let mut attempts = 0;
        let started = Instant::now();
        let result: Result<(), _> =
            retry_concurrent(&completed, deadline(Duration::from_millis(50)), || {
                attempts += 1;
                Err(ResponseError::ConcurrentTransactions)
            })
            .await;
        assert_eq!(result, Err(ResponseError::ConcurrentTransactions));
        assert_eq!(attempts, 1);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn other_answers_are_not_held() {
        let completed = Notify::new();
        for answer in [Ok(()), Err(ResponseError::ProducerFenced)] {
            let mut attempts = 0;
            let started = Instant::now();
            let result = retry_concurrent(&completed, deadline(LONG), || {
                attempts += 1;
                answer
            })
            .await;
            assert_eq!((result, attempts), (answer, 1));
            assert!(started.elapsed() < LONG / 2);
        }
    }
}

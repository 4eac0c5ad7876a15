//! Wiring of the sans-io transaction coordinator into the broker: the coordinator behind a
//! mutex, `__transaction_state` as its durable state (appends before replies, start-up
//! replay), markers written to each partition of a transaction (`Partition::write_txn_marker`;
//! a `__consumer_offsets` partition makes the transaction's pending offsets visible instead),
//! a timer task for `transaction.timeout.ms`, and the pending TxnOffsetCommit offsets.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use streamforge_coordinator::records::{decode_batches_with_offsets, encode_batch};
use streamforge_coordinator::txn::{
    MarkerRequest, TRANSACTION_STATE_TOPIC, TxnConfig, TxnCoordinator, TxnEffects,
};
use streamforge_coordinator::{OFFSETS_TOPIC, TxnOffset};
use streamforge_log::TxnMarker;
use streamforge_protocol::control::ControlType;
use tokio::sync::watch;

use crate::BrokerState;
use crate::partition::{Acks, AppendParams, FetchIsolation, FetchParams, Partition};
use crate::replica_manager::{ReplicaManager, TopicError};
use crate::util::now_ms;

/// Bytes read per step while replaying a partition at start-up.
const REPLAY_READ_BYTES: usize = 1 << 20;
/// Longest the timer sleeps when no transaction is due (also the retry period of markers
/// that could not be written).
const TIMER_IDLE_MS: i64 = 1_000;
/// Pending transactional offsets held at once (group, producer) pairs (a named bound).
const PENDING_OFFSET_SETS_MAX: usize = 100_000;
/// `__transaction_state` segment size (Kafka: `transaction.state.log.segment.bytes`, 100 MiB).
const STATE_SEGMENT_BYTES: u64 = 16 << 20;

struct Inner {
    coordinator: TxnCoordinator,
    /// TxnOffsetCommit offsets by (group, producer id), visible on the COMMIT marker.
    pending_offsets: PendingOffsets,
}

/// The broker's transaction coordinator service.
pub struct TxnService {
    inner: Mutex<Inner>,
    /// `__transaction_state`'s partitions once the topic exists.
    partitions: OnceLock<Vec<Option<Arc<Partition>>>>,
    /// Its partition count when this broker creates it.
    wanted_partitions: i32,
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
                    pending_offsets: HashMap::new(),
                }),
                partitions: OnceLock::new(),
                wanted_partitions: config.state_partitions.max(1),
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
                continue;
            }
            records += replay_partition(&mut coordinator, &mut pending_offsets, partition)?;
        }
        tracing::info!(
            records,
            transactional_ids = coordinator.all().count(),
            "replayed {TRANSACTION_STATE_TOPIC}"
        );
        Ok(TxnService {
            inner: Mutex::new(Inner {
                coordinator,
                pending_offsets,
            }),
            partitions: OnceLock::from(topic.slots().to_vec()),
            wanted_partitions: topic.partition_count(),
        })
    }

    /// The partitions of `__transaction_state`, creating the topic (compacted,
    /// `transaction.state.log.num.partitions` partitions) on first use.
    fn state_partitions(
        &self,
        replicas: &ReplicaManager,
    ) -> Result<&[Option<Arc<Partition>>], String> {
        if let Some(p) = self.partitions.get() {
            return Ok(p);
        }
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
        Ok(self.partitions.get_or_init(|| topic.slots().to_vec()))
    }

    /// Runs one event and applies its effects (appends, then markers, then completions).
    /// `Err(COORDINATOR_NOT_AVAILABLE)` replaces the result when a state record could not be
    /// appended: nothing is acknowledged that is not in the log.
    pub fn run<R>(
        &self,
        state: &BrokerState,
        f: impl FnOnce(&mut TxnCoordinator, i64, &mut TxnEffects) -> Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        let mut inner = self.inner.lock();
        let mut out = TxnEffects::default();
        let result = f(&mut inner.coordinator, now_ms(), &mut out);
        let durable = self.apply(state, &mut inner, out);
        drop(inner);
        // The timer is not woken per request: it looks again within TIMER_IDLE_MS, so a
        // timeout fires at most that late (Kafka checks every 10 s), and the hot path of a
        // transaction (AddPartitionsToTxn, EndTxn) saves a thread hop and a lock round.
        if !durable {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        result
    }

    /// The first transactional batch of a producer on a partition (KIP-890): with `add`
    /// (Produce v12, transaction version 2) the partition joins the producer's transaction,
    /// otherwise it must already be in it (part 1's verification). `append` runs under the
    /// coordinator's lock, so no marker of this producer can come between the check and the
    /// append (markers are written under the same lock). Errors are the coordinator's as
    /// Kafka's produce path translates them.
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
        let checked = if add {
            let mut out = TxnEffects::default();
            let added = inner.coordinator.add_partitions(
                now_ms(),
                tid,
                pid,
                epoch,
                std::slice::from_ref(&partition),
                &mut out,
            );
            let durable = self.apply(state, &mut inner, out);
            added.and_then(|()| {
                durable
                    .then_some(())
                    .ok_or(ResponseError::CoordinatorNotAvailable)
            })
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
        match checked {
            Ok(()) => Ok(append()),
            // Retriable coordinator errors that older producers do not retry on a Produce:
            // NOT_ENOUGH_REPLICAS makes them retry without a metadata refresh (as Kafka).
            Err(
                ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress
                | ResponseError::NotCoordinator,
            ) => Err(ResponseError::NotEnoughReplicas),
            Err(ResponseError::ConcurrentTransactions) if !add => {
                Err(ResponseError::NotEnoughReplicas)
            }
            Err(e) => Err(e),
        }
    }

    /// Read-only access (describe, list, TxnOffsetCommit checks).
    pub fn read<R>(&self, f: impl FnOnce(&TxnCoordinator) -> R) -> R {
        f(&self.inner.lock().coordinator)
    }

    /// TxnOffsetCommit: hold `offsets` until the transaction ends.
    pub fn add_pending_offsets(
        &self,
        replicas: &ReplicaManager,
        transactional_id: &str,
        group: &str,
        producer_id: i64,
        offsets: Vec<TxnOffset>,
    ) -> Result<(), ResponseError> {
        let mut inner = self.inner.lock();
        let partition = inner.coordinator.partition_for(transactional_id);
        let key = (group.to_string(), producer_id);
        if !inner.pending_offsets.contains_key(&key)
            && inner.pending_offsets.len() >= PENDING_OFFSET_SETS_MAX
        {
            return Err(ResponseError::CoordinatorLoadInProgress);
        }
        let set = inner.pending_offsets.entry(key).or_default();
        for o in offsets {
            set.insert((o.topic.clone(), o.partition), o);
        }
        // Durable before the answer: the record holds every pending offset of the group.
        let record = crate::txn_pending::record(transactional_id, group, producer_id, set.values());
        self.append_record(replicas, partition, &record).map_err(|e| {
            tracing::error!(error = %e, "appending pending offsets to {TRANSACTION_STATE_TOPIC} failed");
            ResponseError::CoordinatorNotAvailable
        })
    }

    /// Appends first; each marker request's completion may append again (a bounded loop: a
    /// completion asks for no markers).
    fn apply(&self, state: &BrokerState, inner: &mut Inner, mut out: TxnEffects) -> bool {
        let mut durable = true;
        loop {
            for append in std::mem::take(&mut out.appends) {
                if let Err(e) =
                    self.append_record(&state.replicas, append.partition, &append.record)
                {
                    durable = false;
                    tracing::error!(partition = append.partition, error = %e, "appending to {TRANSACTION_STATE_TOPIC} failed");
                }
            }
            if !durable {
                // A transition not in the log: its markers must not be written.
                return false;
            }
            let markers = std::mem::take(&mut out.markers);
            if markers.is_empty() {
                return true;
            }
            for m in markers {
                if self.write_markers(state, inner, &m) {
                    inner
                        .coordinator
                        .markers_written(&m.transactional_id, now_ms(), &mut out);
                }
            }
        }
    }

    fn append_record(
        &self,
        replicas: &ReplicaManager,
        partition: i32,
        record: &streamforge_coordinator::OffsetsRecord,
    ) -> Result<(), String> {
        let p = self
            .state_partitions(replicas)?
            .get(partition as usize)
            .ok_or_else(|| format!("no partition {partition}"))?
            .as_ref()
            .ok_or_else(|| format!("partition {partition} is not hosted here"))?;
        let mut batch =
            encode_batch(std::slice::from_ref(record), now_ms()).map_err(|e| e.to_string())?;
        p.append(&mut batch, AppendParams { acks: Acks::All })
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Timeouts, and markers that could not be written before (retried).
    fn tick(&self, state: &BrokerState) -> i64 {
        let mut inner = self.inner.lock();
        let now = now_ms();
        let mut out = TxnEffects::default();
        inner.coordinator.tick(now, &mut out);
        inner.coordinator.finish_replay(now, &mut out);
        self.apply(state, &mut inner, out);
        inner
            .coordinator
            .next_deadline_ms()
            .unwrap_or(now + TIMER_IDLE_MS)
    }
}

impl TxnService {
    /// Write one transaction's markers; true when every partition has its marker (a partition
    /// that no longer exists counts as written: nothing there can become visible).
    fn write_markers(&self, state: &BrokerState, inner: &mut Inner, m: &MarkerRequest) -> bool {
        let kind = if m.commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        let mut all = true;
        for (topic, index) in &m.partitions {
            if topic == OFFSETS_TOPIC {
                all &= self.complete_offsets(state, inner, m, *index);
                continue;
            }
            let Some(partition) = state.replicas.partition(topic, *index) else {
                tracing::warn!(
                    topic,
                    partition = index,
                    "transaction partition is gone; no marker"
                );
                continue;
            };
            let marker = TxnMarker {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: 0,
                kind,
            };
            if let Err(e) = partition.write_txn_marker(marker) {
                tracing::warn!(topic, partition = index, transactional_id = %m.transactional_id, error = %e, "writing a transaction marker failed; retrying later");
                all = false;
            }
        }
        all
    }

    /// The marker of a `__consumer_offsets` partition: the pending offsets of the transaction's
    /// groups on that partition become committed offsets (COMMIT) or are dropped (ABORT).
    fn complete_offsets(
        &self,
        state: &BrokerState,
        inner: &mut Inner,
        m: &MarkerRequest,
        index: i32,
    ) -> bool {
        let groups = state.groups.offsets_partitions();
        let keys: Vec<(String, i64)> = inner
            .pending_offsets
            .keys()
            .filter(|(g, pid)| {
                *pid == m.producer_id
                    && streamforge_coordinator::partition_for_group(g, groups) == index
            })
            .cloned()
            .collect();
        let state_partition = inner.coordinator.partition_for(&m.transactional_id);
        for key in keys {
            if m.commit {
                let offsets: Vec<TxnOffset> =
                    inner.pending_offsets[&key].values().cloned().collect();
                let ((), durable) = state.groups.with_coordinator_durable(|c, now, out| {
                    c.commit_txn_offsets(now, &key.0, &offsets, out)
                });
                if !durable {
                    // Kept pending: the marker is retried on the next tick.
                    return false;
                }
            }
            // Once the offsets are committed (or dropped), the pending record goes.
            let tombstone = crate::txn_pending::tombstone(&m.transactional_id, &key.0);
            if let Err(e) = self.append_record(&state.replicas, state_partition, &tombstone) {
                tracing::warn!(error = %e, "removing pending offsets failed; retrying later");
                return false;
            }
            inner.pending_offsets.remove(&key);
        }
        true
    }
}

/// The timer task: transaction timeouts and marker retries, until shutdown.
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
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
        }
    }
}

type PendingOffsets = HashMap<(String, i64), BTreeMap<(String, i32), TxnOffset>>;

fn replay_partition(
    coordinator: &mut TxnCoordinator,
    pending: &mut PendingOffsets,
    partition: &Partition,
) -> Result<usize, TxnServiceError> {
    let error = |message: String| TxnServiceError::Replay {
        partition: partition.index,
        message,
    };
    let offsets = partition.offsets().map_err(|e| error(e.to_string()))?;
    let (mut offset, end) = (offsets.local_log_start_offset, offsets.log_end_offset);
    let mut count = 0usize;
    // Which producer's offsets a (transactional id, group) record holds.
    let mut owners: HashMap<(String, String), i64> = HashMap::new();
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
            .records
            .map_err(|e| error(e.to_string()))?;
        if read.bytes == 0 {
            break;
        }
        let mut next = offset;
        for slice in read.slices {
            let records = decode_batches_with_offsets(slice).map_err(|e| error(e.to_string()))?;
            for (record_offset, record) in records {
                next = next.max(record_offset + 1);
                if record_offset < offset {
                    continue;
                }
                if let Some(((tid, group), offsets)) = crate::txn_pending::decode(&record) {
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
                    count += 1;
                    continue;
                }
                match coordinator.replay(&record) {
                    Ok(()) => count += 1,
                    Err(e) => {
                        tracing::warn!(partition = partition.index, offset = record_offset, error = %e, "skipping unreadable {TRANSACTION_STATE_TOPIC} record")
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

//! The transaction coordinator (KIP-98) as a sans-io state machine, in the style of the group
//! coordinator: events go in as method calls with the time passed in, effects come out in
//! [`TxnEffects`]: records to append to `__transaction_state` and marker writes (COMMIT /
//! ABORT to every partition of a transaction). The broker must append the records before it
//! replies or writes markers, and call [`TxnCoordinator::markers_written`] once every marker of
//! a transaction is in its partition's log, which completes the transaction.
//!
//! States (Kafka's `TransactionState`): Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn)
//! -> PrepareCommit | PrepareAbort (EndTxn, a timeout, or InitProducerId fencing an open
//! transaction) -> CompleteCommit | CompleteAbort (markers written) -> Ongoing again on the
//! next transaction. Each transition is a `__transaction_state` record; replaying the topic
//! rebuilds the state, and a transaction found in a Prepare state after replay has its markers
//! written again (they are idempotent for the log: a second marker ends nothing).

mod expiry;
pub use expiry::{ExpiredId, ExpiryBatch};
#[cfg(test)]
mod expiry_tests;
pub mod records;
mod records_v1;
#[cfg(test)]
mod tests;
mod v2;
pub use v2::TRANSACTION_VERSION_EPOCH_BUMP;
#[cfg(test)]
mod v2_tests;

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;

use crate::records::{OffsetsRecord, RecordsError};

/// The internal topic holding transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// `transaction.state.log.num.partitions` default.
pub const DEFAULT_TRANSACTION_STATE_PARTITIONS: i32 = 50;
/// Transactional ids one coordinator holds (a named bound; idle ones expire after
/// `transactional.id.expiration.ms`, as in Kafka).
pub const TRANSACTIONAL_IDS_MAX: usize = 100_000;
/// Partitions one transaction may span (a named bound on the per-transaction set).
pub const TXN_PARTITIONS_MAX: usize = 100_000;

/// Kafka's `TransactionState`, with its wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub fn code(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }
    pub fn from_code(c: i8) -> Option<TxnState> {
        Some(match c {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }
    /// The name DescribeTransactions / ListTransactions report (Kafka's `stateName`).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }
    fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions of the open (or completing) transaction, `__consumer_offsets` ones included.
    pub partitions: BTreeSet<(String, i32)>,
    pub last_update_ms: i64,
    /// When the open transaction started (-1 when none).
    pub start_ms: i64,
    /// The client's transaction version (Kafka's `ClientTransactionVersion`): 2 when its last
    /// EndTxn was v5+ (KIP-890 part 2: the epoch is bumped at every EndTxn), else 0.
    pub client_transaction_version: i16,
    /// The producer id before the last epoch exhaustion (-1 when none): a retried EndTxn
    /// under it is answered, not fenced.
    pub previous_producer_id: i64,
    /// The producer id the transaction moves to once its markers are written, when the
    /// epoch bump of a transaction-version-2 EndTxn exhausted the epoch (-1 when none).
    pub next_producer_id: i64,
    /// Kafka's `lastProducerEpoch` (-1 when none): the epoch before the last bump the producer
    /// asked for itself (a KIP-360 InitProducerId carrying its epoch, a transaction-version-2
    /// EndTxn), so a retry under it is answered, not fenced. A fence (a timeout, an operator's
    /// abort, another producer's InitProducerId) sets it to -1: the fenced epoch never comes
    /// back. Not in the records: -1 after a replay, as Kafka after a load.
    pub last_producer_epoch: i16,
}

impl TxnMetadata {
    /// A transactional id's first state: Empty at epoch 0.
    pub fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            last_update_ms: now_ms,
            start_ms: -1,
            client_transaction_version: 0,
            previous_producer_id: -1,
            next_producer_id: -1,
            last_producer_epoch: -1,
        }
    }

    /// This state as a replay of its records rebuilds it (the last epoch is not in them).
    #[cfg(test)]
    pub(crate) fn as_replayed(&self) -> TxnMetadata {
        TxnMetadata {
            last_producer_epoch: -1,
            ..self.clone()
        }
    }
}

/// Settings.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// Partitions of `__transaction_state` (placement depends on it).
    pub state_partitions: i32,
    /// `transaction.max.timeout.ms` (default 15 minutes).
    pub max_timeout_ms: i32,
    /// The finalized `transaction.version` feature level ApiVersions advertises (Kafka 4.x's
    /// default for a new cluster is 2): at 2, clients use KIP-890 part 2 (EndTxn v5, Produce
    /// v12, no client AddPartitionsToTxn); at 0 or 1 they use the KIP-98 protocol.
    pub transaction_version: i16,
    /// `transactional.id.expiration.ms` (Kafka's default 7 days): an id with no transaction
    /// open (Empty, CompleteCommit, CompleteAbort) whose state has not changed for this long
    /// is removed (a tombstone in `__transaction_state`).
    pub transactional_id_expiration_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (Kafka's default 1 hour):
    /// how often expired ids are looked for.
    pub remove_expired_interval_ms: i64,
    /// The largest batch of `__transaction_state` (its `max.message.bytes`, Kafka's default
    /// 1,048,588): expiry tombstones are written in batches no larger.
    pub state_batch_bytes_max: usize,
}

/// `transactional.id.expiration.ms` default: 7 days.
pub const DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// `transaction.remove.expired.transaction.cleanup.interval.ms` default: 1 hour.
pub const DEFAULT_REMOVE_EXPIRED_INTERVAL_MS: i64 = 60 * 60 * 1000;
/// `max.message.bytes` default, the bound of a batch of expiry tombstones.
pub const DEFAULT_STATE_BATCH_BYTES_MAX: usize = 1_048_588;

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            state_partitions: DEFAULT_TRANSACTION_STATE_PARTITIONS,
            max_timeout_ms: 900_000,
            transaction_version: v2::TRANSACTION_VERSION_EPOCH_BUMP,
            transactional_id_expiration_ms: DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
            remove_expired_interval_ms: DEFAULT_REMOVE_EXPIRED_INTERVAL_MS,
            state_batch_bytes_max: DEFAULT_STATE_BATCH_BYTES_MAX,
        }
    }
}

/// A record to append to `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnStateAppend {
    pub partition: i32,
    pub record: OffsetsRecord,
}

/// Markers to write for one transaction (Kafka's WriteTxnMarkers entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// What an event asks the broker to do, in order: appends, then markers. Expirations are
/// apart: each batch is appended by itself and reported back with
/// [`TxnCoordinator::tombstones_written`] once it is in the log.
#[derive(Debug, Default)]
pub struct TxnEffects {
    pub appends: Vec<TxnStateAppend>,
    pub markers: Vec<MarkerRequest>,
    pub expirations: Vec<ExpiryBatch>,
}

/// What InitProducerId answers.
pub type InitResult = Result<(i64, i16), ResponseError>;

/// The coordinator of every transactional id (one broker: every `__transaction_state`
/// partition is led here).
#[derive(Debug)]
pub struct TxnCoordinator {
    config: TxnConfig,
    txns: BTreeMap<String, TxnMetadata>,
    /// When [`TxnCoordinator::tick`] next looks for expired ids (set by the first tick).
    next_expiry_check_ms: Option<i64>,
}

impl TxnCoordinator {
    pub fn new(config: TxnConfig) -> TxnCoordinator {
        TxnCoordinator {
            config,
            txns: BTreeMap::new(),
            next_expiry_check_ms: None,
        }
    }

    /// The finalized `transaction.version` level.
    pub fn transaction_version(&self) -> i16 {
        self.config.transaction_version
    }

    /// The `__transaction_state` partition of a transactional id (Kafka's
    /// `partitionFor`: `abs(hashCode) % partitions`).
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        crate::partition_for_group(transactional_id, self.config.state_partitions.max(1))
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    /// An empty coordinator with this one's settings, to replay one partition into.
    pub fn empty_like(&self) -> TxnCoordinator {
        TxnCoordinator::new(self.config.clone())
    }

    /// Takes every transactional id of `loaded` (one partition replayed by itself).
    pub fn absorb(&mut self, loaded: TxnCoordinator) {
        self.txns.extend(loaded.txns);
    }

    /// Drops every transactional id stored in `partition` (leadership moved away) and
    /// returns them with their producer ids; their timeouts go with them.
    pub fn unload_partition(&mut self, partition: i32) -> Vec<(String, i64)> {
        let gone: Vec<(String, i64)> = self
            .txns
            .iter()
            .filter(|(tid, _)| self.partition_for(tid) == partition)
            .map(|(tid, m)| (tid.clone(), m.producer_id))
            .collect();
        for (tid, _) in &gone {
            self.txns.remove(tid);
        }
        gone
    }

    /// Every transactional id with its state, in id order.
    pub fn all(&self) -> impl Iterator<Item = (&String, &TxnMetadata)> {
        self.txns.iter()
    }

    fn persist(&self, tid: &str, out: &mut TxnEffects) {
        let m = &self.txns[tid];
        out.appends.push(TxnStateAppend {
            partition: self.partition_for(tid),
            record: records::record(tid, m),
        });
    }

    fn request_markers(&self, tid: &str, out: &mut TxnEffects) {
        let m = &self.txns[tid];
        out.markers.push(MarkerRequest {
            transactional_id: tid.to_string(),
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            commit: m.state == TxnState::PrepareCommit,
            partitions: m.partitions.iter().cloned().collect(),
        });
    }

    /// Move an open transaction to Prepare{Commit,Abort}, persist, and ask for markers.
    fn prepare(&mut self, tid: &str, commit: bool, now_ms: i64, out: &mut TxnEffects) {
        let m = self.txns.get_mut(tid).expect("known id");
        m.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        m.last_update_ms = now_ms;
        self.persist(tid, out);
        if self.txns[tid].partitions.is_empty() {
            self.markers_written(tid, now_ms, out);
        } else {
            self.request_markers(tid, out);
        }
    }

    /// InitProducerId with a transactional id. `new_producer_id` allocates a fresh id (a new
    /// transactional id, or an exhausted epoch). `expected` is the producer's current id and
    /// epoch (KIP-360), or `None`.
    pub fn init_producer_id(
        &mut self,
        now_ms: i64,
        tid: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
        out: &mut TxnEffects,
    ) -> InitResult {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let Some(m) = self.txns.get(tid) else {
            if self.txns.len() >= TRANSACTIONAL_IDS_MAX {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
            let pid = new_producer_id().ok_or(ResponseError::CoordinatorNotAvailable)?;
            self.txns
                .insert(tid.to_string(), TxnMetadata::new(pid, timeout_ms, now_ms));
            self.persist(tid, out);
            return Ok((pid, 0));
        };
        // KIP-360, as Kafka's `prepareIncrementProducerEpoch`: the producer's own epoch is
        // bumped; the epoch before its last bump (`last_producer_epoch`) is a retry of that
        // bump, answered with the current epoch; any other epoch, a fenced one among them (a
        // timeout or another producer's InitProducerId set the last epoch to -1), is fenced.
        let retry = match expected {
            None => false,
            Some((pid, epoch)) if pid == m.producer_id && epoch == m.producer_epoch => false,
            Some((pid, epoch))
                if pid == m.producer_id
                    && m.last_producer_epoch >= 0
                    && epoch == m.last_producer_epoch =>
            {
                true
            }
            Some(_) => return Err(ResponseError::ProducerFenced),
        };
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                // Fence the old producer: abort its transaction under a bumped epoch; the
                // client retries once the abort completed.
                self.bump_epoch(tid, new_producer_id)?;
                self.txns
                    .get_mut(tid)
                    .expect("known id")
                    .last_producer_epoch = -1;
                self.prepare(tid, false, now_ms, out);
                Err(ResponseError::ConcurrentTransactions)
            }
            _ => {
                if !retry {
                    let before = m.producer_epoch;
                    self.bump_epoch(tid, new_producer_id)?;
                    self.txns
                        .get_mut(tid)
                        .expect("known id")
                        .last_producer_epoch = if expected.is_some() { before } else { -1 };
                }
                let m = self.txns.get_mut(tid).expect("known id");
                m.timeout_ms = timeout_ms;
                m.state = TxnState::Empty;
                m.partitions.clear();
                m.start_ms = -1;
                m.last_update_ms = now_ms;
                let answer = (m.producer_id, m.producer_epoch);
                self.persist(tid, out);
                Ok(answer)
            }
        }
    }

    /// Epoch + 1, or a new producer id at epoch 0 when the epoch is exhausted.
    fn bump_epoch(
        &mut self,
        tid: &str,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
    ) -> Result<(), ResponseError> {
        let m = self.txns.get_mut(tid).expect("known id");
        if m.producer_epoch >= i16::MAX - 1 {
            m.producer_id = new_producer_id().ok_or(ResponseError::CoordinatorNotAvailable)?;
            m.producer_epoch = 0;
        } else {
            m.producer_epoch += 1;
        }
        Ok(())
    }

    /// The checks every transactional request of a producer makes first.
    fn check_producer(
        &self,
        tid: &str,
        pid: i64,
        epoch: i16,
    ) -> Result<&TxnMetadata, ResponseError> {
        let m = self
            .txns
            .get(tid)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if m.producer_id != pid {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if epoch != m.producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(m)
    }

    /// AddPartitionsToTxn (v0-v3) and AddOffsetsToTxn (with the group's `__consumer_offsets`
    /// partition). The broker checks that the partitions exist first.
    pub fn add_partitions(
        &mut self,
        now_ms: i64,
        tid: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        out: &mut TxnEffects,
    ) -> Result<(), ResponseError> {
        let m = self.check_producer(tid, pid, epoch)?;
        if m.state.is_prepare() || m.state == TxnState::PrepareEpochFence {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let new: Vec<_> = partitions
            .iter()
            .filter(|p| !m.partitions.contains(*p))
            .cloned()
            .collect();
        if m.state == TxnState::Ongoing && new.is_empty() {
            return Ok(());
        }
        if m.partitions.len() + new.len() > TXN_PARTITIONS_MAX {
            return Err(ResponseError::InvalidRequest);
        }
        let m = self.txns.get_mut(tid).expect("checked");
        if m.state != TxnState::Ongoing {
            m.partitions.clear();
            m.start_ms = now_ms;
            m.state = TxnState::Ongoing;
        }
        m.partitions.extend(new);
        m.last_update_ms = now_ms;
        self.persist(tid, out);
        Ok(())
    }

    /// AddPartitionsToTxn v4+ `verify_only` (KIP-890 part 1): is each partition in the
    /// producer's open transaction? The error per partition, 0 when it is.
    pub fn verify_partitions(
        &self,
        tid: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> Vec<i16> {
        match self.check_producer(tid, pid, epoch) {
            Err(e) => vec![e.code(); partitions.len()],
            Ok(m) => partitions
                .iter()
                .map(|p| {
                    if m.state == TxnState::Ongoing && m.partitions.contains(p) {
                        0
                    } else {
                        ResponseError::InvalidTxnState.code()
                    }
                })
                .collect(),
        }
    }

    /// EndTxn below v5 (transaction version 0/1, Kafka's `endTransactionWithTV1`): commit or
    /// abort the open transaction. A retry of a completed EndTxn succeeds; any other EndTxn
    /// with nothing open is INVALID_TXN_STATE, an abort in Empty too (clients complete an
    /// abort with no partition added without asking: Java, librdkafka, kafka-python, kafkajs,
    /// aiokafka, sarama, franz-go).
    pub fn end_txn(
        &mut self,
        now_ms: i64,
        tid: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
        out: &mut TxnEffects,
    ) -> Result<(), ResponseError> {
        let m = self.check_producer(tid, pid, epoch)?;
        match (m.state, commit) {
            (TxnState::Ongoing, _) => {
                self.prepare(tid, commit, now_ms, out);
                Ok(())
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(()),
            // The markers are on their way (Kafka's pending transition to Complete): either
            // outcome waits for them, as Kafka's `endTransactionWithTV1` answers.
            (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => {
                Err(ResponseError::ConcurrentTransactions)
            }
            _ => Err(ResponseError::InvalidTxnState),
        }
    }

    /// Every marker of `tid`'s transaction is written: complete it.
    pub fn markers_written(&mut self, tid: &str, now_ms: i64, out: &mut TxnEffects) {
        let Some(m) = self.txns.get_mut(tid) else {
            return;
        };
        m.state = match m.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return,
        };
        m.partitions.clear();
        m.start_ms = -1;
        m.last_update_ms = now_ms;
        if m.next_producer_id >= 0 {
            // The epoch bump of this EndTxn exhausted the epoch: the producer continues under
            // the new id (its markers were written under the old one).
            m.previous_producer_id = m.producer_id;
            m.producer_id = m.next_producer_id;
            m.producer_epoch = 0;
            m.next_producer_id = -1;
        }
        self.persist(tid, out);
    }

    /// Abort transactions open for longer than their timeout (Kafka's proactive abort): the
    /// epoch is bumped so the producer, still at the old epoch, is fenced. Every
    /// `remove_expired_interval_ms` (counted from the first tick) idle ids expire too.
    pub fn tick(&mut self, now_ms: i64, out: &mut TxnEffects) {
        let interval_ms = self.config.remove_expired_interval_ms.max(1);
        let due = *self
            .next_expiry_check_ms
            .get_or_insert(now_ms.saturating_add(interval_ms));
        if now_ms >= due {
            self.next_expiry_check_ms = Some(now_ms.saturating_add(interval_ms));
            self.expire_transactional_ids(now_ms, out);
        }
        let expired: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, m)| {
                m.state == TxnState::Ongoing
                    && now_ms.saturating_sub(m.start_ms) > i64::from(m.timeout_ms)
            })
            .map(|(t, _)| t.clone())
            .collect();
        for tid in expired {
            tracing::info!(transactional_id = %tid, "aborting a transaction past its timeout");
            self.fence_and_abort(&tid, now_ms, out);
        }
    }

    /// An operator's abort of an open transaction (the dashboard): the same as a timeout,
    /// the epoch is bumped so the producer is fenced, and the ABORT markers are written.
    /// Unknown id: TRANSACTIONAL_ID_NOT_FOUND; nothing open (not Ongoing): INVALID_TXN_STATE
    /// (a Prepare state already completes by itself).
    pub fn abort_open(
        &mut self,
        tid: &str,
        now_ms: i64,
        out: &mut TxnEffects,
    ) -> Result<(), ResponseError> {
        match self.txns.get(tid) {
            None => Err(ResponseError::TransactionalIdNotFound),
            Some(m) if m.state != TxnState::Ongoing => Err(ResponseError::InvalidTxnState),
            Some(_) => {
                tracing::info!(transactional_id = %tid, "aborting a transaction on request");
                self.fence_and_abort(tid, now_ms, out);
                Ok(())
            }
        }
    }

    fn fence_and_abort(&mut self, tid: &str, now_ms: i64, out: &mut TxnEffects) {
        let m = self.txns.get_mut(tid).expect("caller checked the id");
        if m.producer_epoch < i16::MAX - 1 {
            m.producer_epoch += 1;
        }
        m.last_producer_epoch = -1;
        self.prepare(tid, false, now_ms, out);
    }

    /// Earliest time a transaction may time out or ids may expire (the broker's timer sleeps
    /// until then).
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.txns
            .values()
            .filter(|m| m.state == TxnState::Ongoing)
            .map(|m| m.start_ms.saturating_add(i64::from(m.timeout_ms)) + 1)
            .chain(self.next_expiry_check_ms)
            .min()
    }

    /// Apply one `__transaction_state` record (start-up replay), later records winning.
    pub fn replay(&mut self, record: &OffsetsRecord) -> Result<(), RecordsError> {
        let tid = records::decode_key(&record.key)?;
        match &record.value {
            None => {
                self.txns.remove(&tid);
            }
            Some(v) => {
                self.txns.insert(tid, records::decode_value(v)?);
            }
        }
        Ok(())
    }

    /// After replay: finish transactions that were between Prepare and Complete at the crash.
    /// The broker leaves this to its timer's [`retry_prepared`](Self::retry_prepared) (at most
    /// a second after the load); the load logs how many there are.
    pub fn finish_replay(&mut self, _now_ms: i64, out: &mut TxnEffects) {
        for tid in self.prepared_ids() {
            tracing::info!(transactional_id = %tid, "completing a transaction found prepared at start-up");
            self.request_markers(&tid, out);
        }
    }

    /// The timer's retry: ask again for the markers of every transaction still prepared (the
    /// broker sends nothing twice for a transaction whose markers are on their way).
    pub fn retry_prepared(&mut self, out: &mut TxnEffects) {
        for tid in self.prepared_ids() {
            tracing::debug!(transactional_id = %tid, "asking again for the markers of a prepared transaction");
            self.request_markers(&tid, out);
        }
    }

    /// How many transactions are between Prepare and Complete (their markers are owed).
    pub fn prepared_count(&self) -> usize {
        self.txns.values().filter(|m| m.state.is_prepare()).count()
    }

    fn prepared_ids(&self) -> Vec<String> {
        self.txns
            .iter()
            .filter(|(_, m)| m.state.is_prepare())
            .map(|(t, _)| t.clone())
            .collect()
    }
}

//! Idempotent-producer state of one partition, as Kafka keeps it: per producer id its epoch and
//! the metadata of its last 5 batches. Used on append to detect duplicates (answered with the
//! original offsets), sequence gaps (OUT_OF_ORDER_SEQUENCE_NUMBER) and stale epochs
//! (INVALID_PRODUCER_EPOCH). Sequences wrap at `i32::MAX` to 0.

use std::collections::{BTreeMap, HashMap};

use streamforge_protocol::batch::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, RecordBatch};
use streamforge_protocol::control::{ControlType, control_type};

/// `current_txn_first_offset` of a producer with no open transaction.
pub const NO_TXN: i64 = -1;

/// `coordinator_epoch` of a producer no marker was applied for.
pub const NO_COORDINATOR_EPOCH: i32 = -1;

/// Batches remembered per producer (Kafka: `NUM_BATCHES_TO_RETAIN`, matching the clients' max
/// in-flight requests with idempotence).
pub const BATCHES_TO_RETAIN: usize = 5;
/// Bound on the number of producers tracked per partition; beyond it the least recently used
/// producer is expired early (Kafka bounds this through `producer.id.expiration.ms` only; a
/// named limit keeps memory bounded under a flood of producer ids).
pub const MAX_PRODUCERS_PER_PARTITION: usize = 100_000;

/// Metadata of one appended batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

/// One producer's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// Ring of the last batches, oldest first; only `len` are valid.
    batches: [BatchMetadata; BATCHES_TO_RETAIN],
    len: usize,
    /// Max timestamp of the last batch (drives expiry).
    pub last_timestamp: i64,
    /// Offset of the first batch of the producer's open transaction on this partition
    /// ([`NO_TXN`] when none is open): the last stable offset cannot pass it.
    pub current_txn_first_offset: i64,
    /// Coordinator epoch of the last marker applied for this producer
    /// ([`NO_COORDINATOR_EPOCH`] before any; kept in snapshots and rebuilt from the markers
    /// on recovery): a marker from an older coordinator is fenced.
    pub coordinator_epoch: i32,
}

/// A transaction ended on this partition by a control batch (COMMIT or ABORT marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the marker.
    pub last_offset: i64,
    pub kind: ControlType,
}

impl ProducerEntry {
    fn new(producer_id: i64, epoch: i16) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            epoch,
            batches: [BatchMetadata::default(); BATCHES_TO_RETAIN],
            len: 0,
            last_timestamp: -1,
            current_txn_first_offset: NO_TXN,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
        }
    }

    /// Retained batches, oldest first.
    pub fn batches(&self) -> &[BatchMetadata] {
        &self.batches[..self.len]
    }

    pub fn last_batch(&self) -> Option<&BatchMetadata> {
        self.batches().last()
    }

    /// Last sequence written (`-1` if none).
    pub fn last_seq(&self) -> i32 {
        self.last_batch().map(|b| b.last_seq).unwrap_or(NO_SEQUENCE)
    }

    /// Last offset written (`-1` if none).
    pub fn last_offset(&self) -> i64 {
        self.last_batch().map(|b| b.last_offset).unwrap_or(-1)
    }

    fn push(&mut self, meta: BatchMetadata) {
        if self.len == BATCHES_TO_RETAIN {
            self.batches.copy_within(1.., 0);
            self.len -= 1;
        }
        self.batches[self.len] = meta;
        self.len += 1;
        self.last_timestamp = meta.timestamp;
    }

    pub(crate) fn find_duplicate(
        &self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Option<BatchMetadata> {
        if epoch != self.epoch {
            return None;
        }
        self.batches()
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            .copied()
    }

    pub(crate) fn restore(
        producer_id: i64,
        epoch: i16,
        last_timestamp: i64,
        batches: &[BatchMetadata],
        current_txn_first_offset: i64,
    ) -> ProducerEntry {
        let mut e = ProducerEntry::new(producer_id, epoch);
        for b in batches.iter().rev().take(BATCHES_TO_RETAIN).rev() {
            e.push(*b);
        }
        e.last_timestamp = last_timestamp;
        e.current_txn_first_offset = current_txn_first_offset;
        e
    }
}

/// Why a producer's batch is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerError {
    /// Sequence gap or a new epoch not starting at 0: OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    OutOfOrderSequence(String),
    /// Epoch older than the last seen: INVALID_PRODUCER_EPOCH (47).
    InvalidProducerEpoch(String),
}

/// What to do with a batch from an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Accept,
    /// Already in the log: answer with these offsets, append nothing.
    Duplicate(BatchMetadata),
}

/// Kafka's `inSequence`.
fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// All producers of a partition.
#[derive(Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions: first offset -> producer id (the smallest key bounds the LSO).
    ongoing: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    pub fn new() -> ProducerStateManager {
        ProducerStateManager::default()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer, in producer-id order.
    pub fn entries(&self) -> Vec<&ProducerEntry> {
        let mut v: Vec<&ProducerEntry> = self.producers.values().collect();
        v.sort_by_key(|e| e.producer_id);
        v
    }

    /// Check one client batch against the state, with `pending` holding batches of the same
    /// request already accepted (not yet applied). Duplicates are looked up first, as Kafka does.
    pub fn check(
        &self,
        batch: &RecordBatch<'_>,
        pending: Option<&ProducerEntry>,
    ) -> Result<SequenceCheck, ProducerError> {
        let pid = batch.producer_id();
        if pid == NO_PRODUCER_ID {
            return Ok(SequenceCheck::Accept);
        }
        let epoch = batch.producer_epoch();
        let first_seq = batch.base_sequence();
        let last_seq = batch.last_sequence();
        let current = pending.or_else(|| self.producers.get(&pid));
        let Some(current) = current else {
            // Unknown producer (new, or its state expired / was deleted with the data): Kafka
            // 4.x accepts any sequence.
            return Ok(SequenceCheck::Accept);
        };
        if first_seq != NO_SEQUENCE
            && let Some(dup) = current.find_duplicate(epoch, first_seq, last_seq)
        {
            return Ok(SequenceCheck::Duplicate(dup));
        }
        if epoch < current.epoch {
            return Err(ProducerError::InvalidProducerEpoch(format!(
                "epoch {epoch} of producer {pid} is older than the last seen epoch {}",
                current.epoch
            )));
        }
        if first_seq == NO_SEQUENCE {
            return Ok(SequenceCheck::Accept);
        }
        if epoch != current.epoch {
            if first_seq != 0 && current.epoch != NO_PRODUCER_EPOCH {
                return Err(ProducerError::OutOfOrderSequence(format!(
                    "new epoch {epoch} of producer {pid} starts at sequence {first_seq}, not 0"
                )));
            }
        } else {
            let last = current.last_seq();
            if current.epoch != NO_PRODUCER_EPOCH
                && last != NO_SEQUENCE
                && !in_sequence(last, first_seq)
            {
                return Err(ProducerError::OutOfOrderSequence(format!(
                    "producer {pid} epoch {epoch}: sequence {first_seq} does not follow {last}"
                )));
            }
        }
        Ok(SequenceCheck::Accept)
    }

    /// The entry `batch` would leave behind (used to check later batches of the same request).
    pub fn updated_entry(
        &self,
        batch: &RecordBatch<'_>,
        first_offset: i64,
        pending: Option<&ProducerEntry>,
    ) -> Option<ProducerEntry> {
        let pid = batch.producer_id();
        if pid == NO_PRODUCER_ID {
            return None;
        }
        let mut entry = pending
            .cloned()
            .or_else(|| self.producers.get(&pid).cloned())
            .unwrap_or_else(|| ProducerEntry::new(pid, batch.producer_epoch()));
        Self::apply_to(&mut entry, batch, first_offset);
        Some(entry)
    }

    fn apply_to(entry: &mut ProducerEntry, batch: &RecordBatch<'_>, first_offset: i64) {
        let epoch = batch.producer_epoch();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.len = 0;
        }
        let last_offset = first_offset + i64::from(batch.last_offset_delta());
        if batch.is_control() {
            entry.current_txn_first_offset = NO_TXN;
            if let Ok(c) = streamforge_protocol::control::control_record(batch) {
                entry.coordinator_epoch = entry.coordinator_epoch.max(c.coordinator_epoch);
            }
        } else if batch.is_transactional() && entry.current_txn_first_offset == NO_TXN {
            entry.current_txn_first_offset = first_offset;
        }
        if batch.base_sequence() == NO_SEQUENCE {
            entry.last_timestamp = batch.max_timestamp();
            return;
        }
        entry.push(BatchMetadata {
            first_seq: batch.base_sequence(),
            last_seq: batch.last_sequence(),
            first_offset,
            last_offset,
            timestamp: batch.max_timestamp(),
        });
    }

    /// Record an appended batch (offsets already assigned in `batch`). No allocation unless the
    /// producer is new. A transaction marker returns the transaction it ends (`None` when the
    /// producer had written nothing transactional here since its last marker).
    pub fn apply(&mut self, batch: &RecordBatch<'_>) -> Option<CompletedTxn> {
        let pid = batch.producer_id();
        if pid == NO_PRODUCER_ID {
            return None;
        }
        if !self.producers.contains_key(&pid) && self.producers.len() >= MAX_PRODUCERS_PER_PARTITION
        {
            self.evict_oldest();
        }
        let entry = self
            .producers
            .entry(pid)
            .or_insert_with(|| ProducerEntry::new(pid, batch.producer_epoch()));
        let open_before = entry.current_txn_first_offset;
        Self::apply_to(entry, batch, batch.base_offset());
        let open_after = entry.current_txn_first_offset;
        if open_before == open_after {
            return None;
        }
        if open_before != NO_TXN {
            self.ongoing.remove(&open_before);
        }
        if open_after != NO_TXN {
            self.ongoing.insert(open_after, pid);
            return None;
        }
        // A marker ended the open transaction (a malformed marker counts as an abort: its
        // records must not become visible).
        let kind = control_type(batch).unwrap_or(ControlType::Abort);
        Some(CompletedTxn {
            producer_id: pid,
            first_offset: open_before,
            last_offset: batch.base_offset(),
            kind,
        })
    }

    /// The first offset of the oldest open transaction: no read_committed consumer may read at
    /// or past it (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Open transactions as (first offset, producer id), oldest first.
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(o, p)| (*o, *p))
    }

    fn evict_oldest(&mut self) {
        // A producer with an open transaction is never evicted: it holds the LSO.
        if let Some(pid) = self
            .producers
            .values()
            .filter(|e| e.current_txn_first_offset == NO_TXN)
            .min_by_key(|e| e.last_timestamp)
            .map(|e| e.producer_id)
        {
            tracing::warn!(
                producer_id = pid,
                "evicting producer state: too many producers"
            );
            self.producers.remove(&pid);
        }
    }

    /// Forget producers whose last batch is older than `expiration_ms` (Kafka's
    /// `producer.id.expiration.ms`). Returns how many were removed.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        // Open transactions are ended by their coordinator (timeout abort), never by expiry.
        self.producers.retain(|_, e| {
            e.current_txn_first_offset != NO_TXN
                || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    pub fn clear(&mut self) {
        self.producers.clear();
        self.ongoing.clear();
    }

    pub(crate) fn insert(&mut self, entry: ProducerEntry) {
        if let Some(old) = self.producers.get(&entry.producer_id)
            && old.current_txn_first_offset != NO_TXN
        {
            self.ongoing.remove(&old.current_txn_first_offset);
        }
        if entry.current_txn_first_offset != NO_TXN {
            self.ongoing
                .insert(entry.current_txn_first_offset, entry.producer_id);
        }
        self.producers.insert(entry.producer_id, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

    fn batch(pid: i64, epoch: i16, seq: i32, n: usize, base_offset: i64) -> Vec<u8> {
        build_simple(
            BatchSpec {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
                base_offset,
                ..BatchSpec::default()
            },
            n,
            4,
        )
    }

    fn check(m: &ProducerStateManager, b: &[u8]) -> Result<SequenceCheck, ProducerError> {
        m.check(&RecordBatch::parse(b).unwrap(), None)
    }

    fn apply(m: &mut ProducerStateManager, b: &[u8]) {
        m.apply(&RecordBatch::parse(b).unwrap());
    }

    #[test]
    fn duplicates_gaps_epochs_and_wrap() {
        let mut m = ProducerStateManager::new();
        let b0 = batch(7, 0, 0, 3, 0);
        assert_eq!(check(&m, &b0), Ok(SequenceCheck::Accept));
        apply(&mut m, &b0);
        let b1 = batch(7, 0, 3, 2, 3);
        apply(&mut m, &b1);
        // Same batch again: duplicate with its original offsets.
        match check(&m, &batch(7, 0, 0, 3, 99)).unwrap() {
            SequenceCheck::Duplicate(d) => assert_eq!((d.first_offset, d.last_offset), (0, 2)),
            other => panic!("{other:?}"),
        }
        // Gap.
        assert!(matches!(
            check(&m, &batch(7, 0, 9, 1, 0)),
            Err(ProducerError::OutOfOrderSequence(_))
        ));
        // Stale epoch... after a bump.
        let bumped = batch(7, 1, 0, 1, 5);
        assert_eq!(check(&m, &bumped), Ok(SequenceCheck::Accept));
        apply(&mut m, &bumped);
        assert!(matches!(
            check(&m, &batch(7, 0, 5, 1, 0)),
            Err(ProducerError::InvalidProducerEpoch(_))
        ));
        // New epoch must start at 0.
        assert!(matches!(
            check(&m, &batch(7, 2, 4, 1, 0)),
            Err(ProducerError::OutOfOrderSequence(_))
        ));
        // Unknown producer: any sequence.
        assert_eq!(check(&m, &batch(8, 0, 42, 1, 0)), Ok(SequenceCheck::Accept));
        // Wrap: last seq i32::MAX, next 0.
        let near = batch(9, 0, i32::MAX - 1, 2, 10);
        apply(&mut m, &near);
        assert_eq!(m.get(9).unwrap().last_seq(), i32::MAX);
        assert_eq!(check(&m, &batch(9, 0, 0, 1, 12)), Ok(SequenceCheck::Accept));
        // A batch spanning the wrap.
        let span = batch(10, 0, i32::MAX - 1, 4, 20);
        apply(&mut m, &span);
        assert_eq!(m.get(10).unwrap().last_seq(), 1);
        assert_eq!(
            check(&m, &batch(10, 0, 2, 1, 24)),
            Ok(SequenceCheck::Accept)
        );
    }

    #[test]
    fn keeps_last_five_batches() {
        let mut m = ProducerStateManager::new();
        for i in 0..8 {
            apply(&mut m, &batch(1, 0, i, 1, i64::from(i)));
        }
        let e = m.get(1).unwrap();
        assert_eq!(e.batches().len(), BATCHES_TO_RETAIN);
        assert_eq!(e.batches()[0].first_seq, 3);
        // The oldest retained is still a duplicate; older ones are out of order.
        assert!(matches!(
            check(&m, &batch(1, 0, 3, 1, 0)),
            Ok(SequenceCheck::Duplicate(_))
        ));
        assert!(check(&m, &batch(1, 0, 2, 1, 0)).is_err());
        assert_eq!(m.expire(1_000_000, 10), 1);
        assert!(m.is_empty());
    }
}

//! `transactional.id.expiration.ms`: idle ids leave the coordinator with a tombstone in
//! `__transaction_state`, as Kafka's `TransactionStateManager.removeExpiredTransactionalIds`:
//! per state partition, in batches no larger than the state log's `max.message.bytes`, and an
//! id leaves memory only once its tombstone is appended ([`TxnCoordinator::tombstones_written`]).
//! A batch whose append fails keeps its ids; the next check writes them again, so an id never
//! disappears from memory while the log still holds it (a restart would bring it back).

use std::collections::BTreeMap;

use super::{TxnCoordinator, TxnEffects, TxnState, records};
use crate::records::OffsetsRecord;

/// Bytes of a record batch's header (RecordBatch v2).
const BATCH_HEADER_BYTES: usize = 61;
/// Most bytes a tombstone record takes besides its key: length (varint, 5), attributes (1),
/// timestamp delta (varint, 10), offset delta (varint, 5), key length (varint, 5), value
/// length -1 (1), header count (1). An upper bound, so a batch never exceeds its limit.
const TOMBSTONE_OVERHEAD_BYTES_MAX: usize = 28;

/// One expired id as it was when its tombstone was prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredId {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_update_ms: i64,
}

/// Tombstones for one `__transaction_state` partition, to be appended as one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiryBatch {
    pub partition: i32,
    pub ids: Vec<ExpiredId>,
    /// One tombstone per id, in the order of `ids`.
    pub records: Vec<OffsetsRecord>,
}

impl ExpiryBatch {
    /// An upper bound of the encoded batch's size.
    pub fn bytes_max(&self) -> usize {
        BATCH_HEADER_BYTES + self.records.iter().map(tombstone_bytes_max).sum::<usize>()
    }
}

fn tombstone_bytes_max(r: &OffsetsRecord) -> usize {
    r.key.len() + TOMBSTONE_OVERHEAD_BYTES_MAX
}

impl TxnCoordinator {
    /// The ids that have no transaction open (Empty, CompleteCommit, CompleteAbort) and
    /// whose state last changed `transactional_id_expiration_ms` ago or earlier get a
    /// tombstone each, batched per partition (`out.expirations`); they stay until
    /// [`TxnCoordinator::tombstones_written`]. An open or completing transaction (Ongoing, a
    /// Prepare state) never expires. A new InitProducerId for a removed id starts it again
    /// under a fresh producer id.
    pub fn expire_transactional_ids(&mut self, now_ms: i64, out: &mut TxnEffects) {
        let horizon_ms = now_ms.saturating_sub(self.config.transactional_id_expiration_ms);
        let batch_bytes_max = self.config.state_batch_bytes_max.max(1);
        let mut by_partition: BTreeMap<i32, Vec<ExpiredId>> = BTreeMap::new();
        for (tid, m) in &self.txns {
            let idle = matches!(
                m.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            );
            if idle && m.last_update_ms <= horizon_ms {
                by_partition
                    .entry(self.partition_for(tid))
                    .or_default()
                    .push(ExpiredId {
                        transactional_id: tid.clone(),
                        producer_id: m.producer_id,
                        producer_epoch: m.producer_epoch,
                        last_update_ms: m.last_update_ms,
                    });
            }
        }
        for (partition, ids) in by_partition {
            let mut batch = ExpiryBatch {
                partition,
                ids: Vec::new(),
                records: Vec::new(),
            };
            for id in ids {
                let record = records::tombstone(&id.transactional_id);
                // A batch always takes its first record (Kafka's `hasRoomFor` on an empty
                // builder); an id is never split from its tombstone.
                let full = batch.bytes_max() + tombstone_bytes_max(&record) > batch_bytes_max;
                if !batch.ids.is_empty() && full {
                    let next = ExpiryBatch {
                        partition,
                        ids: Vec::new(),
                        records: Vec::new(),
                    };
                    out.expirations.push(std::mem::replace(&mut batch, next));
                }
                batch.ids.push(id);
                batch.records.push(record);
            }
            out.expirations.push(batch);
        }
    }

    /// `batch` is in its partition's log: its ids leave memory, unless one changed since the
    /// batch was prepared (another producer id or epoch, a new transaction, a newer update),
    /// which keeps it (Kafka's check of the pending Dead state and the epoch). Returns how
    /// many were removed.
    pub fn tombstones_written(&mut self, batch: &ExpiryBatch) -> usize {
        let mut removed = 0;
        for id in &batch.ids {
            let unchanged = self.txns.get(&id.transactional_id).is_some_and(|m| {
                m.producer_id == id.producer_id
                    && m.producer_epoch == id.producer_epoch
                    && m.last_update_ms == id.last_update_ms
                    && matches!(
                        m.state,
                        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                    )
            });
            if unchanged {
                self.txns.remove(&id.transactional_id);
                tracing::info!(transactional_id = %id.transactional_id, producer_id = id.producer_id, last_update_ms = id.last_update_ms, "transactional id expired");
                removed += 1;
            } else {
                tracing::warn!(transactional_id = %id.transactional_id, "an expired transactional id changed before its tombstone was written: kept");
            }
        }
        removed
    }

    /// The state log's largest batch (its `max.message.bytes`), which bounds a batch of
    /// tombstones.
    pub fn set_state_batch_bytes_max(&mut self, bytes: usize) {
        self.config.state_batch_bytes_max = bytes;
    }
}

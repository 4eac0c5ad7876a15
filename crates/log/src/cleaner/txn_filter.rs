//! Transactions while cleaning, Kafka's `CleanedTransactionMetadata`: walking a log's batches in
//! offset order with the aborted transactions of the range (the `.txnindex` entries), say of
//! each transactional data batch whether its transaction was aborted (its records go, and
//! are not put in the offset map), and of each marker whether a batch of its transaction was
//! seen since the transaction began (a marker stays while its transaction has data).
//!
//! Only the section below the first unstable offset is cleaned, so every transaction met here
//! has its marker: a transactional batch not inside an aborted range is committed data.

use std::collections::{HashMap, HashSet, VecDeque};

use streamforge_protocol::batch::{DELETE_HORIZON, RecordBatch};
use streamforge_protocol::control::{ControlType, control_type};

use super::batch_filter::{BatchOutcome, FilterError, RetainRules, rebase, write_batch};
use super::records::Records;
use crate::txn_index::AbortedTxn;

/// Per-pass transaction state (one per walk: offset map, then rewrite).
#[derive(Debug, Default)]
pub struct TxnFilter {
    /// Aborted transactions not reached yet, by first offset.
    pending: VecDeque<AbortedTxn>,
    /// Producer → (its aborted transaction under way, whether a data batch of it was seen).
    aborted: HashMap<i64, (AbortedTxn, bool)>,
    /// Producers with a committed (not aborted) transaction whose data was seen.
    committed: HashSet<i64>,
}

/// What the walk says about a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerFate {
    /// No batch of its transaction remains in the walk: it may go once its delete horizon
    /// has passed (Kafka keeps it `delete.retention.ms` so consumers see the end).
    pub can_discard: bool,
    /// The ABORT entry to keep in the cleaned segment's `.txnindex` (its marker stays).
    pub keep_entry: Option<AbortedTxn>,
}

impl TxnFilter {
    /// `aborted`: the log's aborted transactions overlapping the walked range.
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnFilter {
        aborted.sort_by_key(|a| a.first_offset);
        TxnFilter {
            pending: aborted.into(),
            ..TxnFilter::default()
        }
    }

    fn reach(&mut self, offset: i64) {
        while self
            .pending
            .front()
            .is_some_and(|a| a.first_offset <= offset)
        {
            let a = self.pending.pop_front().expect("front");
            self.aborted.entry(a.producer_id).or_insert((a, false));
        }
    }

    /// A data batch: true when it belongs to an aborted transaction (drop its records).
    pub fn on_data_batch(&mut self, batch: &RecordBatch<'_>) -> bool {
        self.reach(batch.last_offset());
        if !batch.is_transactional() {
            return false;
        }
        match self.aborted.get_mut(&batch.producer_id()) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.committed.insert(batch.producer_id());
                false
            }
        }
    }

    /// A control batch (marker): may it go, and which index entry stays with it.
    pub fn on_marker(&mut self, batch: &RecordBatch<'_>) -> MarkerFate {
        self.reach(batch.last_offset());
        let pid = batch.producer_id();
        match control_type(batch) {
            Some(ControlType::Abort) => match self.aborted.remove(&pid) {
                Some((entry, true)) => MarkerFate {
                    can_discard: false,
                    keep_entry: Some(entry),
                },
                _ => MarkerFate {
                    can_discard: true,
                    keep_entry: None,
                },
            },
            Some(ControlType::Commit) => MarkerFate {
                can_discard: !self.committed.remove(&pid),
                keep_entry: None,
            },
            // An unreadable or unknown marker is kept as it is.
            _ => MarkerFate {
                can_discard: false,
                keep_entry: None,
            },
        }
    }
}

/// A marker (control batch): kept whole while its transaction has data; once none is left it
/// gets a delete horizon (`delete.retention.ms` from now, stamped like a tombstone's), and a
/// pass after the horizon drops it. Kafka's two-step rule: consumers that read the data before
/// it went still meet the marker.
pub fn filter_marker(
    batch: &RecordBatch<'_>,
    rules: &RetainRules<'_>,
    txn: &mut TxnFilter,
    out: &mut Vec<u8>,
) -> Result<BatchOutcome, FilterError> {
    let fate = txn.on_marker(batch);
    let count = batch.record_count().max(0) as u64;
    let kept = BatchOutcome {
        records_kept: count,
        aborted_entry: fate.keep_entry,
        ..BatchOutcome::default()
    };
    if !fate.can_discard {
        out.extend_from_slice(batch.as_bytes());
        return Ok(kept);
    }
    if batch.attributes() & DELETE_HORIZON != 0 {
        if rules.now_ms >= batch.base_timestamp() {
            return Ok(BatchOutcome {
                records_removed: count,
                ..BatchOutcome::default()
            });
        }
        out.extend_from_slice(batch.as_bytes());
        return Ok(BatchOutcome {
            delete_horizon_ms: Some(batch.base_timestamp()),
            ..kept
        });
    }
    let horizon = rules.now_ms.saturating_add(rules.delete_retention_ms);
    let records = batch.records_bytes();
    let mut ranges = Vec::new();
    for r in Records::new(records, batch.record_count()) {
        let r = r.map_err(|source| FilterError::Malformed {
            offset: batch.base_offset(),
            source,
        })?;
        let at = r.encoded.as_ptr() as usize - records.as_ptr() as usize;
        ranges.push((at, at + r.encoded.len()));
    }
    let rebased = rebase(batch, records, &ranges, horizon)?;
    let attributes = batch.attributes() | DELETE_HORIZON;
    let max_ts = batch.max_timestamp();
    write_batch(
        batch,
        &rebased,
        ranges.len() as i32,
        horizon,
        max_ts,
        attributes,
        out,
    )?;
    Ok(BatchOutcome {
        delete_horizon_ms: Some(horizon),
        ..kept
    })
}

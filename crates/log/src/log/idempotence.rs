//! The log's side of idempotent producers: checking batches against producer state before an
//! append, recording them after it, snapshots, and rebuilding the state on open/truncation.

use std::path::PathBuf;

use streamforge_protocol::batch::{NO_PRODUCER_ID, RecordBatch};

use super::{Log, batch_error};
use crate::LogError;
use crate::producer_snapshot;
use crate::producer_state::{
    BatchMetadata, ProducerEntry, ProducerError, ProducerStateManager, SequenceCheck,
};

fn producer_error(e: ProducerError) -> LogError {
    match e {
        ProducerError::OutOfOrderSequence(m) => LogError::OutOfOrderSequence(m),
        ProducerError::InvalidProducerEpoch(m) => LogError::InvalidProducerEpoch(m),
    }
}

impl Log {
    /// Check every batch of a Produce request against the producer state (before offsets are
    /// assigned). `Ok(Some(meta))`: the request is a retry of a batch already in the log.
    /// Allocates only when one request carries several batches of an idempotent producer.
    pub(super) fn check_producers(
        &self,
        batches: &[u8],
        batch_count: usize,
    ) -> Result<Option<BatchMetadata>, LogError> {
        if batch_count == 1 {
            let view = RecordBatch::parse(batches).map_err(batch_error)?;
            if view.producer_id() == NO_PRODUCER_ID {
                return Ok(None);
            }
            return match self.producers.check(&view, None).map_err(producer_error)? {
                SequenceCheck::Duplicate(meta) => Ok(Some(meta)),
                SequenceCheck::Accept => Ok(None),
            };
        }
        let mut pending: Vec<ProducerEntry> = Vec::new();
        let mut next_offset = self.next_offset;
        let mut position = 0;
        while position < batches.len() {
            let view = RecordBatch::parse(&batches[position..]).map_err(batch_error)?;
            position += view.size_bytes();
            let first_offset = next_offset;
            next_offset += i64::from(view.last_offset_delta()) + 1;
            if view.producer_id() == NO_PRODUCER_ID {
                continue;
            }
            let slot = pending
                .iter()
                .position(|e| e.producer_id == view.producer_id());
            let current = slot.map(|i| &pending[i]);
            if let SequenceCheck::Duplicate(meta) = self
                .producers
                .check(&view, current)
                .map_err(producer_error)?
            {
                return Ok(Some(meta));
            }
            if let Some(updated) = self.producers.updated_entry(&view, first_offset, current) {
                match slot {
                    Some(i) => pending[i] = updated,
                    None => pending.push(updated),
                }
            }
        }
        Ok(None)
    }

    /// Record appended batches (offsets assigned) in the producer state; an ABORT marker among
    /// them is added to the aborted-transaction index.
    pub(super) fn apply_producers(&mut self, batches: &[u8]) -> Result<(), LogError> {
        let mut position = 0;
        while position < batches.len() {
            let Ok(view) = RecordBatch::parse(&batches[position..]) else {
                return Ok(());
            };
            self.txn_verifications.on_append(&view);
            if let Some(done) = self.producers.apply(&view) {
                self.index_completed_txn(done)?;
            }
            position += view.size_bytes();
        }
        Ok(())
    }

    /// Write the producer state (every batch below `offset` applied) to `<offset>.snapshot`.
    pub(crate) fn take_producer_snapshot(&self, offset: i64) -> Result<(), LogError> {
        producer_snapshot::write(&self.dir, offset, &self.producers)?;
        Ok(())
    }

    /// Rebuild the producer state for the current log end: load the newest intact snapshot at or
    /// below it (deleting newer ones) and replay the batches after it.
    pub(crate) fn rebuild_producer_state(&mut self) -> Result<(), LogError> {
        producer_snapshot::delete_above(&self.dir, self.next_offset)?;
        let first_base = *self.segments.keys().next().expect("active segment");
        let mut state = ProducerStateManager::new();
        let mut from = first_base;
        for offset in producer_snapshot::list(&self.dir)?.into_iter().rev() {
            match producer_snapshot::read(&self.dir, offset) {
                Ok(entries) => {
                    for e in entries {
                        state.insert(e);
                    }
                    from = offset.max(first_base);
                    break;
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset, error = %e, "ignoring damaged producer snapshot");
                }
            }
        }
        let mut replayed = 0u64;
        let mut completed = Vec::new();
        for seg in self.segments.values() {
            if seg.next_offset() <= from {
                continue;
            }
            seg.for_each_batch_from(from, |view| {
                if let Some(done) = state.apply(view) {
                    let lso = state
                        .first_unstable_offset()
                        .unwrap_or(done.last_offset + 1);
                    completed.push((done, lso));
                }
                replayed += 1;
            });
        }
        tracing::debug!(dir = %self.dir.display(), from, replayed, producers = state.len(), "rebuilt producer state");
        self.producers = state;
        self.rebuild_aborted_index(from, &completed)?;
        Ok(())
    }

    /// Make sure `<offset>.snapshot` (the producer state with every batch below `offset`
    /// applied) exists, `offset` being a segment boundary of this log or its end: what tiered
    /// storage uploads with the segment ending there (KIP-405's producer snapshot at the
    /// segment's next offset). A roll writes it; when it is gone (snapshots are not fsynced) it
    /// is rebuilt from the newest intact snapshot below `offset` and the batches between.
    /// Returns its path, or `None` when `offset` is outside the local log.
    pub fn ensure_producer_snapshot(&self, offset: i64) -> Result<Option<PathBuf>, LogError> {
        let path = producer_snapshot::snapshot_path(&self.dir, offset);
        if path.exists() {
            return Ok(Some(path));
        }
        let first_base = *self.segments.keys().next().expect("active segment");
        if offset < first_base || offset > self.next_offset {
            return Ok(None);
        }
        if offset == self.next_offset {
            self.take_producer_snapshot(offset)?;
            return Ok(Some(path));
        }
        let mut state = ProducerStateManager::new();
        let mut from = first_base;
        for o in producer_snapshot::list(&self.dir)?.into_iter().rev() {
            if o > offset {
                continue;
            }
            if let Ok(entries) = producer_snapshot::read(&self.dir, o) {
                for e in entries {
                    state.insert(e);
                }
                from = o.max(first_base);
                break;
            }
        }
        for seg in self.segments.values() {
            if seg.next_offset() <= from || seg.base_offset() >= offset {
                continue;
            }
            seg.for_each_batch_from(from, |view| {
                if view.base_offset() < offset {
                    state.apply(view);
                }
            });
        }
        producer_snapshot::write(&self.dir, offset, &state)?;
        tracing::debug!(dir = %self.dir.display(), offset, from, "rebuilt a missing producer snapshot");
        Ok(Some(path))
    }

    /// A follower restarted empty at `offset` above the remote log (OFFSET_MOVED_TO_TIERED_STORAGE)
    /// takes the producer state as of `offset` from the remote producer snapshot of the segment
    /// ending there (`bytes`, our snapshot format), as Kafka's follower builds it from the remote
    /// snapshot: producers' last sequences (idempotence) and the first offsets of their open
    /// transactions, so a later ABORT marker ends its transaction here, indexes it, and the
    /// last stable offset stays below it meanwhile. The state is also written to
    /// `<offset>.snapshot`, so a restart finds it. Only on a log that is empty at `offset`.
    /// Returns how many producers were loaded.
    pub fn load_producer_snapshot_at_start(
        &mut self,
        offset: i64,
        bytes: &[u8],
    ) -> Result<usize, LogError> {
        if self.next_offset != offset || self.log_start_offset != offset {
            return Err(LogError::InvalidRecord(format!(
                "producer snapshot at {offset} for a log holding {}..{}",
                self.log_start_offset, self.next_offset
            )));
        }
        let entries = producer_snapshot::decode(bytes, offset)?;
        let mut state = ProducerStateManager::new();
        let loaded = entries.len();
        for e in entries {
            state.insert(e);
        }
        self.producers = state;
        self.take_producer_snapshot(offset)?;
        Ok(loaded)
    }

    /// Producer state of this partition (DescribeProducers), in producer-id order.
    pub fn producers(&self) -> Vec<ProducerEntry> {
        self.producers.entries().into_iter().cloned().collect()
    }

    /// Forget producers idle for longer than `producer.id.expiration.ms`.
    pub(super) fn expire_producers(&mut self, now_ms: i64) {
        let removed = self
            .producers
            .expire(now_ms, self.config.producer_id_expiration_ms);
        self.txn_verifications
            .expire(now_ms, self.config.producer_id_expiration_ms);
        if removed > 0 {
            tracing::debug!(dir = %self.dir.display(), removed, "expired idle producers");
        }
    }
}

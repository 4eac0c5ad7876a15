//! The committed metadata log every quorum implementation keeps: batches in commit order, each
//! record at its own offset, plus the image they build (for snapshots). A batch with a record
//! that does not apply is dropped whole, the same way on every voter, so replicas never
//! diverge.

use std::collections::VecDeque;

use super::{NodeId, QuorumError};
use crate::image::{LogPosition, MetadataImage};
use crate::records::Record;
use crate::snapshot::{Snapshot, SnapshotError};

/// Committed batches kept for readers; older ones are only in the snapshot.
pub const BATCHES_RETAINED_MAX: usize = 10_000;

/// A committed batch: its records take offsets `base.offset ..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedBatch {
    pub base: LogPosition,
    pub proposer: NodeId,
    pub seq: u64,
    pub records: Vec<Record>,
}

impl CommittedBatch {
    /// Each record with its position.
    pub fn positioned(&self) -> impl Iterator<Item = (&Record, LogPosition)> {
        self.records.iter().enumerate().map(|(i, r)| {
            let at = LogPosition {
                offset: self.base.offset + i as i64,
                epoch: self.base.epoch,
            };
            (r, at)
        })
    }

    pub fn last_offset(&self) -> i64 {
        self.base.offset + self.records.len() as i64 - 1
    }
}

/// Committed batches and the image they build.
#[derive(Debug, Clone)]
pub struct CommittedLog {
    image: MetadataImage,
    batches: VecDeque<CommittedBatch>,
}

impl Default for CommittedLog {
    fn default() -> Self {
        CommittedLog {
            image: MetadataImage::empty(),
            batches: VecDeque::new(),
        }
    }
}

impl CommittedLog {
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// Append a committed batch written in `epoch`. Returns the batch, or `None` when a record
    /// did not apply (the batch is then dropped on every voter alike) or it was empty.
    pub fn append(
        &mut self,
        proposer: NodeId,
        seq: u64,
        records: Vec<Record>,
        epoch: i32,
    ) -> Option<&CommittedBatch> {
        let base = LogPosition {
            offset: self.image.position().offset + 1,
            epoch,
        };
        let batch = CommittedBatch {
            base,
            proposer,
            seq,
            records,
        };
        if batch.records.is_empty() {
            return None;
        }
        match self.image.apply_all(batch.positioned()) {
            Ok((image, _)) => self.image = image,
            Err(error) => {
                tracing::error!(%error, proposer, seq, "dropping a committed batch that does not apply");
                return None;
            }
        }
        if self.batches.len() >= BATCHES_RETAINED_MAX {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.batches.back()
    }

    pub fn read(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError> {
        let first = self
            .batches
            .front()
            .map_or(self.image.position().offset + 1, |b| b.base.offset);
        if from_offset < first && from_offset <= self.image.position().offset {
            return Err(QuorumError::Compacted {
                from: from_offset,
                first,
            });
        }
        Ok(self
            .batches
            .iter()
            .filter(|b| b.last_offset() >= from_offset)
            .take(max_batches)
            .cloned()
            .collect())
    }

    pub fn snapshot(&self) -> Snapshot {
        self.image.snapshot()
    }

    /// Replace everything with a snapshot (a voter that fell behind the leader's log).
    pub fn restore(&mut self, snapshot: &Snapshot) -> Result<(), SnapshotError> {
        self.image = MetadataImage::load(snapshot)?;
        self.batches.clear();
        Ok(())
    }
}

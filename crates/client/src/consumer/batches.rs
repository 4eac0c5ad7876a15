//! Whole-batch consumption: [`Consumer::poll_batches`] hands out each fetched RecordBatch
//! (CRC verified when `check_crcs` is on) with its offsets and record count read from the batch
//! header, without materialising a [`ConsumerRecord`] per record. For counting and forwarding
//! consumers (benchmarks, mirroring); [`ConsumedBatch::records`] decodes on demand.
use std::sync::Arc;
use std::time::Duration;

use super::{Consumer, ConsumerRecord, Delivery};
use crate::error::{ClientError, Result};
use crate::records::RawBatch;

/// One fetched record batch of a partition.
#[derive(Debug, Clone)]
pub struct ConsumedBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    /// First offset handed out from this batch (the fetch position when the batch started
    /// before it, else the batch's base offset).
    pub first_offset: i64,
    /// The batch's last offset.
    pub last_offset: i64,
    /// Records at or after `first_offset`.
    pub record_count: u32,
    /// The batch as stored (header included; compressed if the producer compressed it).
    pub batch: RawBatch,
}

impl ConsumedBatch {
    /// `None` for control batches (transaction markers carry no user records).
    pub(super) fn new(
        tp: &(Arc<str>, i32),
        batch: RawBatch,
        position: i64,
    ) -> Result<Option<Self>> {
        if batch.header.is_control() {
            return Ok(None);
        }
        let first_offset = batch.header.base_offset.max(position);
        let record_count = if batch.header.base_offset >= position {
            u32::try_from(batch.header.record_count)
                .map_err(|_| ClientError::corrupt("negative record count"))?
        } else {
            // The position is inside the batch (after a seek): count what is left.
            let mut n = 0u32;
            for r in batch.records()? {
                if r?.offset >= position {
                    n += 1;
                }
            }
            n
        };
        Ok(Some(Self {
            topic: tp.0.clone(),
            partition: tp.1,
            first_offset,
            last_offset: batch.header.last_offset(),
            record_count,
            batch,
        }))
    }

    /// Decodes the batch's records from `first_offset` on.
    pub fn records(&self) -> Result<Vec<ConsumerRecord>> {
        let mut out = Vec::with_capacity(self.record_count as usize);
        for r in self.batch.records()? {
            let r = r?;
            if r.offset < self.first_offset {
                continue;
            }
            out.push(ConsumerRecord {
                topic: self.topic.clone(),
                partition: self.partition,
                offset: r.offset,
                timestamp_ms: r.timestamp_ms,
                key: r.key,
                value: r.value,
                headers: r.headers,
            });
        }
        Ok(out)
    }
}

impl Consumer {
    /// Like [`Consumer::poll`], but returns whole record batches (CRC-verified when
    /// `check_crcs` is on) instead of records. Positions advance past every returned batch.
    pub async fn poll_batches(&mut self, timeout: Duration) -> Result<Vec<ConsumedBatch>> {
        self.delivery = Delivery::Batches;
        let r = self.poll_inner(timeout).await;
        self.delivery = Delivery::Records;
        r?;
        if !self.buffered.is_empty() {
            return Err(ClientError::InvalidArgument(
                "records of an earlier poll are still buffered".into(),
            ));
        }
        let out = self.buffered_batches.drain(..).collect();
        // Pipelining, as in `poll`.
        self.start_fetches();
        Ok(out)
    }
}

//! Multi-record sends: many records appended to their partitions' open batches under one
//! accumulator lock and one buffer-memory reservation (what librdkafka's `produce_batch`
//! offers), instead of one lock and one semaphore operation per record.
use std::sync::atomic::Ordering;

use super::{Producer, now_ms};
use crate::accumulator::{AppendedRun, BatchOffsets, BatchRecord, reserved_bytes};
use crate::error::{ClientError, Result};
use crate::records::BatchBuilder;

/// Where a run of records of one [`Producer::send_batch`] call landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveredRun {
    pub partition: i32,
    /// Offset of the run's first record (-1 when unknown, e.g. acks=0).
    pub base_offset: i64,
    pub count: i32,
}

/// Resolves once every batch that records of one `send_batch` call went to is done.
#[derive(Debug, Clone)]
pub struct BatchDelivery {
    runs: Vec<AppendedRun>,
}

impl BatchDelivery {
    /// Records in this delivery.
    pub fn record_count(&self) -> usize {
        self.runs.iter().map(|r| r.count as usize).sum()
    }

    /// One delivery per batch these records went to, so each can be awaited (and timed) on
    /// its own: a run of records acknowledged with the first batch need not wait for the last.
    pub fn per_batch(self) -> impl Iterator<Item = BatchDelivery> {
        self.runs
            .into_iter()
            .map(|run| BatchDelivery { runs: vec![run] })
    }

    /// Waits for all runs; the first failure is returned as an error.
    pub async fn wait(self) -> Result<Vec<DeliveredRun>> {
        let mut out = Vec::with_capacity(self.runs.len());
        for run in self.runs {
            match run.completion.wait().await {
                Ok(BatchOffsets { base_offset, .. }) => out.push(DeliveredRun {
                    partition: run.partition,
                    base_offset: if base_offset < 0 {
                        -1
                    } else {
                        base_offset + i64::from(run.first_index_in_batch)
                    },
                    count: run.count,
                }),
                Err(f) => {
                    return Err(match f.code {
                        Some(code) => ClientError::kafka(code, f.message),
                        None => ClientError::Protocol(f.message),
                    });
                }
            }
        }
        Ok(out)
    }
}

impl Producer {
    /// Buffers many records of one topic at once: to `partition`, or (when `None`) by key
    /// (murmur2) and, for keyless records, to the sticky partition. Records without a
    /// timestamp get the time of this call. Waits only for metadata or buffer memory (taken
    /// once for the whole call; calls larger than the buffer memory are split).
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: Option<i32>,
        records: &[BatchRecord<'_>],
    ) -> Result<BatchDelivery> {
        let inner = &self.inner;
        let memory_bytes = inner.config.buffer_memory_bytes;
        let mut runs = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            // Take as many records as fit into the buffer memory at once.
            let mut reserve = 0usize;
            let mut take = 0usize;
            for r in rest {
                let est = reserved_bytes(
                    BatchBuilder::estimate_record_bytes(r.key, r.value, r.headers),
                    memory_bytes,
                );
                if take > 0 && reserve + est > memory_bytes {
                    break;
                }
                reserve += est;
                take += 1;
            }
            let (chunk, tail) = rest.split_at(take);
            rest = tail;
            runs.extend(self.append_chunk(topic, partition, chunk, reserve).await?);
        }
        Ok(BatchDelivery { runs })
    }

    async fn append_chunk(
        &self,
        topic: &str,
        partition: Option<i32>,
        chunk: &[BatchRecord<'_>],
        reserve_bytes: usize,
    ) -> Result<Vec<AppendedRun>> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        inner.ensure_topic(topic).await?;
        inner
            .reserve_memory(reserve_bytes, "records too large")
            .await?;
        let appended = {
            let mut acc = inner.acc.lock();
            let was_empty = !acc.has_buffered();
            acc.append_many(
                topic,
                partition,
                chunk,
                now_ms(),
                inner.config.buffer_memory_bytes,
            )
            .map(|(runs, ready)| (runs, ready || was_empty))
        };
        let Some((runs, wake)) = appended else {
            inner.memory.add_permits(reserve_bytes);
            return Err(ClientError::UnknownTopicOrPartition(match partition {
                Some(p) => format!("{topic}-{p}"),
                None => topic.to_string(),
            }));
        };
        if wake || runs.iter().any(|r| r.first_index_in_batch == 0) {
            inner.wake_sender.notify_one();
        }
        Ok(runs)
    }
}

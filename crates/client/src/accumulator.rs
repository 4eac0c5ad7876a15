//! The producer's record accumulator: one open batch per partition plus a queue of closed
//! batches waiting to be sent (or re-sent). Pure data structure; the sender drives it.
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::compression::Compression;
use crate::error::Result;
use crate::partitioner::Partitioner;
use crate::records::{BatchBuilder, Header};

/// Outcome of one batch, shared by the delivery futures of its records.
#[derive(Debug, Default)]
pub struct BatchCompletion {
    result: OnceLock<std::result::Result<BatchOffsets, DeliveryFailure>>,
    notify: Notify,
}

/// Where a batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOffsets {
    /// Offset of the first record (-1 when unknown, e.g. acks=0).
    pub base_offset: i64,
    /// Broker append time when the topic uses LogAppendTime, else -1.
    pub log_append_time_ms: i64,
}

/// Why a batch could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailure {
    pub code: Option<i16>,
    pub message: String,
}

impl BatchCompletion {
    pub fn complete(&self, r: std::result::Result<BatchOffsets, DeliveryFailure>) {
        let _ = self.result.set(r);
        self.notify.notify_waiters();
    }

    pub fn get(&self) -> Option<&std::result::Result<BatchOffsets, DeliveryFailure>> {
        self.result.get()
    }

    pub async fn wait(&self) -> std::result::Result<BatchOffsets, DeliveryFailure> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            notified.await;
        }
    }
}

/// A batch still accepting records.
#[derive(Debug)]
pub struct OpenBatch {
    pub builder: BatchBuilder,
    pub completion: Arc<BatchCompletion>,
    pub created: Instant,
    pub reserved_bytes: usize,
}

/// A closed batch, ready to be sent.
#[derive(Debug)]
pub struct ReadyBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    pub builder: Option<BatchBuilder>,
    /// The encoded batch, fixed once a sequence is assigned (retries resend the same bytes).
    pub bytes: Option<Bytes>,
    pub record_count: i32,
    pub base_sequence: i32,
    pub completion: Arc<BatchCompletion>,
    pub created: Instant,
    pub reserved_bytes: usize,
    pub attempts: u32,
    pub not_before: Option<Instant>,
}

impl ReadyBatch {
    /// Encodes the batch (once): assigns the header fields and compresses.
    pub fn encode(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Result<Bytes> {
        if let Some(b) = &self.bytes {
            return Ok(b.clone());
        }
        let builder = self
            .builder
            .take()
            .expect("a batch is either built or encoded");
        let bytes = builder.finish(producer_id, producer_epoch, base_sequence)?;
        self.base_sequence = base_sequence;
        self.bytes = Some(bytes.clone());
        Ok(bytes)
    }
}

#[derive(Debug, Default)]
pub struct PartitionQueue {
    pub open: Option<OpenBatch>,
    pub ready: VecDeque<ReadyBatch>,
    /// Next sequence number for this partition (idempotent producer).
    pub next_sequence: i32,
    /// Batches of this partition currently in a request.
    pub in_flight: usize,
}

#[derive(Debug)]
pub struct TopicQueues {
    pub name: Arc<str>,
    pub partitions: Vec<PartitionQueue>,
}

/// Per-record handle into its batch.
#[derive(Debug, Clone)]
pub struct Appended {
    pub topic: Arc<str>,
    pub partition: i32,
    pub completion: Arc<BatchCompletion>,
    pub index_in_batch: i32,
    pub timestamp_ms: i64,
}

/// One record of a multi-record append (topic and partition are given per call).
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
    /// Create time; `None` means the call's time.
    pub timestamp_ms: Option<i64>,
}

impl<'a> BatchRecord<'a> {
    pub fn value(value: &'a [u8]) -> Self {
        Self {
            value: Some(value),
            ..Default::default()
        }
    }
}

/// Consecutive records of one multi-record append that went into the same batch.
#[derive(Debug, Clone)]
pub struct AppendedRun {
    pub partition: i32,
    pub completion: Arc<BatchCompletion>,
    pub first_index_in_batch: i32,
    pub count: i32,
}

/// Settings the accumulator needs.
#[derive(Debug, Clone, Copy)]
pub struct AccumulatorConfig {
    pub batch_size_bytes: usize,
    pub linger: Duration,
    pub compression: Compression,
}

#[derive(Debug)]
pub struct Accumulator {
    pub config: AccumulatorConfig,
    pub topics: HashMap<Arc<str>, TopicQueues>,
    pub partitioner: Partitioner,
    /// Reusable buffers from sent batches.
    spare_buffers: Vec<bytes::BytesMut>,
}

/// Buffer memory a record of `record_bytes` holds while buffered (at least 1, at most all).
pub fn reserved_bytes(record_bytes: usize, buffer_memory_bytes: usize) -> usize {
    record_bytes.min(buffer_memory_bytes).max(1)
}

/// Buffers kept for reuse.
const MAX_SPARE_BUFFERS: usize = 64;

/// Kafka sequence numbers wrap from Int32 max to 0.
pub fn increment_sequence(seq: i32, by: i32) -> i32 {
    if seq > i32::MAX - by {
        by - (i32::MAX - seq) - 1
    } else {
        seq + by
    }
}

impl Accumulator {
    pub fn new(config: AccumulatorConfig) -> Self {
        Self {
            config,
            topics: HashMap::new(),
            partitioner: Partitioner::default(),
            spare_buffers: Vec::new(),
        }
    }

    /// Known partition count of a topic (0 if unknown).
    pub fn partition_count(&self, topic: &str) -> usize {
        self.topics.get(topic).map_or(0, |t| t.partitions.len())
    }

    /// Registers (or grows) a topic with `partitions` partitions.
    pub fn ensure_topic(&mut self, topic: &str, partitions: usize) {
        let t = self
            .topics
            .entry(Arc::from(topic))
            .or_insert_with(|| TopicQueues {
                name: Arc::from(topic),
                partitions: Vec::new(),
            });
        while t.partitions.len() < partitions {
            t.partitions.push(PartitionQueue::default());
        }
    }

    /// Appends a record; returns its handle and whether a batch became ready (sender should wake).
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
        timestamp_ms: i64,
        reserved_bytes: usize,
    ) -> Option<(Appended, bool)> {
        let config = self.config;
        let t = self.topics.get_mut(topic)?;
        let n = t.partitions.len() as i32;
        let partition = match partition {
            Some(p) if (0..n).contains(&p) => p,
            Some(_) => return None,
            None => self.partitioner.partition(topic, key, n),
        };
        let topic_name = t.name.clone();
        let q = &mut t.partitions[partition as usize];
        let record_bytes = BatchBuilder::estimate_record_bytes(key, value, headers);
        let mut became_ready = false;
        if let Some(open) = &q.open
            && !open.builder.is_empty()
            && open.builder.size_bytes() + record_bytes > config.batch_size_bytes
        {
            let open = q.open.take().expect("checked above");
            q.ready
                .push_back(close(topic_name.clone(), partition, open));
            self.partitioner.on_batch_closed(topic, partition, n);
            became_ready = true;
        }
        let open = q
            .open
            .get_or_insert_with(|| new_open_batch(&config, &mut self.spare_buffers, record_bytes));
        let index_in_batch = open.builder.record_count();
        open.builder.append(timestamp_ms, key, value, headers);
        open.reserved_bytes += reserved_bytes;
        let appended = Appended {
            topic: topic_name.clone(),
            partition,
            completion: open.completion.clone(),
            index_in_batch,
            timestamp_ms,
        };
        if open.builder.size_bytes() >= config.batch_size_bytes {
            let open = q.open.take().expect("just inserted");
            q.ready.push_back(close(topic_name, partition, open));
            self.partitioner.on_batch_closed(topic, partition, n);
            became_ready = true;
        }
        Some((appended, became_ready))
    }

    /// Appends many records under one call: the topic is looked up once, the partition once
    /// per record run (explicit, keyed, or the sticky partition until its batch closes).
    /// Each record's reserved buffer memory is [`reserved_bytes`] of it (the caller took that
    /// much in total). Returns the runs of records per batch and whether a batch became ready.
    /// `None` if the topic is unknown or an explicit partition is out of range (nothing is
    /// appended then).
    pub fn append_many(
        &mut self,
        topic: &str,
        partition: Option<i32>,
        records: &[BatchRecord<'_>],
        timestamp_ms: i64,
        buffer_memory_bytes: usize,
    ) -> Option<(Vec<AppendedRun>, bool)> {
        let config = self.config;
        let t = self.topics.get_mut(topic)?;
        let n = t.partitions.len() as i32;
        if let Some(p) = partition
            && !(0..n).contains(&p)
        {
            return None;
        }
        let topic_name = t.name.clone();
        let mut runs: Vec<AppendedRun> = Vec::new();
        let mut became_ready = false;
        let mut sticky: Option<i32> = None;
        for r in records {
            let p = match (partition, r.key) {
                (Some(p), _) => p,
                (None, Some(k)) => crate::partitioner::partition_for_key(k, n),
                (None, None) => {
                    *sticky.get_or_insert_with(|| self.partitioner.partition(topic, None, n))
                }
            };
            let q = &mut t.partitions[p as usize];
            let record_bytes = BatchBuilder::estimate_record_bytes(r.key, r.value, r.headers);
            let ts = r.timestamp_ms.unwrap_or(timestamp_ms);
            if let Some(open) = &q.open
                && !open.builder.is_empty()
                && open.builder.size_bytes() + record_bytes > config.batch_size_bytes
            {
                let open = q.open.take().expect("checked above");
                q.ready.push_back(close(topic_name.clone(), p, open));
                self.partitioner.on_batch_closed(topic, p, n);
                sticky = None;
                became_ready = true;
            }
            let open = q.open.get_or_insert_with(|| {
                new_open_batch(&config, &mut self.spare_buffers, record_bytes)
            });
            let index_in_batch = open.builder.record_count();
            open.builder.append(ts, r.key, r.value, r.headers);
            open.reserved_bytes += reserved_bytes(record_bytes, buffer_memory_bytes);
            match runs.last_mut() {
                Some(run) if Arc::ptr_eq(&run.completion, &open.completion) => run.count += 1,
                _ => runs.push(AppendedRun {
                    partition: p,
                    completion: open.completion.clone(),
                    first_index_in_batch: index_in_batch,
                    count: 1,
                }),
            }
            if open.builder.size_bytes() >= config.batch_size_bytes {
                let open = q.open.take().expect("just inserted");
                q.ready.push_back(close(topic_name.clone(), p, open));
                self.partitioner.on_batch_closed(topic, p, n);
                sticky = None;
                became_ready = true;
            }
        }
        Some((runs, became_ready))
    }

    /// Closes open batches older than the linger time (all of them when `flush`), returning
    /// the earliest instant at which another open batch will expire.
    pub fn close_expired(&mut self, now: Instant, flush: bool) -> Option<Instant> {
        let linger = self.config.linger;
        let mut next: Option<Instant> = None;
        for t in self.topics.values_mut() {
            let n = t.partitions.len() as i32;
            for (i, q) in t.partitions.iter_mut().enumerate() {
                let Some(open) = &q.open else { continue };
                let deadline = open.created + linger;
                if flush || deadline <= now {
                    let open = q.open.take().expect("checked above");
                    q.ready.push_back(close(t.name.clone(), i as i32, open));
                    self.partitioner.on_batch_closed(&t.name, i as i32, n);
                } else {
                    next = Some(next.map_or(deadline, |d| d.min(deadline)));
                }
            }
        }
        next
    }

    /// Whether any record is buffered (open or queued).
    pub fn has_buffered(&self) -> bool {
        self.topics.values().any(|t| {
            t.partitions
                .iter()
                .any(|q| q.open.is_some() || !q.ready.is_empty())
        })
    }

    /// Returns a sent batch's buffer for reuse.
    pub fn recycle(&mut self, bytes: Bytes) {
        if self.spare_buffers.len() < MAX_SPARE_BUFFERS
            && let Ok(buf) = bytes.try_into_mut()
        {
            self.spare_buffers.push(buf);
        }
    }
}

fn close(topic: Arc<str>, partition: i32, open: OpenBatch) -> ReadyBatch {
    ReadyBatch {
        topic,
        partition,
        record_count: open.builder.record_count(),
        builder: Some(open.builder),
        bytes: None,
        base_sequence: -1,
        completion: open.completion,
        created: open.created,
        reserved_bytes: open.reserved_bytes,
        attempts: 0,
        not_before: None,
    }
}

/// A new open batch for a record of `record_bytes`, on a spare buffer when there is one.
fn new_open_batch(
    config: &AccumulatorConfig,
    spare_buffers: &mut Vec<bytes::BytesMut>,
    record_bytes: usize,
) -> OpenBatch {
    let builder = match spare_buffers.pop() {
        Some(buf) => BatchBuilder::with_buffer(config.compression, buf),
        None => BatchBuilder::new(
            config.compression,
            config.batch_size_bytes.max(record_bytes + 128),
        ),
    };
    OpenBatch {
        builder,
        completion: Arc::new(BatchCompletion::default()),
        created: Instant::now(),
        reserved_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(batch_size_bytes: usize) -> Accumulator {
        let mut a = Accumulator::new(AccumulatorConfig {
            batch_size_bytes,
            linger: Duration::from_millis(5),
            compression: Compression::None,
        });
        a.ensure_topic("t", 3);
        a
    }

    #[test]
    fn batches_close_at_batch_size() {
        let mut a = acc(1000);
        let mut ready = 0;
        for _ in 0..100 {
            let (_, r) = a
                .append("t", Some(1), None, Some(&[0u8; 90]), &[], 1, 100)
                .unwrap();
            ready += usize::from(r);
        }
        let q = &a.topics["t"].partitions[1];
        assert_eq!(ready, q.ready.len());
        assert!(ready >= 9, "{ready}");
        for b in &q.ready {
            assert!(b.builder.as_ref().unwrap().size_bytes() <= 1000);
            assert!(b.record_count >= 8);
        }
    }

    #[test]
    fn linger_closes_open_batches() {
        let mut a = acc(1 << 20);
        a.append("t", Some(0), Some(b"k"), Some(b"v"), &[], 1, 10)
            .unwrap();
        let now = Instant::now();
        assert!(a.close_expired(now, false).is_some());
        assert!(a.topics["t"].partitions[0].ready.is_empty());
        a.close_expired(now + Duration::from_millis(10), false);
        assert_eq!(a.topics["t"].partitions[0].ready.len(), 1);
    }

    #[test]
    fn keyed_records_follow_murmur2() {
        let mut a = acc(1 << 20);
        let (h, _) = a
            .append("t", None, Some(b"foobar"), Some(b"v"), &[], 1, 10)
            .unwrap();
        assert_eq!(
            h.partition,
            crate::partitioner::partition_for_key(b"foobar", 3)
        );
        assert!(a.append("t", Some(7), None, None, &[], 1, 1).is_none());
        assert!(a.append("unknown", None, None, None, &[], 1, 1).is_none());
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }
}

//! The producer: batching per partition, compression, acks, bounded in-flight requests,
//! retries with backoff and idempotence (producer id + per-partition sequences).
use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, warn};

use crate::accumulator::{
    Accumulator, AccumulatorConfig, BatchOffsets, DeliveryFailure, ReadyBatch, increment_sequence,
};
use crate::cluster::{ClientConfig, Cluster};
use crate::compression::Compression;
use crate::error::{ClientError, Result};
use crate::records::Header;
use kafka_protocol::ResponseError;

mod batch;

pub use batch::{BatchDelivery, DeliveredRun};

/// Highest Produce version this client speaks (12+ needs KIP-890 transactions v2).
const PRODUCE_MAX_VERSION: i16 = 11;
const INIT_PRODUCER_ID_MAX_VERSION: i16 = 4;
/// Upper bound on requests in flight per broker regardless of configuration.
pub const MAX_IN_FLIGHT_LIMIT: usize = 64;

/// Acknowledgement level of produce requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: the broker does not answer.
    None,
    /// The leader has appended the batch.
    Leader,
    /// Every in-sync replica has it.
    All,
}

impl Acks {
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("acks must be 0, 1 or all, not '{other}'")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub client: ClientConfig,
    pub acks: Acks,
    /// Close a partition's batch when it reaches this many (uncompressed) bytes (`batch.size`).
    pub batch_size_bytes: usize,
    /// Wait up to this long for more records before sending a batch (`linger.ms`).
    pub linger_ms: u64,
    pub compression: Compression,
    /// Produce requests in flight per broker (`max.in.flight.requests.per.connection`).
    pub max_in_flight_requests: usize,
    /// Attempts after the first one for a failed batch.
    pub retries: u32,
    /// Give up on a batch this long after it was created (`delivery.timeout.ms`).
    pub delivery_timeout_ms: u64,
    pub enable_idempotence: bool,
    /// Bytes of records buffered before `send` waits (`buffer.memory`).
    pub buffer_memory_bytes: usize,
    /// Upper bound on one produce request (`max.request.size`).
    pub max_request_size_bytes: usize,
    /// Ask the broker to auto-create unknown topics (via Metadata).
    pub allow_auto_create_topics: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            client: ClientConfig::default(),
            acks: Acks::All,
            batch_size_bytes: 16 * 1024,
            linger_ms: 5,
            compression: Compression::None,
            max_in_flight_requests: 5,
            retries: 20,
            delivery_timeout_ms: 120_000,
            enable_idempotence: false,
            buffer_memory_bytes: 32 * 1024 * 1024,
            max_request_size_bytes: 1024 * 1024,
            allow_auto_create_topics: true,
        }
    }
}

/// One record to send. Borrowed: the bytes are copied into the batch buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProducerRecord<'a> {
    pub topic: &'a str,
    /// Explicit partition; `None` uses the default partitioner.
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
    /// Create time; `None` means now.
    pub timestamp_ms: Option<i64>,
}

impl<'a> ProducerRecord<'a> {
    pub fn new(topic: &'a str, value: &'a [u8]) -> Self {
        Self {
            topic,
            value: Some(value),
            ..Default::default()
        }
    }
    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }
    pub fn partition(mut self, p: i32) -> Self {
        self.partition = Some(p);
        self
    }
    pub fn headers(mut self, h: &'a [Header]) -> Self {
        self.headers = h;
        self
    }
    pub fn timestamp(mut self, ts_ms: i64) -> Self {
        self.timestamp_ms = Some(ts_ms);
        self
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: String,
    pub partition: i32,
    /// -1 with acks=0.
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// Resolves to the record's [`RecordMetadata`] once its batch is acknowledged.
#[derive(Debug, Clone)]
pub struct DeliveryFuture {
    appended: crate::accumulator::Appended,
}

impl DeliveryFuture {
    /// The partition the record went to.
    pub fn partition(&self) -> i32 {
        self.appended.partition
    }

    /// The result if the batch is already done.
    pub fn try_result(&self) -> Option<Result<RecordMetadata>> {
        self.appended
            .completion
            .get()
            .map(|r| self.to_result(r.clone()))
    }

    fn to_result(
        &self,
        r: std::result::Result<BatchOffsets, DeliveryFailure>,
    ) -> Result<RecordMetadata> {
        let a = &self.appended;
        match r {
            Ok(o) => Ok(RecordMetadata {
                topic: a.topic.to_string(),
                partition: a.partition,
                offset: if o.base_offset < 0 {
                    -1
                } else {
                    o.base_offset + i64::from(a.index_in_batch)
                },
                timestamp_ms: if o.log_append_time_ms >= 0 {
                    o.log_append_time_ms
                } else {
                    a.timestamp_ms
                },
            }),
            Err(f) => Err(match f.code {
                Some(code) => ClientError::kafka(code, f.message),
                None => ClientError::Protocol(f.message),
            }),
        }
    }

    pub async fn wait(self) -> Result<RecordMetadata> {
        let r = self.appended.completion.wait().await;
        self.to_result(r)
    }
}

impl IntoFuture for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}

struct Inner {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    acc: Mutex<Accumulator>,
    wake_sender: Notify,
    /// Buffer memory, in bytes.
    memory: Arc<Semaphore>,
    /// Batches closed but not yet completed.
    unfinished_batches: AtomicUsize,
    batch_done: Notify,
    flushing: AtomicUsize,
    closed: AtomicBool,
    producer_id: i64,
    producer_epoch: i16,
    /// In-flight request slots per broker.
    broker_slots: Mutex<HashMap<i32, Arc<Semaphore>>>,
    records_acked: AtomicU64,
    records_failed: AtomicU64,
    requests_sent: AtomicU64,
}

impl Inner {
    /// Makes sure the accumulator knows `topic`'s partitions (a metadata request the first time).
    async fn ensure_topic(&self, topic: &str) -> Result<()> {
        if self.acc.lock().partition_count(topic) == 0 {
            let t = self
                .cluster
                .topic(topic, self.config.allow_auto_create_topics)
                .await?;
            self.acc.lock().ensure_topic(topic, t.partitions.len());
        }
        Ok(())
    }

    /// Takes `bytes` of buffer memory, waiting for sent batches to return some if needed
    /// (released when their batch completes). `what` names a request too large to ever fit.
    async fn reserve_memory(&self, bytes: usize, what: &str) -> Result<()> {
        let permits =
            u32::try_from(bytes).map_err(|_| ClientError::InvalidArgument(what.into()))?;
        match self.memory.try_acquire_many(permits) {
            Ok(p) => p.forget(),
            Err(_) => self
                .memory
                .acquire_many(permits)
                .await
                .map_err(|_| ClientError::Closed)?
                .forget(),
        }
        Ok(())
    }
}

/// Counters of a producer's lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Records whose batch the broker acknowledged (or sent, with acks=0).
    pub records_acked: u64,
    pub records_failed: u64,
    pub requests_sent: u64,
}

/// An async Kafka producer. Clone-free sharing: wrap in `Arc` or share `&Producer`.
pub struct Producer {
    inner: Arc<Inner>,
    sender: Option<tokio::task::JoinHandle<()>>,
}

impl Producer {
    /// Connects to the cluster and, with idempotence, obtains a producer id.
    pub async fn new(config: ProducerConfig) -> Result<Self> {
        if config.enable_idempotence && config.acks != Acks::All {
            return Err(ClientError::InvalidArgument(
                "idempotence requires acks=all".into(),
            ));
        }
        if config.batch_size_bytes == 0 || config.max_in_flight_requests == 0 {
            return Err(ClientError::InvalidArgument(
                "batch size and in-flight requests must be positive".into(),
            ));
        }
        let cluster = Cluster::new(config.client.clone());
        let (producer_id, producer_epoch) = if config.enable_idempotence {
            init_producer_id(&cluster).await?
        } else {
            (-1, -1)
        };
        let acc = Accumulator::new(AccumulatorConfig {
            batch_size_bytes: config.batch_size_bytes,
            linger: Duration::from_millis(config.linger_ms),
            compression: config.compression,
        });
        let inner = Arc::new(Inner {
            memory: Arc::new(Semaphore::new(
                config.buffer_memory_bytes.min(Semaphore::MAX_PERMITS),
            )),
            config,
            cluster,
            acc: Mutex::new(acc),
            wake_sender: Notify::new(),
            unfinished_batches: AtomicUsize::new(0),
            batch_done: Notify::new(),
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            producer_id,
            producer_epoch,
            broker_slots: Mutex::new(HashMap::new()),
            records_acked: AtomicU64::new(0),
            records_failed: AtomicU64::new(0),
            requests_sent: AtomicU64::new(0),
        });
        let sender = tokio::spawn(sender_loop(inner.clone()));
        Ok(Self {
            inner,
            sender: Some(sender),
        })
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            records_acked: self.inner.records_acked.load(Ordering::Relaxed),
            records_failed: self.inner.records_failed.load(Ordering::Relaxed),
            requests_sent: self.inner.requests_sent.load(Ordering::Relaxed),
        }
    }

    /// The producer id and epoch (-1 without idempotence).
    pub fn producer_id(&self) -> (i64, i16) {
        (self.inner.producer_id, self.inner.producer_epoch)
    }

    /// Buffers a record; waits only for metadata or buffer memory. Await the returned future
    /// for the delivery result.
    pub async fn send(&self, record: ProducerRecord<'_>) -> Result<DeliveryFuture> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        let topic = record.topic;
        inner.ensure_topic(topic).await?;
        let size = crate::records::BatchBuilder::estimate_record_bytes(
            record.key,
            record.value,
            record.headers,
        );
        let permits = size.min(inner.config.buffer_memory_bytes).max(1);
        inner.reserve_memory(permits, "record too large").await?;
        let timestamp_ms = record.timestamp_ms.unwrap_or_else(now_ms);
        let appended = {
            let mut acc = inner.acc.lock();
            let was_empty = !acc.has_buffered();
            let r = acc.append(
                topic,
                record.partition,
                record.key,
                record.value,
                record.headers,
                timestamp_ms,
                permits,
            );
            r.map(|(a, ready)| (a, ready || was_empty))
        };
        let Some((appended, wake)) = appended else {
            inner.memory.add_permits(permits);
            // `topic-99`, or just the topic when the partitioner chose (never a `Some(99)`).
            return Err(ClientError::UnknownTopicOrPartition(
                match record.partition {
                    Some(p) => format!("{topic}-{p}"),
                    None => topic.to_string(),
                },
            ));
        };
        if wake || appended.index_in_batch == 0 {
            inner.wake_sender.notify_one();
        }
        Ok(DeliveryFuture { appended })
    }

    /// Sends every buffered record now and waits until all are acknowledged (or failed).
    pub async fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        inner.flushing.fetch_add(1, Ordering::AcqRel);
        inner.wake_sender.notify_one();
        loop {
            let done = inner.batch_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            let idle = !inner.acc.lock().has_buffered()
                && inner.unfinished_batches.load(Ordering::Acquire) == 0;
            if idle {
                break;
            }
            inner.wake_sender.notify_one();
            done.await;
        }
        inner.flushing.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Flushes and stops the background sender.
    pub async fn close(mut self) -> Result<()> {
        self.flush().await?;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake_sender.notify_one();
        if let Some(h) = self.sender.take() {
            let _ = h.await;
        }
        Ok(())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake_sender.notify_one();
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

async fn init_producer_id(cluster: &Cluster) -> Result<(i64, i16)> {
    let mut last = None;
    for attempt in 0..10u64 {
        let conn = cluster.any_broker().await?;
        let version = conn.version_for::<InitProducerIdRequest>(INIT_PRODUCER_ID_MAX_VERSION)?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match conn.send(&req, version).await {
            Ok(r) if r.error_code == 0 => return Ok((r.producer_id.0, r.producer_epoch)),
            Ok(r) => {
                let e = ClientError::kafka(r.error_code, "InitProducerId");
                if !e.is_retriable() {
                    return Err(e);
                }
                last = Some(e);
            }
            Err(e) if e.is_retriable() => last = Some(e),
            Err(e) => return Err(e),
        }
        tokio::time::sleep(Duration::from_millis(
            cluster.config().retry_backoff_ms * (attempt + 1),
        ))
        .await;
    }
    Err(last.unwrap_or(ClientError::Protocol("InitProducerId failed".into())))
}

/// A request being assembled for one broker.
struct Outgoing {
    node: i32,
    batches: Vec<ReadyBatch>,
    bytes: usize,
}

async fn sender_loop(inner: Arc<Inner>) {
    loop {
        let closing = inner.closed.load(Ordering::Acquire);
        let flush = closing || inner.flushing.load(Ordering::Acquire) > 0;
        let (requests, next_deadline, need_metadata) = drain(&inner, flush);
        for req in requests {
            dispatch(&inner, req).await;
        }
        if need_metadata {
            let topics: Vec<String> = inner
                .acc
                .lock()
                .topics
                .keys()
                .map(|t| t.to_string())
                .collect();
            if let Err(e) = inner.cluster.refresh_metadata(&topics).await {
                debug!(error = %e, "metadata refresh failed");
            }
            tokio::time::sleep(Duration::from_millis(inner.config.client.retry_backoff_ms)).await;
            continue;
        }
        if closing
            && !inner.acc.lock().has_buffered()
            && inner.unfinished_batches.load(Ordering::Acquire) == 0
        {
            break;
        }
        let sleep = match next_deadline {
            Some(d) => tokio::time::sleep_until(d.into()),
            None => tokio::time::sleep(Duration::from_millis(if closing { 10 } else { 1000 })),
        };
        tokio::select! {
            _ = inner.wake_sender.notified() => {}
            _ = inner.batch_done.notified() => {}
            _ = sleep => {}
        }
    }
}

/// Moves sendable batches out of the accumulator, grouped per leader broker.
fn drain(inner: &Inner, flush: bool) -> (Vec<Outgoing>, Option<Instant>, bool) {
    let now = Instant::now();
    let metadata = inner.cluster.metadata();
    let mut acc = inner.acc.lock();
    let mut next = acc.close_expired(now, flush);
    let mut per_node: HashMap<i32, Outgoing> = HashMap::new();
    let mut need_metadata = false;
    let max_per_partition = inner.config.max_in_flight_requests;
    let idempotent = inner.config.enable_idempotence;
    let mut newly_closed = 0;
    for t in acc.topics.values_mut() {
        for (p, q) in t.partitions.iter_mut().enumerate() {
            while let Some(front) = q.ready.front() {
                if let Some(nb) = front.not_before
                    && nb > now
                {
                    next = Some(next.map_or(nb, |d| d.min(nb)));
                    break;
                }
                // Idempotence: keep at most max-in-flight batches of a partition outstanding,
                // as the broker only remembers the last five sequences.
                if q.in_flight >= max_per_partition {
                    break;
                }
                let Some(leader) = metadata.leader(&t.name, p as i32) else {
                    need_metadata = true;
                    break;
                };
                let mut batch = q.ready.pop_front().expect("front exists");
                if batch.bytes.is_none() {
                    newly_closed += 1;
                    let seq = if idempotent {
                        let s = q.next_sequence;
                        q.next_sequence = increment_sequence(s, batch.record_count);
                        s
                    } else {
                        -1
                    };
                    if let Err(e) = batch.encode(inner.producer_id, inner.producer_epoch, seq) {
                        newly_closed -= 1;
                        fail_batch(inner, batch, None, format!("encoding failed: {e}"));
                        continue;
                    }
                }
                q.in_flight += 1;
                let size = batch.bytes.as_ref().map_or(0, Bytes::len);
                let out = per_node.entry(leader).or_insert_with(|| Outgoing {
                    node: leader,
                    batches: Vec::new(),
                    bytes: 0,
                });
                out.bytes += size;
                out.batches.push(batch);
            }
        }
    }
    drop(acc);
    inner
        .unfinished_batches
        .fetch_add(newly_closed, Ordering::AcqRel);
    // Split per-node groups that exceed the request size limit.
    let mut requests = Vec::new();
    for (_, out) in per_node {
        let mut cur = Outgoing {
            node: out.node,
            batches: Vec::new(),
            bytes: 0,
        };
        for b in out.batches {
            let size = b.bytes.as_ref().map_or(0, Bytes::len);
            if !cur.batches.is_empty() && cur.bytes + size > inner.config.max_request_size_bytes {
                requests.push(std::mem::replace(
                    &mut cur,
                    Outgoing {
                        node: out.node,
                        batches: Vec::new(),
                        bytes: 0,
                    },
                ));
            }
            cur.bytes += size;
            cur.batches.push(b);
        }
        if !cur.batches.is_empty() {
            requests.push(cur);
        }
    }
    (requests, next, need_metadata)
}

fn broker_slots(inner: &Inner, node: i32) -> Arc<Semaphore> {
    inner
        .broker_slots
        .lock()
        .entry(node)
        .or_insert_with(|| {
            Arc::new(Semaphore::new(
                inner
                    .config
                    .max_in_flight_requests
                    .clamp(1, MAX_IN_FLIGHT_LIMIT),
            ))
        })
        .clone()
}

/// Waits for an in-flight slot on the broker, then sends the request in its own task.
async fn dispatch(inner: &Arc<Inner>, out: Outgoing) {
    let slots = broker_slots(inner, out.node);
    let Ok(permit) = slots.acquire_owned().await else {
        return;
    };
    // Put the request on the connection here, in drain order, so that a partition's batches
    // reach the broker in sequence order; only the wait for the response runs in its own task.
    let response = send_request(inner, &out).await;
    let inner = inner.clone();
    tokio::spawn(async move {
        let result = match response {
            Ok(response) => response.await,
            Err(e) => Err(e),
        };
        drop(permit);
        handle_response(&inner, out.batches, result);
    });
}

type PartitionResults = HashMap<(String, i32), (i16, i64, i64)>;

type PendingResults = Pin<Box<dyn Future<Output = Result<PartitionResults>> + Send>>;

/// Sends the request and returns a future for its results.
async fn send_request(inner: &Inner, out: &Outgoing) -> Result<PendingResults> {
    inner.requests_sent.fetch_add(1, Ordering::Relaxed);
    let conn = inner.cluster.broker(out.node).await?;
    let version = conn.version_for::<ProduceRequest>(PRODUCE_MAX_VERSION)?;
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for b in &out.batches {
        let pd = PartitionProduceData::default()
            .with_index(b.partition)
            .with_records(b.bytes.clone());
        match topics.iter_mut().find(|t| t.name.0.as_str() == &*b.topic) {
            Some(t) => t.partition_data.push(pd),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(b.topic.to_string())))
                    .with_partition_data(vec![pd]),
            ),
        }
    }
    let req = ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(inner.config.acks.wire())
        .with_timeout_ms(
            inner
                .config
                .client
                .connection
                .request_timeout_ms
                .min(i32::MAX as u64) as i32,
        )
        .with_topic_data(topics);
    if inner.config.acks == Acks::None {
        conn.send_no_response(&req, version).await?;
        return Ok(Box::pin(async { Ok(HashMap::new()) }));
    }
    let response = conn.send_in_order(&req, version).await?;
    Ok(Box::pin(async move {
        let resp = response.await?;
        let mut results = HashMap::new();
        for t in resp.responses {
            for p in t.partition_responses {
                results.insert(
                    (t.name.0.to_string(), p.index),
                    (p.error_code, p.base_offset, p.log_append_time_ms),
                );
            }
        }
        Ok(results)
    }))
}

fn handle_response(inner: &Inner, batches: Vec<ReadyBatch>, result: Result<PartitionResults>) {
    let acks_none = inner.config.acks == Acks::None;
    let mut retry = Vec::new();
    let mut refresh = false;
    for batch in batches {
        let outcome = match &result {
            Err(e) => Err((e.kafka_code(), e.to_string(), e.is_retriable())),
            Ok(_) if acks_none => Ok((-1, -1)),
            Ok(r) => match r.get(&(batch.topic.to_string(), batch.partition)) {
                None => Err((
                    None,
                    "partition missing from produce response".to_string(),
                    true,
                )),
                Some(&(0, base, lat)) => Ok((base, lat)),
                // The broker already has this batch (a retry after a lost response).
                Some(&(code, _, _)) if code == ResponseError::DuplicateSequenceNumber.code() => {
                    Ok((-1, -1))
                }
                Some(&(code, _, _)) => {
                    let e = ClientError::kafka(
                        code,
                        format!("producing to {}-{}", batch.topic, batch.partition),
                    );
                    let retriable =
                        e.is_retriable() || code == ResponseError::OutOfOrderSequenceNumber.code();
                    Err((Some(code), e.to_string(), retriable))
                }
            },
        };
        match outcome {
            Ok((base_offset, log_append_time_ms)) => complete_batch(
                inner,
                batch,
                Ok(BatchOffsets {
                    base_offset,
                    log_append_time_ms,
                }),
            ),
            Err((code, message, retriable)) => {
                let expired = batch.created.elapsed()
                    > Duration::from_millis(inner.config.delivery_timeout_ms);
                if retriable && batch.attempts < inner.config.retries && !expired {
                    if matches!(
                        code.map(ResponseError::try_from_code),
                        Some(Some(
                            ResponseError::NotLeaderOrFollower
                                | ResponseError::UnknownTopicOrPartition
                                | ResponseError::LeaderNotAvailable
                        )) | None
                    ) {
                        refresh = true;
                    }
                    debug!(topic = %batch.topic, partition = batch.partition, attempt = batch.attempts, error = %message, "retrying batch");
                    retry.push(batch);
                } else {
                    warn!(topic = %batch.topic, partition = batch.partition, error = %message, "batch failed");
                    fail_batch_in_flight(inner, batch, code, message);
                }
            }
        }
    }
    if refresh {
        inner.cluster.invalidate_metadata();
    }
    if !retry.is_empty() {
        let backoff = Duration::from_millis(inner.config.client.retry_backoff_ms);
        let mut acc = inner.acc.lock();
        for mut b in retry {
            b.attempts += 1;
            b.not_before = Some(Instant::now() + backoff * b.attempts.min(10));
            if let Some(t) = acc.topics.get_mut(&*b.topic)
                && let Some(q) = t.partitions.get_mut(b.partition as usize)
            {
                q.in_flight -= 1;
                // Keep sequence order: the retried batch goes before any later batch.
                let pos = q
                    .ready
                    .iter()
                    .position(|r| r.bytes.is_none() || seq_after(r.base_sequence, b.base_sequence))
                    .unwrap_or(q.ready.len());
                q.ready.insert(pos, b);
            }
        }
        drop(acc);
        if refresh {
            let cluster = inner.cluster.clone();
            tokio::spawn(async move {
                let _ = cluster.refresh_metadata(&[]).await;
            });
        }
    }
    inner.batch_done.notify_waiters();
    inner.wake_sender.notify_one();
}

/// Whether sequence `a` comes after `b` (no wrap handling needed within five batches of
/// distance other than the Int32 wrap itself).
fn seq_after(a: i32, b: i32) -> bool {
    a.wrapping_sub(b) > 0
}

fn complete_batch(
    inner: &Inner,
    batch: ReadyBatch,
    r: std::result::Result<BatchOffsets, DeliveryFailure>,
) {
    let counter = if r.is_ok() {
        &inner.records_acked
    } else {
        &inner.records_failed
    };
    counter.fetch_add(batch.record_count as u64, Ordering::Relaxed);
    batch.completion.complete(r);
    inner.memory.add_permits(batch.reserved_bytes);
    let mut acc = inner.acc.lock();
    if let Some(t) = acc.topics.get_mut(&*batch.topic)
        && let Some(q) = t.partitions.get_mut(batch.partition as usize)
    {
        q.in_flight = q.in_flight.saturating_sub(1);
    }
    if let Some(bytes) = batch.bytes {
        acc.recycle(bytes);
    }
    drop(acc);
    inner.unfinished_batches.fetch_sub(1, Ordering::AcqRel);
}

fn fail_batch_in_flight(inner: &Inner, batch: ReadyBatch, code: Option<i16>, message: String) {
    complete_batch(inner, batch, Err(DeliveryFailure { code, message }));
}

/// Fails a batch that never went in flight (while draining, accumulator lock held by caller).
fn fail_batch(inner: &Inner, batch: ReadyBatch, code: Option<i16>, message: String) {
    inner
        .records_failed
        .fetch_add(batch.record_count as u64, Ordering::Relaxed);
    batch
        .completion
        .complete(Err(DeliveryFailure { code, message }));
    inner.memory.add_permits(batch.reserved_bytes);
}

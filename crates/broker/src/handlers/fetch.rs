//! Fetch (1): long poll honouring max_wait_ms / min_bytes / max_bytes and per-partition
//! limits; whole batches straight from segment slices into the zero-copy response writer.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::FetchRequest;
use streamforge_protocol::fetch_writer::{
    AbortedTxn, FetchPartition, FetchResponseParts, FetchTopic, write_fetch_response,
};
use streamforge_protocol::{RequestFrame, ResponseFrame};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::BrokerState;
use crate::partition::replica_selector::ReplicaSelectorKind;
use crate::partition::{FetchIsolation, FetchParams};
use crate::quota::entity::QuotaKey;
use crate::quota::replication::Side;
use crate::quota::{BusyTime, ClientIdentity};
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// Longest long poll we honour, whatever the client asks.
const FETCH_MAX_WAIT_MS_CAP: i64 = 5 * 60 * 1000;
/// RecordBatch v2: offset of the `batchLength` and `recordsCount` fields.
const BATCH_LENGTH_OFFSET: usize = streamforge_protocol::batch::field::BATCH_LENGTH;
const BATCH_RECORDS_COUNT_OFFSET: usize = streamforge_protocol::batch::field::RECORD_COUNT;
const BATCH_LOG_OVERHEAD_BYTES: usize = streamforge_protocol::batch::LOG_OVERHEAD_BYTES;

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    // Time spent working (not in the long poll): what request_percentage counts.
    let mut busy = BusyTime::start();
    let request: FetchRequest = req.decode()?;
    let mut plan = FetchPlan::new(&state.config, &request, req.api_version);
    if plan.replica_id < 0
        && let Some(cap) = state.quotas.fetch_bytes_max(ClientIdentity::of(&req))
    {
        plan.response_max_bytes = plan.response_max_bytes.min(cap);
    }
    plan.authorize(&Access::of(&state, &req));
    let max_wait_ms = i64::from(request.max_wait_ms).clamp(0, FETCH_MAX_WAIT_MS_CAP);
    let deadline = Instant::now() + std::time::Duration::from_millis(max_wait_ms as u64);
    let min_bytes = request.min_bytes.max(0) as usize;
    let mut shutdown = state.shutdown.clone();
    loop {
        // Subscribe before reading so an append between the read and the wait is not missed.
        let mut watchers: Vec<watch::Receiver<i64>> = Vec::new();
        for (topic, partitions) in &plan.topics {
            for p in partitions {
                if let Some(part) = state.replicas.partition(topic, p.partition) {
                    watchers.push(part.watch_high_watermark());
                }
            }
        }
        let read = read_all(&state, &plan).await;
        // Kafka answers at once when a partition names a preferred read replica, too.
        let satisfied =
            read.bytes >= min_bytes || read.errors || read.redirected || max_wait_ms == 0;
        if satisfied || watchers.is_empty() || Instant::now() >= deadline || *shutdown.borrow() {
            return Ok(Some(respond(&state, &req, read, &plan, busy.total())));
        }
        busy.pause();
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.changed() => {}
        }
        busy.resume();
        if Instant::now() >= deadline {
            let read = read_all(&state, &plan).await;
            return Ok(Some(respond(&state, &req, read, &plan, busy.total())));
        }
    }
}

/// The partitions of one pass over a Fetch request.
struct FetchPass {
    topics: Vec<FetchTopic>,
    bytes: usize,
    errors: bool,
    /// A partition names another replica to read from (KIP-392).
    redirected: bool,
    /// KIP-392 as `/metrics` shows it, counted once the response goes out with its data.
    read_replicas: ReadReplicaCounts,
}

/// What a consumer's Fetch was answered with (KIP-392): records read here as the partition's
/// leader or as a follower, and partitions sent to another replica.
#[derive(Debug, Default, Clone, Copy)]
struct ReadReplicaCounts {
    leader_records: u64,
    follower_records: u64,
    preferred_replica_answers: u64,
}

/// Records sent to consumers, by this broker's role for the partition (`role` = `leader` |
/// `follower`): with a rack-aware selector, consumers in a follower's rack read from it.
pub const CONSUMER_FETCH_RECORDS: &str = "streamforge_consumer_fetch_records_total";
/// Consumer fetches a leader answered with a `preferred_read_replica` (one per partition).
pub const PREFERRED_READ_REPLICA_ANSWERS: &str = "streamforge_preferred_read_replica_answers_total";

impl ReadReplicaCounts {
    /// A consumer's read of `partition`: its records, or a preferred replica named.
    fn note(&mut self, partition: &crate::Partition, fp: &FetchPartition) {
        if fp.preferred_read_replica.is_some() {
            self.preferred_replica_answers += 1;
            return;
        }
        if fp.records.is_empty() {
            return;
        }
        let records = count_records(&fp.records);
        match partition.role() {
            crate::partition::PartitionRole::Follower => self.follower_records += records,
            _ => self.leader_records += records,
        }
    }

    fn count(self) {
        if self.leader_records > 0 {
            metrics::counter!(CONSUMER_FETCH_RECORDS, "role" => "leader")
                .increment(self.leader_records);
        }
        if self.follower_records > 0 {
            metrics::counter!(CONSUMER_FETCH_RECORDS, "role" => "follower")
                .increment(self.follower_records);
        }
        if self.preferred_replica_answers > 0 {
            metrics::counter!(PREFERRED_READ_REPLICA_ANSWERS)
                .increment(self.preferred_replica_answers);
        }
    }
}

/// One partition to read, as the request named it (the last entry if it named it twice).
struct PlannedPartition {
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: usize,
    /// The fetcher's view of the leader epoch (v9+, -1 = not checked).
    current_leader_epoch: i32,
    /// A follower's last fetched epoch (v12+, -1 = unknown).
    last_fetched_epoch: i32,
    /// A follower's log start offset (v5+, -1 = unknown).
    log_start_offset: i64,
}

/// What a Fetch request asks for, with the broker's caps applied and every topic-partition
/// once. Kafka builds its fetch data as a map keyed by topic-partition, so a partition named
/// twice is read and answered once, in the place of its first mention with the values of its
/// last; a 35 KB request naming one partition 4,300 times could otherwise ask for 4,300 copies.
struct FetchPlan {
    /// Topics in order of first mention, each with its partitions.
    topics: Vec<(String, Vec<PlannedPartition>)>,
    response_max_bytes: usize,
    isolation: FetchIsolation,
    replica_id: i32,
    /// Fetch v11+ from a consumer: `client.rack` (KIP-392; empty = none) and leave to read
    /// from a follower (Kafka's `clientMetadata`).
    client_rack: String,
    any_replica: bool,
    /// Per topic: answered TOPIC_AUTHORIZATION_FAILED (see `authorize`).
    denied: Vec<bool>,
}

impl FetchPlan {
    /// Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic;
    /// what is not allowed is answered TOPIC_AUTHORIZATION_FAILED per partition.
    fn authorize(&mut self, access: &Access<'_>) {
        let follower_denied = self.replica_id >= 0 && !access.cluster(Operation::ClusterAction);
        self.denied = self
            .topics
            .iter()
            .map(|(name, _)| {
                follower_denied || (self.replica_id < 0 && !access.topic(Operation::Read, name))
            })
            .collect();
    }

    fn new(config: &crate::BrokerConfig, request: &FetchRequest, version: i16) -> FetchPlan {
        // Kafka: a follower's fetch (replica id >= 0) is bounded by the replica settings, a
        // consumer's by fetch.max.bytes; the request's max_bytes can only lower them.
        let from_replica = request.replica_id.0 >= 0;
        let (broker_max, partition_cap) = if from_replica {
            (
                config.replica_fetch_response_max_bytes,
                config.replica_fetch_max_bytes,
            )
        } else {
            (config.fetch_max_bytes, usize::MAX)
        };
        let requested = if request.max_bytes <= 0 {
            usize::MAX
        } else {
            request.max_bytes as usize
        };
        let mut topics: Vec<(String, Vec<PlannedPartition>)> = Vec::new();
        // Both lookups hashed: a request of up to `socket.request.max.bytes` can name
        // millions of topic-partitions, and a scan per entry would be quadratic.
        let mut topic_index: HashMap<&str, usize> = HashMap::new();
        let mut index: HashMap<(&str, i32), (usize, usize)> = HashMap::new();
        for t in &request.topics {
            for p in &t.partitions {
                let planned = PlannedPartition {
                    partition: p.partition,
                    fetch_offset: p.fetch_offset,
                    partition_max_bytes: (p.partition_max_bytes.max(0) as usize).min(partition_cap),
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.last_fetched_epoch,
                    log_start_offset: p.log_start_offset,
                };
                match index.get(&(t.topic.0.as_str(), p.partition)) {
                    Some(&(ti, pi)) => topics[ti].1[pi] = planned,
                    None => {
                        let ti = *topic_index.entry(t.topic.0.as_str()).or_insert_with(|| {
                            topics.push((t.topic.0.to_string(), Vec::new()));
                            topics.len() - 1
                        });
                        index.insert((t.topic.0.as_str(), p.partition), (ti, topics[ti].1.len()));
                        topics[ti].1.push(planned);
                    }
                }
            }
        }
        FetchPlan {
            topics,
            response_max_bytes: requested.min(broker_max),
            isolation: FetchIsolation::for_fetch(request.replica_id.0, request.isolation_level),
            replica_id: request.replica_id.0,
            client_rack: request.rack_id.to_string(),
            any_replica: version >= 11 && request.replica_id.0 < 0,
            denied: Vec::new(),
        }
    }
}

async fn read_all(state: &BrokerState, plan: &FetchPlan) -> FetchPass {
    let response_max_bytes = plan.response_max_bytes;
    let read_committed = plan.isolation == FetchIsolation::TxnCommitted;
    let mut out = FetchPass {
        topics: Vec::with_capacity(plan.topics.len()),
        bytes: 0,
        errors: false,
        redirected: false,
        read_replicas: ReadReplicaCounts::default(),
    };
    // Reassignment throttles: measured once a pass (what is sent is recorded at the response).
    let quotas = state.replicas.replication_quotas();
    let leader_quota_exceeded = plan.replica_id >= 0 && quotas.is_exceeded(Side::Leader);
    for (ti, (name, partitions)) in plan.topics.iter().enumerate() {
        let mut topic = FetchTopic {
            name: name.clone(),
            partitions: Vec::with_capacity(partitions.len()),
        };
        for p in partitions {
            let mut fp = FetchPartition {
                partition_index: p.partition,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                aborted_transactions: read_committed.then(Vec::new),
                ..Default::default()
            };
            if plan.denied.get(ti).copied().unwrap_or(false) {
                fp.error_code = ResponseError::TopicAuthorizationFailed.code();
                out.errors = true;
                topic.partitions.push(fp);
                continue;
            }
            let partition = match state.replicas.lookup_partition(&topic.name, p.partition) {
                Ok(partition) => partition,
                Err(e) => {
                    fp.error_code = e.kafka_code();
                    out.errors = true;
                    topic.partitions.push(fp);
                    continue;
                }
            };
            let remaining = response_max_bytes.saturating_sub(out.bytes);
            let params = FetchParams {
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.min(remaining),
                min_one_message: out.bytes == 0,
                isolation: plan.isolation,
                replica_id: plan.replica_id,
            };
            let read = if plan.replica_id >= 0 {
                let throttled = leader_quota_exceeded
                    && quotas.is_throttled(Side::Leader, &topic.name, p.partition);
                read_for_follower(state, &partition, params, p, plan.replica_id, throttled).map(
                    |(read, diverging)| {
                        fp.diverging_epoch = diverging;
                        read
                    },
                )
            } else {
                read_for_consumer(state, &partition, params, p, plan, &mut fp).await
            };
            match read {
                Ok(read) => {
                    fp.high_watermark = read.offsets.high_watermark;
                    fp.last_stable_offset = read.offsets.last_stable_offset;
                    fp.log_start_offset = read.offsets.log_start_offset;
                    if let Some(list) = fp.aborted_transactions.as_mut() {
                        list.extend(read.aborted.iter().map(|a| AbortedTxn {
                            producer_id: a.producer_id,
                            first_offset: a.first_offset,
                        }));
                    }
                    match read.records {
                        Ok(records) => {
                            out.bytes += records.bytes;
                            fp.records = records.slices;
                        }
                        Err(e) => {
                            fp.error_code = e.kafka_code();
                            out.errors = true;
                        }
                    }
                }
                // Not served here: gone (UNKNOWN_TOPIC_OR_PARTITION), offline
                // (KAFKA_STORAGE_ERROR), not the leader (NOT_LEADER_OR_FOLLOWER).
                Err(e) => {
                    fp.error_code = e.kafka_code();
                    out.errors = true;
                }
            }
            out.redirected |= fp.preferred_read_replica.is_some();
            if plan.replica_id < 0 {
                out.read_replicas.note(&partition, &fp);
            }
            topic.partitions.push(fp);
        }
        out.topics.push(topic);
    }
    out
}

/// A follower's fetch: its position moves the leader's high watermark and ISR. `throttled`:
/// the leader's replication quota is exceeded and throttles this partition (no records for a
/// follower outside the ISR).
fn read_for_follower(
    state: &BrokerState,
    partition: &crate::Partition,
    params: FetchParams,
    planned: &PlannedPartition,
    replica_id: i32,
    throttled: bool,
) -> Result<(crate::partition::ReadResult, Option<(i32, i64)>), crate::partition::PartitionError> {
    let fetch = crate::partition::FollowerFetch {
        replica_id,
        current_leader_epoch: planned.current_leader_epoch,
        last_fetched_epoch: planned.last_fetched_epoch,
        log_start_offset: planned.log_start_offset,
        throttled,
    };
    let read = partition.read_for_follower(params, fetch, state.clock.now_ms())?;
    Ok((read.read, read.diverging_epoch))
}

/// A consumer's fetch (KIP-392): a leader with a rack-aware selector may name a replica in
/// the client's rack instead, answering with its offsets and no records, as Kafka does; a
/// follower serves v11+ fetches up to its high watermark.
async fn read_for_consumer(
    state: &BrokerState,
    partition: &crate::Partition,
    mut params: FetchParams,
    planned: &PlannedPartition,
    plan: &FetchPlan,
    fp: &mut FetchPartition,
) -> Result<crate::partition::ReadResult, crate::partition::PartitionError> {
    let fetch = crate::partition::ConsumerFetch {
        current_leader_epoch: planned.current_leader_epoch,
        any_replica: plan.any_replica,
    };
    if plan.any_replica
        && let Some(id) = preferred_read_replica(state, partition, &plan.client_rack, params)
    {
        fp.preferred_read_replica = Some(id);
        // Kafka's `fetchOffsetSnapshot`: the epoch checked, the leader's offsets, no records.
        params.max_bytes = 0;
        params.min_one_message = false;
    }
    partition.read_for_consumer(params, fetch).await
}

/// The replica the configured selector names for this consumer, if not the leader itself.
fn preferred_read_replica(
    state: &BrokerState,
    partition: &crate::Partition,
    client_rack: &str,
    params: FetchParams,
) -> Option<i32> {
    let selector = state.config.replica_selector;
    if selector == ReplicaSelectorKind::Leader || client_rack.is_empty() {
        return None;
    }
    let (mut leader, mut followers) = partition.read_replica_candidates(state.clock.now_ms())?;
    if followers.is_empty() {
        return None;
    }
    leader.rack = state.config.broker_rack.clone();
    // A broker's rack is what it registered with the controller.
    let image = state.replicas.image();
    for f in &mut followers {
        f.rack = image.broker(f.id).and_then(|b| b.rack.clone());
    }
    selector.select(client_rack, params.fetch_offset, &leader, &followers)
}

/// The response, with the consumer's quotas applied (never a follower's): its bytes against
/// `consumer_byte_rate` and the handler time against `request_percentage`. Over quota, Kafka
/// takes the bytes back and answers with no data and the throttle time (KIP-219).
fn respond(
    state: &BrokerState,
    req: &RequestFrame,
    read: FetchPass,
    plan: &FetchPlan,
    busy: std::time::Duration,
) -> ResponseFrame {
    let mut parts = FetchResponseParts {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0, // sessionless: every fetch is a full fetch
        topics: Vec::new(),
    };
    let read_replicas = read.read_replicas;
    let frame = encode(req, read, &mut parts);
    if plan.replica_id >= 0 {
        record_throttled_bytes(state, &parts.topics);
        count_bytes_out(&parts.topics);
        return frame;
    }
    let who = ClientIdentity::of(req);
    let size = frame.len_bytes() as f64;
    let bandwidth_ms = state.quotas.record(QuotaKey::ConsumerByteRate, who, size);
    let request_ms = state.quotas.record_request_time(who, busy);
    let throttle_ms = bandwidth_ms.max(request_ms);
    if throttle_ms == 0 {
        count_bytes_out(&parts.topics);
        read_replicas.count();
        return frame;
    }
    state.quotas.unrecord(QuotaKey::ConsumerByteRate, who, size);
    let empty = FetchResponseParts {
        throttle_time_ms: i32::try_from(throttle_ms).unwrap_or(i32::MAX),
        topics: Vec::new(),
        ..parts
    };
    let mut throttled = write_fetch_response(req.api_version, req.correlation_id, &empty);
    throttled.throttle_ms = throttle_ms;
    throttled
}

fn encode(req: &RequestFrame, read: FetchPass, parts: &mut FetchResponseParts) -> ResponseFrame {
    crate::request_metrics::count(
        "Fetch",
        read.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        Some(crate::request_metrics::FAILED_FETCH),
    );
    parts.topics = read.topics;
    write_fetch_response(req.api_version, req.correlation_id, parts)
}

/// A follower's response: the records of throttled partitions (in sync or not) count against
/// the leader's replication quota (Kafka's `sizeOfThrottledPartitions`, here the records'
/// bytes).
fn record_throttled_bytes(state: &BrokerState, topics: &[FetchTopic]) {
    let quotas = state.replicas.replication_quotas();
    let bytes: usize = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (&t.name, p)))
        .filter(|(_, p)| !p.records.is_empty())
        .filter(|(name, p)| quotas.is_throttled(Side::Leader, name, p.partition_index))
        .flat_map(|(_, p)| &p.records)
        .map(Bytes::len)
        .sum();
    quotas.record(Side::Leader, bytes as u64);
}

/// The messages- and bytes-out counters, for a response that carries its data.
fn count_bytes_out(topics: &[FetchTopic]) {
    for t in topics {
        let bytes: usize = t
            .partitions
            .iter()
            .flat_map(|p| &p.records)
            .map(Bytes::len)
            .sum();
        if bytes > 0 {
            let records: u64 = t.partitions.iter().map(|p| count_records(&p.records)).sum();
            metrics::counter!("streamforge_messages_out_total", "topic" => t.name.clone())
                .increment(records);
            metrics::counter!("streamforge_bytes_out_total", "topic" => t.name.clone())
                .increment(bytes as u64);
        }
    }
}

/// Records in whole batches, from their headers (cheap; for the messages-out counter).
fn count_records(slices: &[Bytes]) -> u64 {
    let mut total = 0u64;
    for slice in slices {
        let mut pos = 0usize;
        while pos + BATCH_RECORDS_COUNT_OFFSET + 4 <= slice.len() {
            let len_at = pos + BATCH_LENGTH_OFFSET;
            let batch_len =
                i32::from_be_bytes(slice[len_at..len_at + 4].try_into().unwrap_or_default());
            let count_at = pos + BATCH_RECORDS_COUNT_OFFSET;
            let count =
                i32::from_be_bytes(slice[count_at..count_at + 4].try_into().unwrap_or_default());
            total += count.max(0) as u64;
            if batch_len <= 0 {
                break;
            }
            pos += BATCH_LOG_OVERHEAD_BYTES + batch_len as usize;
        }
    }
    total
}

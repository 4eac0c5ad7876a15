//! Fetch (1): long poll honouring max_wait_ms / min_bytes / max_bytes and per-partition
//! limits; whole batches straight from segment slices into the zero-copy response writer.
//! v13+ names topics by id (an id the image does not know: UNKNOWN_TOPIC_ID; one whose local
//! log belongs to another id: INCONSISTENT_TOPIC_ID); v15+ carries a follower's id and broker
//! epoch in `replica_state` (a broker epoch older than the image's: NOT_LEADER_OR_FOLLOWER,
//! and the fetch does not move the follower's state, as Kafka's `updateFetchStateOrThrow`).
//! Followers fetch in incremental fetch sessions ([`super::fetch_session`]).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::FetchRequest;
use streamforge_protocol::fetch_writer::{
    AbortedTxn, FETCH_TOPIC_ID_VERSION, FetchPartition, FetchResponseParts, FetchTopic,
    write_fetch_response,
};
use streamforge_protocol::{RequestFrame, ResponseFrame};
use tokio::sync::watch;
use tokio::time::Instant;

use super::fetch_session::{
    Answered, Opened, PartitionParams, SessionContext, SessionKey, SessionRequest, TopicRef,
};
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
    let session = session_request(&request, req.api_version, req.body.len());
    let opened = if session.needs_cache() {
        (state.fetch_sessions.lock()).open(session, state.clock.now_ms())
    } else {
        super::fetch_session::sessionless(session)
    };
    if let SessionContext::Error(code) = opened.context {
        return Ok(Some(session_error(&req, code)));
    }
    let mut plan = FetchPlan::new(&state, &request, req.api_version, opened);
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
            let Some(name) = &topic.name else { continue };
            for p in partitions {
                if let Some(part) = state.replicas.partition(name, p.partition) {
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

/// One topic of a request: as it was named, and the local topic it resolves to.
struct PlannedTopic {
    key: TopicRef,
    /// The topic's name (`None`: an id this broker does not know).
    name: Option<String>,
    /// The id written in the answer (v13+).
    id: [u8; 16],
    /// Every partition of the topic is answered with this error (UNKNOWN_TOPIC_ID,
    /// INCONSISTENT_TOPIC_ID).
    error: Option<ResponseError>,
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
    topics: Vec<(PlannedTopic, Vec<PlannedPartition>)>,
    /// The fetch session's answer: full or incremental, and its session id.
    session: SessionContext,
    /// A follower whose broker epoch (v15+ `replica_epoch`) is older than the image's: its
    /// partitions are answered NOT_LEADER_OR_FOLLOWER and its state does not move.
    stale_broker_epoch: bool,
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
            .map(|(topic, _)| {
                let read_denied = topic
                    .name
                    .as_deref()
                    .is_some_and(|name| !access.topic(Operation::Read, name));
                follower_denied || (self.replica_id < 0 && read_denied)
            })
            .collect();
    }

    fn new(state: &BrokerState, request: &FetchRequest, version: i16, opened: Opened) -> FetchPlan {
        let config = &state.config;
        // Kafka: a follower's fetch (replica id >= 0) is bounded by the replica settings, a
        // consumer's by fetch.max.bytes; the request's max_bytes can only lower them.
        let (replica_id, replica_epoch) = replica_of(request, version);
        let from_replica = replica_id >= 0;
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
        // The image only where it is needed: topic ids, a follower's broker epoch.
        let image =
            (from_replica || version >= FETCH_TOPIC_ID_VERSION).then(|| state.replicas.image());
        let stale_broker_epoch = from_replica
            && replica_epoch >= 0
            && image
                .as_ref()
                .and_then(|i| i.broker(replica_id))
                .is_some_and(|b| b.epoch > replica_epoch);
        let mut topics: Vec<(PlannedTopic, Vec<PlannedPartition>)> = Vec::new();
        // Hashed: a request of up to `socket.request.max.bytes` can name millions of
        // topic-partitions (the session has made each one unique), and a scan per entry
        // would be quadratic.
        let mut topic_index: HashMap<TopicRef, usize> = HashMap::new();
        for ((key, partition), params) in opened.partitions {
            let ti = match topic_index.get(&key) {
                Some(&ti) => ti,
                None => {
                    topic_index.insert(key.clone(), topics.len());
                    topics.push((resolve_topic(state, image.as_ref(), key), Vec::new()));
                    topics.len() - 1
                }
            };
            topics[ti].1.push(PlannedPartition {
                partition,
                fetch_offset: params.fetch_offset,
                partition_max_bytes: (params.partition_max_bytes.max(0) as usize)
                    .min(partition_cap),
                current_leader_epoch: params.current_leader_epoch,
                last_fetched_epoch: params.last_fetched_epoch,
                log_start_offset: params.log_start_offset,
            });
        }
        FetchPlan {
            topics,
            session: opened.context,
            stale_broker_epoch,
            response_max_bytes: requested.min(broker_max),
            isolation: FetchIsolation::for_fetch(replica_id, request.isolation_level),
            replica_id,
            client_rack: request.rack_id.to_string(),
            any_replica: version >= 11 && replica_id < 0,
            denied: Vec::new(),
        }
    }
}

/// The fetching replica's id and broker epoch: v15+ from `replica_state`, before from the
/// `replica_id` field (with no epoch, -1).
fn replica_of(request: &FetchRequest, version: i16) -> (i32, i64) {
    if version >= 15 {
        (
            request.replica_state.replica_id.0,
            request.replica_state.replica_epoch,
        )
    } else {
        (request.replica_id.0, -1)
    }
}

/// The session fields of `request`, its partitions keyed as it names them.
fn session_request(request: &FetchRequest, version: i16, request_bytes: usize) -> SessionRequest {
    let uses_topic_ids = version >= FETCH_TOPIC_ID_VERSION;
    let topic_ref = |name: &str, id: uuid::Uuid| {
        if uses_topic_ids {
            TopicRef::Id(id)
        } else {
            TopicRef::Name(name.to_string())
        }
    };
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            let key = topic_ref(t.topic.0.as_str(), t.topic_id);
            t.partitions.iter().map(move |p| {
                let params = PartitionParams {
                    fetch_offset: p.fetch_offset,
                    partition_max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.last_fetched_epoch,
                    log_start_offset: p.log_start_offset,
                };
                ((key.clone(), p.partition), params)
            })
        })
        .collect();
    let forgotten = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let key = topic_ref(t.topic.0.as_str(), t.topic_id);
            t.partitions.iter().map(move |&p| (key.clone(), p))
        })
        .collect();
    let (replica_id, _) = replica_of(request, version);
    SessionRequest {
        // Before v7 there are no sessions: the codec's defaults (0, -1) mean sessionless.
        session_id: request.session_id,
        session_epoch: request.session_epoch,
        replica_id,
        uses_topic_ids,
        partitions,
        forgotten,
        request_bytes,
    }
}

/// The local topic a request's topic names: by name, or by id through the metadata image
/// (UNKNOWN_TOPIC_ID when the image has no such id; INCONSISTENT_TOPIC_ID when the topic
/// hosted here under that name has another id, as during a delete and re-create).
fn resolve_topic(
    state: &BrokerState,
    image: Option<&streamforge_metadata::MetadataImage>,
    key: TopicRef,
) -> PlannedTopic {
    match &key {
        // The id is written only at v13+, where topics are named by id.
        TopicRef::Name(name) => PlannedTopic {
            name: Some(name.clone()),
            id: [0; 16],
            error: None,
            key,
        },
        TopicRef::Id(id) => {
            let name = image.and_then(|i| i.topic(*id)).map(|t| t.name.clone());
            let error = match &name {
                None => Some(ResponseError::UnknownTopicId),
                Some(name) => state
                    .replicas
                    .topic(name)
                    .is_some_and(|hosted| hosted.id != *id)
                    .then_some(ResponseError::InconsistentTopicId),
            };
            PlannedTopic {
                name,
                id: id.into_bytes(),
                error,
                key,
            }
        }
    }
}

/// A Fetch refused as a whole (a fetch session error): the code, no partitions.
fn session_error(req: &RequestFrame, code: i16) -> ResponseFrame {
    let parts = FetchResponseParts {
        throttle_time_ms: 0,
        error_code: code,
        session_id: super::fetch_session::NO_SESSION,
        topics: Vec::new(),
    };
    write_fetch_response(req.api_version, req.correlation_id, &parts)
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
    for (ti, (planned, partitions)) in plan.topics.iter().enumerate() {
        let mut topic = FetchTopic {
            name: planned.name.clone().unwrap_or_default(),
            topic_id: planned.id,
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
            let refused = if plan.denied.get(ti).copied().unwrap_or(false) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if planned.error.is_some() {
                planned.error
            } else if plan.stale_broker_epoch {
                Some(ResponseError::NotLeaderOrFollower)
            } else {
                None
            };
            if let Some(error) = refused {
                fp.error_code = error.code();
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
    mut read: FetchPass,
    plan: &FetchPlan,
    busy: std::time::Duration,
) -> ResponseFrame {
    keep_session_news(state, plan, &mut read.topics);
    let mut parts = FetchResponseParts {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: plan.session.session_id(),
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

/// In a fetch session: record what the answer tells the fetcher of each partition, and (in
/// an incremental answer) leave out the partitions with nothing new (no records, no error,
/// the same offsets as last told), as Kafka's `IncrementalFetchContext`.
fn keep_session_news(state: &BrokerState, plan: &FetchPlan, topics: &mut Vec<FetchTopic>) {
    if plan.session.session_id() == super::fetch_session::NO_SESSION {
        return;
    }
    let mut sessions = state.fetch_sessions.lock();
    for ((planned, _), topic) in plan.topics.iter().zip(topics.iter_mut()) {
        topic.partitions.retain(|p| {
            let key: SessionKey = (planned.key.clone(), p.partition_index);
            let answered = Answered {
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
            };
            let must = p.error_code != 0
                || !p.records.is_empty()
                || p.diverging_epoch.is_some()
                || p.preferred_read_replica.is_some();
            sessions.include(plan.session, &key, answered, must)
        });
    }
    drop(sessions);
    topics.retain(|t| !t.partitions.is_empty());
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

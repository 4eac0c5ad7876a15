//! The broker's read-only view for the dashboard (`streamforge_http::ClusterView`).
//!
//! Everything here reads broker state the same way the Kafka handlers do (the replica manager,
//! partition logs under their mutex) and never changes data, except the two explicit topic
//! actions, which go through the same `ReplicaManager` calls as CreateTopics/DeleteTopics.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder, TimestampType};
use streamforge_http::{
    BatchInfo, BrokerInfo, ClusterInfo, ClusterView, ConfigEntry, CreateTopic, FollowerLag,
    GroupInfo, IsrChangeTotals, Message, MessagePage, MessageQuery, PartitionInfo, QuorumInfo,
    QuorumVoter, ReadStart, ReplicationInfo, TopicDetail, TopicInfo, ViewError, ViewFuture,
};

use crate::http_view_console as console;
use crate::partition::{
    FetchIsolation, FetchParams, IsrChangeCounts, OffsetSpec, Partition, PartitionError,
    PartitionRole, ReplicaProgress,
};
use crate::replica_manager::{Topic, TopicError};
use crate::{BrokerState, http_view_groups, topic_config};
use streamforge_http::{
    BrokerDetail, ConfigChange, OffsetReset, ProduceMessage, Produced, ResetOffset,
};

/// Bytes read from a log per round while collecting a page of messages.
const BROWSE_READ_BYTES: usize = 1024 * 1024;
/// Rounds of reading per browse request (bounds the work of one request to a few MiB).
const BROWSE_READ_ROUNDS_MAX: usize = 8;
/// Record batch header: base offset (8) + batch length (4).
const BATCH_LOG_OVERHEAD_BYTES: usize = 12;

pub struct BrokerView {
    state: Arc<BrokerState>,
    started_at_ms: i64,
    isr_changes: parking_lot::Mutex<IsrChangeBook>,
}

/// Keeps `streamforge_isr_shrinks_total` / `_expands_total` monotonic although each partition
/// counts its own: the counts of a partition no longer hosted here (deleted, moved, reopened)
/// stay in `gone`. Keyed by the partition object; the `Weak` keeps its address from being
/// reused while the entry exists. At most one entry per hosted partition.
#[derive(Default)]
struct IsrChangeBook {
    seen: HashMap<usize, (Weak<Partition>, IsrChangeCounts)>,
    gone: IsrChangeTotals,
}

impl IsrChangeBook {
    fn totals(&mut self, hosted: impl Iterator<Item = Arc<Partition>>) -> IsrChangeTotals {
        let mut live = HashMap::new();
        for p in hosted {
            live.insert(
                Arc::as_ptr(&p) as usize,
                (Arc::downgrade(&p), p.isr_change_counts()),
            );
        }
        for (key, (_, counts)) in self.seen.drain() {
            if !live.contains_key(&key) {
                self.gone.shrinks += counts.shrinks;
                self.gone.expands += counts.expands;
            }
        }
        self.seen = live;
        let mut totals = self.gone;
        for (_, counts) in self.seen.values() {
            totals.shrinks += counts.shrinks;
            totals.expands += counts.expands;
        }
        totals
    }
}

fn replication_info(progress: ReplicaProgress) -> ReplicationInfo {
    ReplicationInfo {
        replicas: progress.replicas,
        isr: progress.isr,
        under_min_isr: progress.under_min_isr,
        effective_min_isr: progress.effective_min_isr,
        followers: progress
            .followers
            .into_iter()
            .map(|f| FollowerLag {
                broker_id: f.id,
                log_end_offset: f.log_end_offset,
                lag_messages: f.lag_messages,
                in_sync: f.in_sync,
                time_since_caught_up_ms: f.time_since_caught_up_ms,
            })
            .collect(),
    }
}

impl BrokerView {
    pub fn new(state: Arc<BrokerState>) -> BrokerView {
        BrokerView {
            state,
            started_at_ms: crate::util::now_ms(),
            isr_changes: Default::default(),
        }
    }

    fn node_id(&self) -> i32 {
        self.state.node_id()
    }

    /// Every broker of the image (this one by its advertised address; the others by their
    /// endpoint for this broker's first listener), fenced ones included.
    fn brokers(&self) -> Vec<BrokerInfo> {
        let image = self.state.replicas.image();
        let me = self.node_id();
        let listener = self.state.security.endpoint(0).protocol.name();
        let mut brokers = vec![BrokerInfo {
            node_id: me,
            host: self.state.advertised_host.clone(),
            port: self.state.advertised_port as u16,
            rack: self.state.config.broker_rack.clone(),
            fenced: image.broker(me).is_some_and(|b| b.fenced),
        }];
        for b in image.brokers().values().filter(|b| b.id != me) {
            let Some(e) = b
                .endpoints
                .iter()
                .find(|e| e.name == listener)
                .or(b.endpoints.first())
            else {
                continue;
            };
            brokers.push(BrokerInfo {
                node_id: b.id,
                host: e.host.clone(),
                port: e.port,
                rack: b.rack.clone(),
                fenced: b.fenced,
            });
        }
        brokers.sort_by_key(|b| b.node_id);
        brokers
    }

    /// The partitions hosted here with their logs' offsets; leader, replicas and ISR as the
    /// metadata image has them.
    fn topic_info(&self, topic: &Topic) -> TopicInfo {
        let image = self.state.replicas.image();
        let states = image.topic(topic.id).map(|t| &t.partitions);
        let now_ms = self.state.clock.now_ms();
        let replication_factor = states
            .and_then(|s| s.values().next())
            .map_or(1, |s| s.replicas.len() as u32);
        TopicInfo {
            name: topic.name.clone(),
            topic_id: Some(topic.id.to_string()),
            internal: topic.is_internal(),
            replication_factor,
            partitions: topic
                .hosted()
                .filter_map(|p| {
                    let offsets = p.offsets().ok()?;
                    let state = states?.get(&p.index)?;
                    Some(PartitionInfo {
                        partition: p.index,
                        leader: state.leader,
                        leader_epoch: p.leader_epoch(),
                        replicas: state.replicas.clone(),
                        isr: state.isr.clone(),
                        log_start_offset: offsets.log_start_offset,
                        log_end_offset: offsets.log_end_offset,
                        high_watermark: offsets.high_watermark,
                        size_bytes: p.size_bytes().ok()?,
                        remote_size_bytes: p.remote_size_bytes(),
                        led_here: p.role() == PartitionRole::Leader,
                        replication: p.replica_progress(now_ms).map(replication_info),
                        fetcher_lag: p.replica_fetcher_lag(),
                    })
                })
                .collect(),
        }
    }

    fn isr_change_totals(&self) -> IsrChangeTotals {
        let topics = self.state.replicas.topics();
        let hosted = topics
            .iter()
            .flat_map(|t| t.hosted().cloned().collect::<Vec<_>>());
        self.isr_changes.lock().totals(hosted)
    }

    fn configs(&self, topic: &Topic) -> Vec<ConfigEntry> {
        let defaults = self.state.replicas.log_defaults();
        topic_config::TOPIC_CONFIGS
            .iter()
            .map(|def| match topic.configs.get(def.name) {
                Some(v) => ConfigEntry {
                    name: def.name.to_string(),
                    value: Some(v.clone()),
                    source: "DYNAMIC_TOPIC_CONFIG".to_string(),
                    is_default: false,
                    sensitive: false,
                },
                None => ConfigEntry {
                    name: def.name.to_string(),
                    value: Some(topic_config::default_value(def.name, &defaults)),
                    source: "DEFAULT_CONFIG".to_string(),
                    is_default: true,
                    sensitive: false,
                },
            })
            .collect()
    }
}

/// Reads one page of messages (blocking: runs on the blocking pool).
fn read_page(state: &BrokerState, query: &MessageQuery) -> Result<MessagePage, ViewError> {
    let partition = state
        .replicas
        .partition(&query.topic, query.partition)
        .ok_or_else(|| {
            ViewError::NotFound(format!(
                "topic '{}' has no partition {}",
                query.topic, query.partition
            ))
        })?;
    let gone = |_| {
        ViewError::NotFound(format!(
            "partition {}-{} was deleted",
            query.topic, query.partition
        ))
    };
    let offsets = partition.offsets().map_err(gone)?;
    let (log_start_offset, high_watermark) =
        (offsets.local_log_start_offset, offsets.high_watermark);
    let start = match query.start {
        ReadStart::Offset(o) => o.max(log_start_offset),
        ReadStart::Timestamp(ts) => match partition.list_local_offset(OffsetSpec::Timestamp(ts)) {
            Ok((_, offset)) if offset >= 0 => offset,
            Ok(_) => high_watermark,
            Err(e @ (PartitionError::Gone | PartitionError::Offline(_))) => return Err(gone(e)),
            Err(e) => return Err(ViewError::Internal(e.to_string())),
        },
    };
    let mut messages = Vec::new();
    let mut position = start;
    for _ in 0..BROWSE_READ_ROUNDS_MAX {
        if messages.len() >= query.limit || position >= high_watermark {
            break;
        }
        let params = FetchParams {
            fetch_offset: position,
            max_bytes: BROWSE_READ_BYTES,
            min_one_message: true,
            isolation: FetchIsolation::HighWatermark,
            replica_id: -1,
        };
        let read = partition
            .read_local(params)
            .map_err(gone)?
            .records
            .map_err(|e| ViewError::Internal(e.to_string()))?;
        if read.bytes == 0 {
            break;
        }
        let before = position;
        for slice in read.slices {
            position = decode_batches(
                slice,
                start.max(position),
                high_watermark,
                query.limit,
                &mut messages,
            )
            .map_err(ViewError::Internal)?
            .max(position);
        }
        if position <= before {
            break;
        }
    }
    messages.truncate(query.limit);
    let next_offset = messages
        .last()
        .map_or(start.min(high_watermark), |m| m.offset + 1);
    Ok(MessagePage {
        log_start_offset,
        high_watermark,
        next_offset,
        messages,
    })
}

/// Runs blocking broker work (log reads, topic files) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ViewError> + Send + 'static,
) -> Result<T, ViewError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ViewError::Internal(format!("dashboard task failed: {e}")))?
}

/// Decodes whole batches from `slice`, keeping records in `[from, below)` until `limit`.
/// Returns the offset after the last batch seen.
fn decode_batches(
    mut slice: Bytes,
    from: i64,
    below: i64,
    limit: usize,
    out: &mut Vec<Message>,
) -> Result<i64, String> {
    let mut next = from;
    while slice.len() >= BATCH_LOG_OVERHEAD_BYTES && out.len() < limit {
        let batch_len = i32::from_be_bytes([slice[8], slice[9], slice[10], slice[11]]);
        let total = BATCH_LOG_OVERHEAD_BYTES
            + usize::try_from(batch_len).map_err(|_| "negative batch length")?;
        if total > slice.len() {
            break;
        }
        let mut batch = slice.split_to(total);
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone())
            .map_err(|e| format!("undecodable batch: {e}"))?
            .into_iter()
            .next()
            .ok_or("empty batch")?;
        let set = RecordBatchDecoder::decode(&mut batch)
            .map_err(|e| format!("undecodable batch: {e}"))?;
        let last_offset = set.records.last().map_or(info.min_offset, |r| r.offset);
        next = next.max(last_offset + 1);
        if info.control {
            continue;
        }
        let batch_info = BatchInfo {
            base_offset: info.min_offset,
            last_offset,
            partition_leader_epoch: info.partition_leader_epoch,
            compression: compression_name(info.compression).to_string(),
            timestamp_type: match info.timestamp_type {
                TimestampType::Creation => "create_time",
                TimestampType::LogAppend => "log_append_time",
            }
            .to_string(),
            producer_id: info.producer_id,
            producer_epoch: info.producer_epoch,
            base_sequence: info.base_sequence,
            transactional: info.transactional,
            control: info.control,
            size_bytes: total as u32,
        };
        for record in set.records {
            if record.offset < from || record.offset >= below || out.len() >= limit {
                continue;
            }
            out.push(Message {
                offset: record.offset,
                timestamp_ms: record.timestamp,
                key: record.key,
                value: record.value,
                headers: record
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                batch: batch_info.clone(),
            });
        }
    }
    Ok(next)
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// Kafka's error for a topic action (shown by name in the dashboard).
fn topic_error(e: TopicError) -> ViewError {
    console::kafka(e.kafka_code(), e.to_string())
}

impl ClusterView for BrokerView {
    fn cluster(&self) -> ViewFuture<'_, ClusterInfo> {
        Box::pin(async move {
            let metadata = self.state.replicas.metadata();
            let (leader, voters) = metadata.quorum_status();
            Ok(ClusterInfo {
                cluster_id: self.state.cluster_id.clone(),
                node_id: self.node_id(),
                controller_id: crate::handlers::metadata::controller_id(&self.state),
                brokers: self.brokers(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_at_ms: self.started_at_ms,
                isr_changes: self.isr_change_totals(),
                quorum: Some(QuorumInfo {
                    leader_id: leader.leader.map_or(-1, |id| id as i32),
                    epoch: leader.epoch,
                    voters: voters
                        .iter()
                        .map(|v| QuorumVoter {
                            node_id: v.id as i32,
                            lag: v.lag_entries,
                        })
                        .collect(),
                }),
            })
        })
    }

    fn topics(&self) -> ViewFuture<'_, Vec<TopicInfo>> {
        Box::pin(async move {
            Ok(self
                .state
                .replicas
                .topics()
                .iter()
                .map(|t| self.topic_info(t))
                .collect())
        })
    }

    fn topic(&self, name: String) -> ViewFuture<'_, TopicDetail> {
        Box::pin(async move {
            let topic = self
                .state
                .replicas
                .topic(&name)
                .ok_or_else(|| ViewError::NotFound(format!("topic '{name}' does not exist")))?;
            Ok(TopicDetail {
                topic: self.topic_info(&topic),
                configs: self.configs(&topic),
            })
        })
    }

    fn read_messages(&self, query: MessageQuery) -> ViewFuture<'_, MessagePage> {
        let state = self.state.clone();
        Box::pin(blocking(move || read_page(&state, &query)))
    }

    fn groups(&self) -> ViewFuture<'_, Vec<GroupInfo>> {
        let state = self.state.clone();
        Box::pin(blocking(move || Ok(http_view_groups::all_groups(&state))))
    }

    fn group(&self, group_id: String) -> ViewFuture<'_, GroupInfo> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            http_view_groups::one_group(&state, &group_id)
                .ok_or_else(|| ViewError::NotFound(format!("group '{group_id}' does not exist")))
        }))
    }

    fn create_topic(&self, request: CreateTopic) -> ViewFuture<'_, ()> {
        Box::pin(async move {
            if request.replication_factor != 1 {
                return Err(ViewError::InvalidArgument(format!(
                    "replication factor {} is larger than the 1 available broker",
                    request.replication_factor
                )));
            }
            let configs: BTreeMap<String, String> = request.configs.into_iter().collect();
            let state = self.state.clone();
            blocking(move || {
                state
                    .replicas
                    .create_topic(&request.name, request.partitions, configs, false)
                    .map_err(topic_error)?;
                Ok(())
            })
            .await
        })
    }

    fn delete_topic(&self, name: String) -> ViewFuture<'_, ()> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            state.replicas.delete_topic(&name).map_err(topic_error)?;
            Ok(())
        }))
    }

    fn bootstrap_address(&self) -> String {
        format!(
            "{}:{}",
            self.state.advertised_host, self.state.advertised_port
        )
    }

    // The console's actions live in http_view_console.rs.
    fn alter_topic_configs(&self, topic: String, changes: Vec<ConfigChange>) -> ViewFuture<'_, ()> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            console::alter_configs(&state, &topic, &changes)
        }))
    }

    fn create_partitions(&self, topic: String, total: i32) -> ViewFuture<'_, ()> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            console::create_partitions(&state, &topic, total)
        }))
    }

    fn delete_records(&self, topic: String, partition: i32, before: i64) -> ViewFuture<'_, i64> {
        Box::pin(
            async move { console::delete_records(&self.state, &topic, partition, before).await },
        )
    }

    fn produce(&self, message: ProduceMessage) -> ViewFuture<'_, Produced> {
        let state = self.state.clone();
        Box::pin(blocking(move || console::produce(&state, message)))
    }

    fn reset_offsets(&self, reset: OffsetReset) -> ViewFuture<'_, Vec<ResetOffset>> {
        let state = self.state.clone();
        Box::pin(blocking(move || console::reset_offsets(&state, &reset)))
    }

    fn delete_group_offsets(
        &self,
        group: String,
        topic: String,
        partitions: Vec<i32>,
    ) -> ViewFuture<'_, ()> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            console::delete_group_offsets(&state, &group, &topic, &partitions)
        }))
    }

    fn delete_group(&self, group: String) -> ViewFuture<'_, ()> {
        let state = self.state.clone();
        Box::pin(blocking(move || console::delete_group(&state, &group)))
    }

    fn transactions(&self) -> ViewFuture<'_, Vec<streamforge_http::TransactionInfo>> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            Ok(crate::http_view_txn::all_transactions(&state))
        }))
    }

    fn abort_transaction(
        &self,
        transactional_id: String,
    ) -> ViewFuture<'_, streamforge_http::TransactionInfo> {
        let state = self.state.clone();
        Box::pin(blocking(move || {
            crate::http_view_txn::abort(&state, &transactional_id)
        }))
    }

    fn broker_detail(&self) -> ViewFuture<'_, BrokerDetail> {
        let state = self.state.clone();
        let started_at_ms = self.started_at_ms;
        Box::pin(blocking(move || {
            Ok(console::broker_detail(&state, started_at_ms))
        }))
    }
}

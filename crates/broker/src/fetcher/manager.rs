//! The follower fetchers of one broker: one task (and one connection) per source broker, as
//! Kafka with `num.replica.fetchers = 1`. Each round sends one Fetch (v15: this broker's
//! replica id and broker epoch in `replica_state`, topics by id from the metadata image; v12
//! with names while any followed topic has no id known) in an incremental fetch session
//! (KIP-227, [`super::session`]): the first request names every partition it follows from
//! that broker, later ones only those whose fetch state changed. Bounded by
//! `replica.fetch.max.bytes` per partition and `replica.fetch.response.max.bytes` in all; the
//! answer is applied ([`super::apply`]); OFFSET_OUT_OF_RANGE and partial truncations are
//! resolved with OffsetForLeaderEpoch. Reassignment throttles (`quota::replication`): while
//! the follower quota is exceeded, a throttled partition that is not caught up is left out
//! of the Fetch; the records of throttled partitions are recorded against the quota.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic, ReplicaState,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, watch};

use super::apply::{Applied, FetchedPartition, apply};
use super::connection::{FetcherError, LeaderConnection};
use super::session::{Built, SessionHandler, Wanted};
use crate::handlers::fetch_session::PartitionParams;
use crate::inter_broker::{InterBroker, PeerAddr};
use crate::partition::Partition;
use crate::quota::replication::{ReplicationQuotas, Side};

/// Fetch version the fetcher speaks: v15 puts the replica id and broker epoch in
/// `replica_state` (KIP-903) and names topics by id (v13+, KIP-516).
pub const FETCH_VERSION: i16 = 15;
/// The version used while some followed topic has no id known (its names; `diverging_epoch`
/// is v12+).
pub const FETCH_VERSION_BY_NAME: i16 = 12;
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;
/// ListOffsets v8 is the first with -4 (earliest local, KIP-405).
const LIST_OFFSETS_VERSION: i16 = 8;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// `replica.fetch.wait.max.ms` (Kafka's default 500).
pub const REPLICA_FETCH_WAIT_MAX_MS: i32 = 500;
/// `replica.fetch.backoff.ms` (Kafka's default 1000): after an error, before trying again.
pub const REPLICA_FETCH_BACKOFF_MS: u64 = 1_000;
/// A call to the leader that takes longer than this (beyond the long poll) is abandoned.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Most partitions one fetcher follows (a bound on one request's size).
pub const FETCHER_PARTITIONS_MAX: usize = 100_000;
/// Slack above `replica.fetch.response.max.bytes` for the response's own fields.
const RESPONSE_OVERHEAD_MAX_BYTES: usize = 16 << 20;

/// An error of this replica's own storage (KAFKA_STORAGE_ERROR: a full disk, an I/O error,
/// an offline log), as opposed to a role or epoch that changed under the fetch.
fn is_storage_error(e: &crate::partition::PartitionError) -> bool {
    e.kafka_code() == kafka_protocol::ResponseError::KafkaStorageError.code()
}

/// Bounds of the fetchers (from the broker config).
#[derive(Debug, Clone, Copy)]
pub struct FetcherConfig {
    pub node_id: i32,
    /// `replica.fetch.max.bytes`.
    pub partition_max_bytes: usize,
    /// `replica.fetch.response.max.bytes`.
    pub response_max_bytes: usize,
}

type Key = super::session::Key;
type Followed = Arc<Mutex<BTreeMap<Key, Arc<Partition>>>>;

struct Fetcher {
    partitions: Followed,
    wake: Arc<Notify>,
}

/// What the fetchers learn from the metadata image (set by the replication wiring in a
/// cluster; a broker followed by hand, as in tests, has none and fetches by name).
#[derive(Debug)]
struct ImageFacts {
    /// Topic ids by name.
    topic_ids: RwLock<HashMap<String, uuid::Uuid>>,
    /// This broker's epoch (-1: unknown), sent in `replica_state`.
    broker_epoch: std::sync::atomic::AtomicI64,
}

impl Default for ImageFacts {
    fn default() -> Self {
        ImageFacts {
            topic_ids: RwLock::default(),
            broker_epoch: std::sync::atomic::AtomicI64::new(-1),
        }
    }
}

/// Every fetcher of this broker, keyed by source broker.
pub struct FetcherManager {
    config: FetcherConfig,
    /// Where each broker listens (the metadata image's endpoints, once wired).
    peers: Arc<RwLock<HashMap<i32, PeerAddr>>>,
    /// Peers the image names without an inter-broker endpoint (logged once each).
    unreachable: Mutex<BTreeSet<i32>>,
    /// How peers are connected to (TCP, TLS, SASL).
    link: Arc<InterBroker>,
    fetchers: Mutex<HashMap<i32, Fetcher>>,
    image: Arc<ImageFacts>,
    /// The follower side of the reassignment throttles.
    quotas: Arc<ReplicationQuotas>,
    shutdown: watch::Receiver<bool>,
}

impl FetcherManager {
    pub fn new(
        config: FetcherConfig,
        quotas: Arc<ReplicationQuotas>,
        link: Arc<InterBroker>,
        shutdown: watch::Receiver<bool>,
    ) -> FetcherManager {
        FetcherManager {
            config,
            peers: Arc::default(),
            unreachable: Mutex::default(),
            link,
            fetchers: Mutex::default(),
            image: Arc::default(),
            quotas,
            shutdown,
        }
    }

    /// Record where broker `id` listens.
    pub fn set_peer(&self, id: i32, addr: impl Into<PeerAddr>) {
        self.peers.write().insert(id, addr.into());
    }

    /// Record the brokers the image names without an inter-broker endpoint: they are not
    /// reached at all (not on another listener); each is logged when it first shows up.
    pub fn set_unreachable(&self, ids: BTreeSet<i32>) {
        let mut known = self.unreachable.lock();
        for id in ids.difference(&known) {
            tracing::warn!(
                broker = id,
                listener = self.link.listener_name(),
                "a peer broker has no endpoint on the inter-broker listener; not replicating from it"
            );
        }
        let mut peers = self.peers.write();
        for id in &ids {
            peers.remove(id);
        }
        *known = ids;
    }

    /// The topic ids of the image (by name) and this broker's epoch: later fetches name
    /// topics by id and carry the epoch.
    pub fn set_image_facts(&self, topic_ids: HashMap<String, uuid::Uuid>, broker_epoch: i64) {
        let mut ids = self.image.topic_ids.write();
        if *ids != topic_ids {
            *ids = topic_ids;
        }
        self.image
            .broker_epoch
            .store(broker_epoch, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where broker `id` listens, if the image has told us.
    pub fn peer(&self, id: i32) -> Option<PeerAddr> {
        self.peers.read().get(&id).cloned()
    }

    /// How peers are connected to.
    pub fn link(&self) -> &Arc<InterBroker> {
        &self.link
    }

    /// Follow `partition` from `leader_id` (moving it off any other fetcher).
    pub fn add(&self, partition: Arc<Partition>, leader_id: i32) {
        self.remove(&partition.topic, partition.index);
        let mut fetchers = self.fetchers.lock();
        let fetcher = fetchers.entry(leader_id).or_insert_with(|| {
            let fetcher = Fetcher {
                partitions: Followed::default(),
                wake: Arc::new(Notify::new()),
            };
            let task = FetcherTask {
                config: self.config,
                leader_id,
                peers: self.peers.clone(),
                link: self.link.clone(),
                partitions: fetcher.partitions.clone(),
                wake: fetcher.wake.clone(),
                quotas: self.quotas.clone(),
                shutdown: self.shutdown.clone(),
                refused: HashMap::new(),
                image: self.image.clone(),
                session: SessionHandler::default(),
            };
            tokio::spawn(task.run());
            fetcher
        });
        let mut followed = fetcher.partitions.lock();
        if followed.len() < FETCHER_PARTITIONS_MAX {
            followed.insert((partition.topic.clone(), partition.index), partition);
        } else {
            tracing::error!(leader_id, "fetcher partition limit reached; not following");
        }
        drop(followed);
        fetcher.wake.notify_one();
    }

    /// Stop following `topic`-`index` (it became leader, or was stopped).
    pub fn remove(&self, topic: &str, index: i32) {
        for fetcher in self.fetchers.lock().values() {
            fetcher
                .partitions
                .lock()
                .retain(|(t, i), _| !(&**t == topic && *i == index));
        }
    }

    /// Follow exactly `wanted` (each partition from its leader): add what is missing, move
    /// what changed leader, drop the rest. The replication wiring calls it after every
    /// metadata change; a partition already followed from the right leader is left alone.
    pub fn sync(&self, wanted: Vec<(Arc<Partition>, i32)>) {
        let keys: HashMap<Key, i32> = wanted
            .iter()
            .map(|(p, leader)| ((p.topic.clone(), p.index), *leader))
            .collect();
        let mut present: HashMap<Key, i32> = HashMap::new();
        for (&leader_id, fetcher) in self.fetchers.lock().iter() {
            fetcher.partitions.lock().retain(|key, _| {
                let keep = keys.get(key) == Some(&leader_id);
                if keep {
                    present.insert(key.clone(), leader_id);
                }
                keep
            });
        }
        for (partition, leader_id) in wanted {
            let key = (partition.topic.clone(), partition.index);
            if present.get(&key) != Some(&leader_id) {
                self.add(partition, leader_id);
            }
        }
    }

    /// Partitions followed from `leader_id`.
    pub fn followed(&self, leader_id: i32) -> usize {
        self.fetchers
            .lock()
            .get(&leader_id)
            .map_or(0, |f| f.partitions.lock().len())
    }
}

struct FetcherTask {
    config: FetcherConfig,
    leader_id: i32,
    peers: Arc<RwLock<HashMap<i32, PeerAddr>>>,
    link: Arc<InterBroker>,
    partitions: Followed,
    wake: Arc<Notify>,
    quotas: Arc<ReplicationQuotas>,
    shutdown: watch::Receiver<bool>,
    /// Partitions the leader refused (an error other than a fenced epoch, e.g.
    /// TOPIC_AUTHORIZATION_FAILED when this broker lacks CLUSTER_ACTION): left out of the
    /// Fetch until the instant, as Kafka's fetcher delays a partition with an error by
    /// `replica.fetch.backoff.ms`; and the code, logged again only when it changes. Also a
    /// partition whose append failed here with a storage error (a full disk): code
    /// KAFKA_STORAGE_ERROR, logged by `storage_errors`. At most one entry per followed
    /// partition (pruned every round).
    refused: HashMap<Key, (tokio::time::Instant, i16)>,
    image: Arc<ImageFacts>,
    /// The incremental fetch session with the leader.
    session: SessionHandler,
}

impl FetcherTask {
    async fn run(mut self) {
        let mut connection: Option<LeaderConnection> = None;
        // The last TLS or SASL refusal logged: a misconfiguration is shown once per change,
        // not on every retry.
        let mut refusal_logged: Option<String> = None;
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            if self.partitions.lock().is_empty() {
                tokio::select! {
                    _ = self.wake.notified() => continue,
                    _ = self.shutdown.changed() => return,
                }
            }
            let result = match connection.as_mut() {
                Some(c) => self.round(c).await,
                None => match self.connect().await {
                    Ok(c) => {
                        connection = Some(c);
                        refusal_logged = None;
                        continue;
                    }
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = result {
                let message = e.to_string();
                if matches!(
                    e,
                    FetcherError::Tls(_) | FetcherError::Sasl(_) | FetcherError::NotConfigured(_)
                ) && refusal_logged.as_ref() != Some(&message)
                {
                    tracing::warn!(leader_id = self.leader_id, error = %e, "cannot connect to the leader on the inter-broker listener; retrying");
                    refusal_logged = Some(message);
                }
                tracing::debug!(leader_id = self.leader_id, error = %e, "replica fetch failed; backing off");
                connection = None;
                self.session.handle_error();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(REPLICA_FETCH_BACKOFF_MS)) => {}
                    _ = self.shutdown.changed() => return,
                }
            }
        }
    }

    async fn connect(&self) -> Result<LeaderConnection, FetcherError> {
        let peer = self
            .peers
            .read()
            .get(&self.leader_id)
            .cloned()
            .ok_or(FetcherError::UnknownBroker(self.leader_id))?;
        let response_max = self.config.response_max_bytes + RESPONSE_OVERHEAD_MAX_BYTES;
        self.link.connect(&peer, response_max, CALL_TIMEOUT).await
    }

    /// One Fetch for every followed partition (in the session: those whose state changed),
    /// and what follows from its answer.
    async fn round(&mut self, connection: &mut LeaderConnection) -> Result<(), FetcherError> {
        let (positions, wanted) = self.wanted();
        if wanted.is_empty() {
            // Nothing to ask for (every partition throttled, or none with a position): as
            // Kafka's fetcher, back off `replica.fetch.backoff.ms` rather than send an empty
            // Fetch (which the leader would answer at once).
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(REPLICA_FETCH_BACKOFF_MS)) => {}
                _ = self.wake.notified() => {}
                _ = self.shutdown.changed() => {}
            }
            return Ok(());
        }
        // Topics by id, for the answer (every partition of the session may be in it).
        let names: HashMap<uuid::Uuid, Arc<str>> = wanted
            .iter()
            .map(|(k, w)| (w.topic_id, k.0.clone()))
            .collect();
        let built = self.session.build(wanted);
        let (request, version) = self.request(&built);
        let response: FetchResponse = connection
            .call(ApiKey::Fetch, version, &request, CALL_TIMEOUT)
            .await?;
        if !self
            .session
            .handle_response(response.error_code, response.session_id)
        {
            tracing::debug!(
                leader_id = self.leader_id,
                code = response.error_code,
                "fetch session refused; the next fetch is a full one"
            );
            return Ok(());
        }
        for t in response.responses {
            let topic: Arc<str> = if version >= 13 {
                match names.get(&t.topic_id) {
                    Some(name) => name.clone(),
                    None => continue,
                }
            } else {
                Arc::from(t.topic.0.as_str())
            };
            for r in t.partitions {
                let key: Key = (topic.clone(), r.partition_index);
                let Some((partition, pos)) = positions.get(&key) else {
                    continue;
                };
                if let Some(records) = &r.records
                    && self.quotas.is_throttled(Side::Follower, &key.0, key.1)
                {
                    // In sync or not: all throttled traffic counts (Kafka's fetcher).
                    self.quotas.record(Side::Follower, records.len() as u64);
                }
                let fetched = FetchedPartition {
                    error_code: r.error_code,
                    high_watermark: r.high_watermark,
                    log_start_offset: r.log_start_offset,
                    records: r.records.unwrap_or_default(),
                    diverging_epoch: (r.diverging_epoch.end_offset >= 0
                        || r.diverging_epoch.epoch >= 0)
                        .then_some((r.diverging_epoch.epoch, r.diverging_epoch.end_offset)),
                };
                let applied = apply(partition, pos.leader_epoch, pos.fetch_offset, &fetched);
                self.follow_up(connection, &key, partition, pos.leader_epoch, applied)
                    .await?;
            }
        }
        Ok(())
    }

    /// Every partition to fetch now, with its position and fetch state: followed, with a
    /// position, not in its error backoff, not held back by the follower throttle.
    #[allow(clippy::type_complexity)]
    fn wanted(
        &mut self,
    ) -> (
        HashMap<Key, (Arc<Partition>, crate::partition::FollowerPosition)>,
        BTreeMap<Key, Wanted>,
    ) {
        let followed: Vec<Arc<Partition>> = self.partitions.lock().values().cloned().collect();
        let mut positions = HashMap::new();
        let mut wanted = BTreeMap::new();
        let quota_exceeded = self.quotas.is_exceeded(Side::Follower);
        let now = tokio::time::Instant::now();
        let followed_keys: BTreeSet<Key> = followed
            .iter()
            .map(|p| (p.topic.clone(), p.index))
            .collect();
        self.refused.retain(|k, _| followed_keys.contains(k));
        let topic_ids = self.image.topic_ids.read();
        for p in &followed {
            let Ok(pos) = p.follower_position() else {
                continue;
            };
            let key: Key = (p.topic.clone(), p.index);
            if let Some((until, _)) = self.refused.get(&key)
                && *until > now
            {
                continue;
            }
            if quota_exceeded && self.throttled_out_of_sync(p) {
                continue;
            }
            let params = PartitionParams {
                fetch_offset: pos.fetch_offset,
                partition_max_bytes: clamp_i32(self.config.partition_max_bytes),
                current_leader_epoch: pos.leader_epoch,
                last_fetched_epoch: pos.last_fetched_epoch,
                log_start_offset: pos.log_start_offset,
            };
            let topic_id = topic_ids.get(&*p.topic).copied().unwrap_or_default();
            wanted.insert(key.clone(), Wanted { topic_id, params });
            positions.insert(key, (p.clone(), pos));
        }
        (positions, wanted)
    }

    /// The Fetch request for `built`, and its version.
    fn request(&self, built: &Built) -> (FetchRequest, i16) {
        let version = if built.uses_topic_ids {
            FETCH_VERSION
        } else {
            FETCH_VERSION_BY_NAME
        };
        let mut request = FetchRequest::default();
        if version >= 15 {
            let mut state = ReplicaState::default();
            state.replica_id = BrokerId(self.config.node_id);
            state.replica_epoch = self
                .image
                .broker_epoch
                .load(std::sync::atomic::Ordering::Relaxed);
            request.replica_state = state;
        } else {
            request.replica_id = BrokerId(self.config.node_id);
        }
        request.max_wait_ms = REPLICA_FETCH_WAIT_MAX_MS;
        request.min_bytes = 1;
        request.max_bytes = clamp_i32(self.config.response_max_bytes);
        request.session_id = built.session_id;
        request.session_epoch = built.session_epoch;
        let mut topics: BTreeMap<(Arc<str>, uuid::Uuid), Vec<FetchPartition>> = BTreeMap::new();
        for ((topic, index), w) in &built.to_send {
            let mut fp = FetchPartition::default();
            fp.partition = *index;
            fp.current_leader_epoch = w.params.current_leader_epoch;
            fp.fetch_offset = w.params.fetch_offset;
            fp.last_fetched_epoch = w.params.last_fetched_epoch;
            fp.log_start_offset = w.params.log_start_offset;
            fp.partition_max_bytes = w.params.partition_max_bytes;
            topics
                .entry((topic.clone(), w.topic_id))
                .or_default()
                .push(fp);
        }
        request.topics = topics
            .into_iter()
            .map(|((name, id), partitions)| {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(name.to_string()));
                t.topic_id = id;
                t.partitions = partitions;
                t
            })
            .collect();
        let mut forgotten: BTreeMap<(Arc<str>, uuid::Uuid), Vec<i32>> = BTreeMap::new();
        for ((topic, index), id) in &built.forgotten {
            forgotten
                .entry((topic.clone(), *id))
                .or_default()
                .push(*index);
        }
        request.forgotten_topics_data = forgotten
            .into_iter()
            .map(|((name, id), partitions)| {
                let mut t = ForgottenTopic::default();
                t.topic = TopicName(StrBytes::from_string(name.to_string()));
                t.topic_id = id;
                t.partitions = partitions;
                t
            })
            .collect();
        (request, version)
    }

    /// Kafka's `shouldFollowerThrottle` (with the quota exceeded): the partition is throttled
    /// here and this replica is not known to be caught up (its lag to the leader's high
    /// watermark is unknown or above 0), so throttling it cannot thrash the ISR.
    fn throttled_out_of_sync(&self, p: &Partition) -> bool {
        self.quotas.is_throttled(Side::Follower, &p.topic, p.index)
            && p.replica_fetcher_lag() != Some(0)
    }

    /// After applying: resolve by epoch, or stop following a partition the leader refuses.
    async fn follow_up(
        &mut self,
        connection: &mut LeaderConnection,
        key: &Key,
        partition: &Partition,
        leader_epoch: i32,
        applied: Result<Applied, crate::partition::PartitionError>,
    ) -> Result<(), FetcherError> {
        match applied {
            Ok(Applied::Appended { .. } | Applied::Truncated { done: true, .. }) => {
                self.refused.remove(key);
                Ok(())
            }
            Ok(Applied::ResolveByEpoch | Applied::Truncated { done: false, .. }) => {
                self.truncate_by_epoch(connection, partition, leader_epoch)
                    .await
            }
            Ok(Applied::MovedToTieredStorage) => {
                self.restart_above_remote(connection, partition, leader_epoch)
                    .await
            }
            Ok(Applied::Stop(code)) => {
                let fenced = code == kafka_protocol::ResponseError::FencedLeaderEpoch.code();
                if fenced {
                    tracing::warn!(topic = %key.0, partition = key.1, leader_id = self.leader_id, code, "the leader refused the fetch");
                    // Our epoch is older than the leader's: wait for the metadata.
                    self.partitions.lock().remove(key);
                    return Ok(());
                }
                let until =
                    tokio::time::Instant::now() + Duration::from_millis(REPLICA_FETCH_BACKOFF_MS);
                let previous = self.refused.insert(key.clone(), (until, code));
                if previous.map(|(_, c)| c) != Some(code) {
                    tracing::warn!(topic = %key.0, partition = key.1, leader_id = self.leader_id, code, "the leader refused the fetch; retrying every replica.fetch.backoff.ms");
                }
                Ok(())
            }
            // This replica's disk refused the append (a full disk, an I/O error): counted and
            // logged (throttled) as a leader's failed append is, and the partition waits
            // `replica.fetch.backoff.ms` before it is fetched again. Without the wait the
            // fetcher asked the leader for the same records at once, forever, while the
            // disk stayed full. The log is as before the append (`segment/append.rs` undoes
            // it), so the next fetch after space returns simply continues.
            Err(e) if is_storage_error(&e) => {
                crate::storage_errors::record(&key.0, key.1, &e);
                let until =
                    tokio::time::Instant::now() + Duration::from_millis(REPLICA_FETCH_BACKOFF_MS);
                self.refused.insert(
                    key.clone(),
                    (
                        until,
                        kafka_protocol::ResponseError::KafkaStorageError.code(),
                    ),
                );
                Ok(())
            }
            // This broker's role or epoch changed under the fetch: drop the answer.
            Err(e) => {
                tracing::debug!(topic = %key.0, partition = key.1, error = %e, "fetched data not applied");
                Ok(())
            }
        }
    }

    /// OFFSET_MOVED_TO_TIERED_STORAGE: the leader's local log start (ListOffsets -4, as
    /// Kafka's follower asks), then restart this replica there with the remote part known.
    async fn restart_above_remote(
        &mut self,
        connection: &mut LeaderConnection,
        partition: &Partition,
        leader_epoch: i32,
    ) -> Result<(), FetcherError> {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = partition.index;
        p.current_leader_epoch = leader_epoch;
        p.timestamp = EARLIEST_LOCAL_TIMESTAMP;
        let mut t = ListOffsetsTopic::default();
        t.name = TopicName(StrBytes::from_string(partition.topic.to_string()));
        t.partitions = vec![p];
        let mut request = ListOffsetsRequest::default();
        request.replica_id = BrokerId(self.config.node_id);
        request.topics = vec![t];
        let response: ListOffsetsResponse = connection
            .call(
                ApiKey::ListOffsets,
                LIST_OFFSETS_VERSION,
                &request,
                CALL_TIMEOUT,
            )
            .await?;
        let Some(answer) = response.topics.first().and_then(|t| t.partitions.first()) else {
            return Err(FetcherError::Decode("empty ListOffsets answer".into()));
        };
        if answer.error_code != 0 || answer.offset < 0 {
            return Ok(()); // retried at the next round
        }
        if let Err(e) = partition
            .restart_follower_above_remote(leader_epoch, answer.offset)
            .await
        {
            tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e, "restart at the leader's local log start failed");
        }
        Ok(())
    }

    /// OffsetForLeaderEpoch for the follower's latest epoch, then truncate to its end.
    async fn truncate_by_epoch(
        &mut self,
        connection: &mut LeaderConnection,
        partition: &Partition,
        leader_epoch: i32,
    ) -> Result<(), FetcherError> {
        let Ok(pos) = partition.follower_position() else {
            return Ok(());
        };
        let mut p = OffsetForLeaderPartition::default();
        p.partition = partition.index;
        p.current_leader_epoch = leader_epoch;
        p.leader_epoch = pos.last_fetched_epoch;
        let mut t = OffsetForLeaderTopic::default();
        t.topic = TopicName(StrBytes::from_string(partition.topic.to_string()));
        t.partitions = vec![p];
        let mut request = OffsetForLeaderEpochRequest::default();
        request.replica_id = BrokerId(self.config.node_id);
        request.topics = vec![t];
        let response: OffsetForLeaderEpochResponse = connection
            .call(
                ApiKey::OffsetForLeaderEpoch,
                OFFSET_FOR_LEADER_EPOCH_VERSION,
                &request,
                CALL_TIMEOUT,
            )
            .await?;
        let Some(end) = response.topics.first().and_then(|t| t.partitions.first()) else {
            return Err(FetcherError::Decode(
                "empty OffsetForLeaderEpoch answer".into(),
            ));
        };
        if end.error_code != 0 {
            return Ok(()); // retried at the next round
        }
        if let Err(e) =
            partition.truncate_by_epoch(leader_epoch, (end.leader_epoch, end.end_offset))
        {
            tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e, "truncation failed");
        }
        Ok(())
    }
}

fn clamp_i32(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod storage_error_tests {
    use std::io;

    use streamforge_log::LogError;

    use super::is_storage_error;
    use crate::partition::PartitionError;

    #[test]
    fn a_failed_append_on_a_full_disk_backs_off_and_a_role_change_does_not() {
        let full = io::Error::from_raw_os_error(28); // ENOSPC
        assert!(is_storage_error(&PartitionError::Log(LogError::Io(full))));
        assert!(is_storage_error(&PartitionError::Offline("damaged".into())));
        // A role or epoch that changed under the fetch: the answer is dropped, the next
        // fetch follows the new role at once.
        assert!(!is_storage_error(&PartitionError::NotLeaderOrFollower));
        assert!(!is_storage_error(&PartitionError::FencedLeaderEpoch {
            requested: 1,
            current: 2
        }));
        assert!(!is_storage_error(&PartitionError::Gone));
    }
}

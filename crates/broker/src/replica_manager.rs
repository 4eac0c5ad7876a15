//! The partitions hosted on this broker, following the metadata image: topic changes go to the
//! controller ([`MetadataService::request`]) and come back as committed deltas, which
//! [`apply`] turns into the named lifecycle operations (`make_leader`, `make_follower`,
//! `stop_partition`). Each partition's state (log, role, epoch, high watermark) is owned by its
//! [`Partition`].

mod apply;
pub mod clean_shutdown;
mod hosted;
pub(crate) mod hw_checkpoint;
mod lifecycle;
mod reassignments;
mod roles;
#[cfg(test)]
pub(crate) mod test_cluster;
pub(crate) mod topics;
pub use hosted::{LookupError, Topic};
pub use hw_checkpoint::HW_CHECKPOINT_INTERVAL_MS_DEFAULT;
pub use lifecycle::CLOSE_THREADS_MAX;
pub use roles::{IsrIntents, ROLE_THREADS_MAX};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::ResponseError;
use parking_lot::{Mutex, RwLock};
use streamforge_log::{LogConfig, LogError};
use streamforge_tiered::TieringManager;
use uuid::Uuid;

pub use crate::partition::{LEADER_EPOCH, Partition, PartitionError};
use crate::partition::{OpenHighWatermark, RemoteTier};
use streamforge_metadata::controller::{ControllerConfig, Event, Reply};
use streamforge_metadata::records::Endpoint;

use crate::metadata_service::{MetadataError, MetadataService};
use crate::quota::replication::ReplicationQuotas;
use crate::topic_config;
use crate::topic_store::TopicStore;
/// Kafka's limit on topic name length.
pub const TOPIC_NAME_MAX_BYTES: usize = 249;
/// Upper bound on partitions per topic (a named limit; Kafka has none but this guards typos).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Why a topic operation failed, each with its Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("Topic '{0}' already exists.")]
    AlreadyExists(String),
    #[error("{0}")]
    InvalidName(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("This server does not host this topic-partition.")]
    UnknownTopic,
    #[error("storage error: {0}")]
    Storage(String),
    /// Deleting an internal topic (`__consumer_offsets` holds every group's committed offsets).
    #[error("Topic '{0}' is an internal topic and cannot be deleted.")]
    InternalTopic(String),
    /// The controller's answer, with the code Kafka's controller gives.
    #[error("{1}")]
    Controller(ResponseError, String),
}

impl TopicError {
    pub fn kafka_code(&self) -> i16 {
        let error = match self {
            TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
            TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
            TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
            TopicError::UnknownTopic => ResponseError::UnknownTopicOrPartition,
            TopicError::Storage(_) => ResponseError::KafkaStorageError,
            // TOPIC_AUTHORIZATION_FAILED: the code Kafka answers when deletion of a topic is not
            // permitted (no principal here may delete an internal topic).
            TopicError::InternalTopic(_) => ResponseError::TopicAuthorizationFailed,
            TopicError::Controller(e, _) => *e,
        };
        error.code()
    }
}

impl From<LogError> for TopicError {
    fn from(e: LogError) -> Self {
        TopicError::Storage(e.to_string())
    }
}

impl From<MetadataError> for TopicError {
    fn from(e: MetadataError) -> Self {
        match e {
            MetadataError::Refused(code) => TopicError::Controller(code, format!("{code:?}")),
            other => TopicError::Storage(other.to_string()),
        }
    }
}

/// How this broker joins the metadata quorum.
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    pub node_id: i32,
    /// This broker's listeners, as other brokers and clients reach them.
    pub endpoints: Vec<Endpoint>,
    /// `broker.rack`, registered with the controller.
    pub rack: Option<String>,
    pub controller: ControllerConfig,
    pub heartbeat_interval_ms: u64,
    /// `Some`: a voter of this static quorum (`--controller-quorum-voters`).
    pub cluster: Option<crate::metadata_cluster::ClusterOptions>,
    /// `replica.lag.time.max.ms`: how long a leader keeps a follower that does not catch up
    /// in the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replication.quota.window.*`: the windows of the reassignment throttles.
    pub replication_quota_window: crate::quota::rate::RateConfig,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            node_id: 1,
            endpoints: Vec::new(),
            rack: None,
            controller: ControllerConfig::default(),
            heartbeat_interval_ms: streamforge_metadata::controller::BROKER_HEARTBEAT_INTERVAL_MS,
            cluster: None,
            replica_lag_time_max_ms: crate::partition::replica::REPLICA_LAG_TIME_MAX_MS_DEFAULT,
            replication_quota_window: crate::quota::replication::rate_config(),
        }
    }
}

impl From<std::io::Error> for TopicError {
    fn from(e: std::io::Error) -> Self {
        TopicError::Storage(e.to_string())
    }
}

/// Topics only the broker itself writes (Kafka's internal topics).
pub fn is_internal_topic(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state"
}

/// Kafka's topic name rule: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::InvalidName(
            "Topic name is illegal, it can't be empty".into(),
        ));
    }
    if name == "." || name == ".." {
        return Err(TopicError::InvalidName(
            "Topic name cannot be \".\" or \"..\"".into(),
        ));
    }
    if name.len() > TOPIC_NAME_MAX_BYTES {
        return Err(TopicError::InvalidName(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_BYTES} characters, topic name: {name}"
        )));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(TopicError::InvalidName(format!(
            "Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

/// Open partitions `indexes` of a topic at startup on up to one thread per CPU (Kafka's
/// `num.recovery.threads.per.data.dir`): logs are independent, and opening one is syscalls and,
/// after an unclean shutdown, CRC checks — restart time is what a crash costs clients. A log
/// that cannot be opened is an offline partition, not a failed start-up. `hw(p)` says where
/// partition `p`'s high watermark starts.
fn open_partitions(
    topic: &Arc<str>,
    indexes: &[i32],
    data_dir: &Path,
    config: &LogConfig,
    remote: &RemoteTier,
    hw: &(dyn Fn(i32) -> OpenHighWatermark + Sync),
) -> Vec<Arc<Partition>> {
    let count = indexes.len();
    let open = |p: i32| {
        Partition::open_or_offline(topic, p, data_dir, config.clone(), remote.clone(), hw(p))
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count);
    if threads <= 1 {
        return indexes.iter().map(|&p| Arc::new(open(p))).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let opened: Mutex<Vec<Option<Partition>>> = Mutex::new((0..count).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&p) = indexes.get(i) else {
                        break;
                    };
                    let result = open(p);
                    opened.lock()[i] = Some(result);
                }
            });
        }
    });
    opened
        .into_inner()
        .into_iter()
        .map(|r| Arc::new(r.expect("every partition index was taken by a thread")))
        .collect()
}

/// All topics and partitions of this broker.
pub struct ReplicaManager {
    data_dir: PathBuf,
    /// Topic-config defaults: start-up values with the dynamic broker configs applied.
    log_defaults: RwLock<Arc<LogConfig>>,
    /// `meta.properties` (the cluster id) and, for the upgrade, an earlier release's registry.
    store: TopicStore,
    /// The metadata node: controller, committed image, this broker's registration.
    metadata: Arc<MetadataService>,
    /// The partitions hosted here, by topic: the local view of the image.
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serializes requests to the controller with applying their deltas.
    admin: Mutex<()>,
    /// Bytes whose CRC the logs checked when they were opened (unclean-shutdown recovery).
    recovery_checked_bytes: u64,
    /// Most partitions over all topics (`partition_limit`); creations past it are refused.
    partitions_max: std::sync::atomic::AtomicUsize,
    /// Tiered storage, which partitions read below their local log start.
    tiering: Option<Arc<TieringManager>>,
    /// The `replication-offset-checkpoint` of the data directory.
    hw_checkpoint: hw_checkpoint::HwCheckpointer,
    /// Bumped after every applied delta: the coordinators look at their partitions' roles.
    roles: tokio::sync::watch::Sender<u64>,
    /// ISR changes this broker's leaders propose, for the replication wiring to send.
    isr_intents: Arc<IsrIntents>,
    /// Leaders with followers send their ISR changes here (into `isr_intents`).
    isr_sink: crate::partition::IsrChangeSink,
    /// `replica.lag.time.max.ms`.
    replica_lag_time_max_ms: i64,
    /// Reassignment throttles: the topics' throttled replicas (kept here from the image) and
    /// the broker's rates (from the dynamic broker configs).
    replication_quotas: Arc<ReplicationQuotas>,
}

impl ReplicaManager {
    /// A broker with node id 1 and no listeners (tests and tools).
    pub fn open(
        data_dir: &Path,
        log_defaults: LogConfig,
        tiering: Option<Arc<TieringManager>>,
    ) -> Result<ReplicaManager, TopicError> {
        Self::open_with(data_dir, MetadataOptions::default(), log_defaults, tiering)
    }

    /// Open the metadata log (importing an earlier release's registry once), register this
    /// broker, then open every partition the image places here (recovering as needed) with
    /// the role the image names. `tiering` serves reads below the local log start.
    pub fn open_with(
        data_dir: &Path,
        options: MetadataOptions,
        log_defaults: LogConfig,
        tiering: Option<Arc<TieringManager>>,
    ) -> Result<ReplicaManager, TopicError> {
        std::fs::create_dir_all(data_dir)?;
        let started = std::time::Instant::now();
        let clock = log_defaults.runtime.clock().clone();
        let node_id = options.node_id;
        let replica_lag_time_max_ms = options.replica_lag_time_max_ms;
        let start = crate::metadata_service::MetadataStart {
            data_dir,
            node_id,
            controller: options.controller,
            heartbeat_interval_ms: options.heartbeat_interval_ms,
            cluster: options.cluster.as_ref(),
            clock: clock.clone(),
        };
        let metadata = MetadataService::open(start, || {
            crate::metadata_import::legacy_records(data_dir, node_id)
        })?;
        // Read (and removed) before registering: a crash from here on is an unclean stop.
        let previous_broker_epoch = clean_shutdown::take(data_dir);
        metadata.register(
            options.endpoints,
            options.rack,
            previous_broker_epoch,
            clock.now_ms().max(0) as u64,
        )?;
        let isr_intents = Arc::new(IsrIntents::default());
        let mut rm = ReplicaManager {
            data_dir: data_dir.to_path_buf(),
            log_defaults: RwLock::new(Arc::new(log_defaults)),
            store: TopicStore::new(data_dir),
            metadata,
            topics: RwLock::new(BTreeMap::new()),
            admin: Mutex::new(()),
            recovery_checked_bytes: 0,
            partitions_max: std::sync::atomic::AtomicUsize::new(usize::MAX),
            tiering,
            hw_checkpoint: hw_checkpoint::HwCheckpointer::open(data_dir),
            roles: tokio::sync::watch::Sender::new(0),
            isr_sink: isr_intents.sink(),
            isr_intents,
            replica_lag_time_max_ms,
            replication_quotas: Arc::new(ReplicationQuotas::new(
                node_id,
                options.replication_quota_window,
                clock.clone(),
            )),
        };
        let topics = rm.open_from_image(&rm.metadata.image_for_open());
        let partitions = topics.values().flat_map(|t| t.hosted());
        rm.recovery_checked_bytes = partitions.map(|p| p.recovery_checked_bytes()).sum();
        tracing::info!(
            logs = topics.values().map(|t| t.hosted_count()).sum::<usize>(),
            recovery_checked_bytes = rm.recovery_checked_bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded logs"
        );
        *rm.topics.write() = topics;
        Ok(rm)
    }

    /// The metadata node (image, controller, registration).
    pub fn metadata(&self) -> &Arc<MetadataService> {
        &self.metadata
    }

    /// The replication quotas (reassignment throttles) of this broker.
    pub fn replication_quotas(&self) -> &Arc<ReplicationQuotas> {
        &self.replication_quotas
    }

    /// The ISR changes this broker's leaders want sent to the controller.
    pub fn isr_intents(&self) -> &Arc<IsrIntents> {
        &self.isr_intents
    }

    /// Send an ISR change to the controller (AlterPartition) and apply what committed; the
    /// controller's answer. Blocking (waits for the controller, bounded). The round trip holds
    /// no lock: with the controller gone it can wait seconds, and the metadata follower must
    /// meanwhile apply the new leaderships (the chaos test saw failovers wait behind it).
    pub fn alter_partition(
        &self,
        change: streamforge_metadata::controller::AlterPartition,
    ) -> Result<Reply, TopicError> {
        let wait = crate::metadata_cluster::CONTROLLER_WAIT_MS;
        let reply = self
            .metadata
            .reply_within(Event::AlterPartition(change), self.now_ms(), wait);
        let _admin = self.admin.lock();
        self.apply_delta(&self.metadata.take_pending());
        Ok(reply?)
    }

    /// Changes after every applied delta (roles may have moved).
    pub fn watch_roles(&self) -> tokio::sync::watch::Receiver<u64> {
        self.roles.subscribe()
    }

    /// The committed metadata image.
    pub fn image(&self) -> streamforge_metadata::MetadataImage {
        self.metadata.image()
    }

    fn now_ms(&self) -> u64 {
        self.log_defaults().runtime.clock().now_ms().max(0) as u64
    }

    /// Send `event` to the controller and apply what committed.
    pub(crate) fn request(
        &self,
        event: Event,
    ) -> Result<(Reply, Vec<apply::CreateFailure>), TopicError> {
        let (reply, delta) = self.metadata.request(event, self.now_ms())?;
        Ok((reply, self.apply_delta(&delta)))
    }

    /// Bytes whose CRC the logs checked when this broker opened them: 0 after a clean
    /// shutdown; after a crash, the data written since each log's last flush.
    pub fn recovery_checked_bytes(&self) -> u64 {
        self.recovery_checked_bytes
    }

    /// Set the broker-wide partition limit (start-up).
    pub fn set_partitions_max(&self, max: usize) {
        self.partitions_max
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Refuse `adding` more partitions when they would pass the limit (under the admin lock).
    pub(crate) fn check_partition_limit(&self, adding: i32) -> Result<(), TopicError> {
        let max = self
            .partitions_max
            .load(std::sync::atomic::Ordering::Relaxed);
        let hosted: usize = self.topics.read().values().map(|t| t.hosted_count()).sum();
        let adding = adding.max(0) as usize;
        if hosted.saturating_add(adding) > max {
            return Err(TopicError::InvalidPartitions(format!(
                "Adding {adding} partitions would exceed this broker's limit of {max} partitions ({hosted} exist); see --max-partitions."
            )));
        }
        Ok(())
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Partitions whose log could not be opened (`streamforge_offline_partitions`).
    pub fn offline_partitions(&self) -> usize {
        self.all_partitions()
            .iter()
            .filter(|p| p.offline_reason().is_some())
            .count()
    }

    pub fn log_defaults(&self) -> Arc<LogConfig> {
        self.log_defaults.read().clone()
    }

    /// New topic-config defaults (a dynamic broker config changed): every log without its own
    /// override of a changed setting runs with the new default at once, as in Kafka.
    pub fn set_log_defaults(&self, defaults: LogConfig) {
        let _admin = self.admin.lock();
        *self.log_defaults.write() = Arc::new(defaults.clone());
        for topic in self.topics() {
            let config = topic_config::log_config(&defaults, &topic.configs);
            let remote_enabled = crate::tiered::remote_enabled(&topic.configs);
            for p in topic.hosted() {
                p.update_config(config.clone(), remote_enabled);
            }
        }
    }

    pub fn store(&self) -> &TopicStore {
        &self.store
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics.read().values().find(|t| t.id == id).cloned()
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.topics.read().values().cloned().collect()
    }

    /// Partition `index` of `topic` when it is hosted here.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.lookup_partition(topic, index).ok()
    }

    /// Partition `index` of `topic`, or why it is not served here: unknown (no such topic or
    /// partition) or not hosted (another broker's replica), as Produce and Fetch answer.
    pub fn lookup_partition(&self, topic: &str, index: i32) -> Result<Arc<Partition>, LookupError> {
        let topics = self.topics.read();
        let t = topics.get(topic).ok_or(LookupError::Unknown)?;
        t.lookup(index).cloned()
    }

    /// Does `topic` have a partition `index` (hosted here or by other brokers)?
    pub fn partition_exists(&self, topic: &str, index: i32) -> bool {
        !matches!(
            self.lookup_partition(topic, index),
            Err(LookupError::Unknown)
        )
    }

    /// Applies `delta` as if the controller had committed it: for tests that play the part
    /// of a cluster whose other brokers do not run (moving a leadership here and away).
    #[doc(hidden)]
    pub fn apply_delta_for_tests(&self, delta: &streamforge_metadata::MetadataDelta) {
        let _admin = self.admin.lock();
        let failures = self.apply_delta(delta);
        assert!(failures.is_empty(), "the delta created no log");
    }

    /// Heartbeat and controller tick when due, applying what committed.
    pub fn metadata_tick(&self, now_ms: u64) {
        // The heartbeat's round trip to the controller runs without the admin lock, so admin
        // requests and the metadata follower do not wait behind it (they did, every heartbeat:
        // create-topic p50 tripled with a 500 ms interval). What it replayed stays pending and
        // is taken and applied under the lock, in order with everyone else's.
        let heartbeat = self.metadata.periodic(now_ms);
        {
            let _admin = self.admin.lock();
            self.apply_delta(&self.metadata.take_pending());
        }
        if let Err(e) = heartbeat {
            tracing::warn!(error = %e, "metadata heartbeat failed");
        }
    }

    /// Cluster mode: apply every delta the metadata log commits, as it commits, until
    /// `shutdown` (runs on a blocking thread; a one-voter broker returns at once).
    pub fn follow_metadata(&self, shutdown: &tokio::sync::watch::Receiver<bool>) {
        crate::metadata_cluster::follow_commits(&self.metadata, shutdown, || {
            let _admin = self.admin.lock();
            match self.metadata.sync() {
                Ok(delta) => {
                    self.apply_delta(&delta);
                }
                Err(e) => tracing::warn!(error = %e, "metadata replay failed"),
            }
        });
    }

    /// Wait (bounded by [`crate::metadata_cluster::BROKERS_WAIT_MS`]) until `want` brokers are
    /// live, heartbeating and applying what commits meanwhile; the live count at the end.
    pub(crate) fn wait_for_live_brokers(&self, want: usize) -> usize {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(crate::metadata_cluster::BROKERS_WAIT_MS);
        loop {
            let live = self.image().unfenced_brokers().count();
            if live >= want || std::time::Instant::now() >= deadline {
                return live;
            }
            self.metadata_tick(self.now_ms());
            {
                let _admin = self.admin.lock();
                match self.metadata.sync() {
                    Ok(delta) => {
                        self.apply_delta(&delta);
                    }
                    Err(e) => tracing::warn!(error = %e, "metadata replay failed"),
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(
                crate::metadata_cluster::BROKERS_POLL_MS,
            ));
        }
    }

    /// Controlled shutdown: the controller moves leaderships away and fences this broker.
    pub fn controlled_shutdown(&self) {
        let _admin = self.admin.lock();
        if let Err(e) = self.metadata.shut_down(self.now_ms()) {
            tracing::warn!(error = %e, "controlled shutdown failed");
        }
    }

    /// Every partition of every topic.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.hosted().cloned())
            .collect()
    }

    /// Housekeeping on every log: roll, retention, `flush.ms`, recovery-point checkpoint, the
    /// periodic background flush (`background_flush_ms`, 0 = off), and the high-watermark
    /// checkpoint when its interval has passed.
    pub fn tick(&self, now_ms: i64, background_flush_ms: u64) {
        self.metadata_tick(now_ms.max(0) as u64);
        for p in self.all_partitions() {
            p.tick(now_ms, background_flush_ms);
        }
        self.maybe_checkpoint_high_watermarks(now_ms);
    }
}

//! The partition manager of a single broker: topics (with UUIDs, persisted) and the
//! partitions hosted here, and the named lifecycle operations that move a partition between
//! roles (`make_leader`, `make_follower`, `stop_partition`) — what a metadata delta will call.
//! Each partition's state (log, role, epoch, high watermark) is owned by its [`Partition`].

mod lifecycle;
pub use lifecycle::CLOSE_THREADS_MAX;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::protocol::StrBytes;
use parking_lot::{Mutex, RwLock};
use streamforge_log::{LogConfig, LogError};
use streamforge_tiered::TieringManager;
use uuid::Uuid;

use crate::partition::RemoteTier;
pub use crate::partition::{LEADER_EPOCH, Partition, PartitionError};
use crate::partition_create::{colliding_topic, create_all, remove_created};
use crate::topic_config;
use crate::topic_store::{TopicRecord, TopicStore};
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
        };
        error.code()
    }
}

impl From<LogError> for TopicError {
    fn from(e: LogError) -> Self {
        TopicError::Storage(e.to_string())
    }
}

impl From<std::io::Error> for TopicError {
    fn from(e: std::io::Error) -> Self {
        TopicError::Storage(e.to_string())
    }
}

/// A topic and its partitions (immutable snapshot; changes replace the `Arc<Topic>`).
pub struct Topic {
    pub name: String,
    pub name_bytes: StrBytes,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn is_internal(&self) -> bool {
        is_internal_topic(&self.name)
    }

    fn record(&self) -> TopicRecord {
        TopicRecord {
            name: self.name.clone(),
            id: self.id.simple().to_string(),
            partitions: self.partitions.len() as i32,
            configs: self.configs.clone(),
        }
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

/// Open partitions `0..count` of a topic at startup on up to one thread per CPU (Kafka's
/// `num.recovery.threads.per.data.dir`): logs are independent, and opening one is syscalls and,
/// after an unclean shutdown, CRC checks — restart time is what a crash costs clients. A log
/// that cannot be opened is an offline partition, not a failed start-up.
fn open_partitions(
    topic: &Arc<str>,
    count: i32,
    data_dir: &Path,
    config: &LogConfig,
    remote: &RemoteTier,
) -> Vec<Arc<Partition>> {
    let count = count.max(0) as usize;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count);
    if threads <= 1 {
        return (0..count)
            .map(|p| {
                Arc::new(Partition::open_or_offline(
                    topic,
                    p as i32,
                    data_dir,
                    config.clone(),
                    remote.clone(),
                ))
            })
            .collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let opened: Mutex<Vec<Option<Partition>>> = Mutex::new((0..count).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let p = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if p >= count {
                        break;
                    }
                    let result = Partition::open_or_offline(
                        topic,
                        p as i32,
                        data_dir,
                        config.clone(),
                        remote.clone(),
                    );
                    opened.lock()[p] = Some(result);
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
    store: TopicStore,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serializes topic create/delete/alter so the metadata file matches memory.
    admin: Mutex<()>,
    /// Bytes whose CRC the logs checked when they were opened (unclean-shutdown recovery).
    recovery_checked_bytes: u64,
    /// Most partitions over all topics (`partition_limit`); creations past it are refused.
    partitions_max: std::sync::atomic::AtomicUsize,
    /// Tiered storage, which partitions read below their local log start.
    tiering: Option<Arc<TieringManager>>,
}

impl ReplicaManager {
    /// Load the topic metadata and open every partition's log (recovering as needed).
    /// `tiering` serves reads below the local log start of tiered partitions.
    pub fn open(
        data_dir: &Path,
        log_defaults: LogConfig,
        tiering: Option<Arc<TieringManager>>,
    ) -> Result<ReplicaManager, TopicError> {
        std::fs::create_dir_all(data_dir)?;
        let store = TopicStore::new(data_dir);
        let mut topics = BTreeMap::new();
        let started = std::time::Instant::now();
        let mut recovery_checked_bytes = 0u64;
        let mut logs = 0usize;
        for rec in store.load()? {
            let id = Uuid::parse_str(&rec.id)
                .map_err(|e| TopicError::Storage(format!("topic {}: bad id: {e}", rec.name)))?;
            let config = topic_config::log_config(&log_defaults, &rec.configs);
            let name: Arc<str> = Arc::from(rec.name.as_str());
            let remote = RemoteTier {
                tiering: tiering.clone(),
                enabled: crate::tiered::remote_enabled(&rec.configs),
            };
            let partitions = open_partitions(&name, rec.partitions, data_dir, &config, &remote);
            let checked: u64 = partitions.iter().map(|p| p.recovery_checked_bytes()).sum();
            recovery_checked_bytes += checked;
            logs += partitions.len();
            tracing::info!(topic = %rec.name, partitions = rec.partitions, recovery_checked_bytes = checked, "loaded topic");
            topics.insert(
                rec.name.clone(),
                Arc::new(Topic {
                    name_bytes: StrBytes::from_string(rec.name.clone()),
                    name: rec.name,
                    id,
                    configs: rec.configs,
                    partitions,
                }),
            );
        }
        tracing::info!(
            logs,
            recovery_checked_bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded logs"
        );
        Ok(ReplicaManager {
            data_dir: data_dir.to_path_buf(),
            log_defaults: RwLock::new(Arc::new(log_defaults)),
            store,
            topics: RwLock::new(topics),
            admin: Mutex::new(()),
            recovery_checked_bytes,
            partitions_max: std::sync::atomic::AtomicUsize::new(usize::MAX),
            tiering,
        })
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
    fn check_partition_limit(&self, adding: i32) -> Result<(), TopicError> {
        let max = self
            .partitions_max
            .load(std::sync::atomic::Ordering::Relaxed);
        let hosted: usize = self
            .topics
            .read()
            .values()
            .map(|t| t.partitions.len())
            .sum();
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
            for p in &topic.partitions {
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

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let t = self.topic(topic)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| t.partitions.get(i).cloned())
    }

    fn save(&self, topics: &BTreeMap<String, Arc<Topic>>) -> Result<(), TopicError> {
        self.store
            .save(topics.values().map(|t| t.record()).collect())
            .map_err(TopicError::from)
    }

    /// Create a topic (or only validate the request when `validate_only`).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Option<Arc<Topic>>, TopicError> {
        validate_topic_name(name)?;
        if partitions <= 0 || partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(TopicError::InvalidPartitions(format!(
                "Number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {partitions}."
            )));
        }
        topic_config::validate_all(&configs).map_err(TopicError::InvalidConfig)?;
        let _admin = self.admin.lock();
        if self.topics.read().contains_key(name) {
            return Err(TopicError::AlreadyExists(name.to_string()));
        }
        if let Some(other) = colliding_topic(self.topics.read().keys(), name) {
            return Err(TopicError::InvalidName(format!(
                "Topic '{name}' collides with existing topic: {other}"
            )));
        }
        self.check_partition_limit(partitions)?;
        if validate_only {
            return Ok(None);
        }
        let log_config = topic_config::log_config(&self.log_defaults(), &configs);
        let name_arc: Arc<str> = Arc::from(name);
        let parts = create_all(
            &name_arc,
            0..partitions,
            &self.data_dir,
            &log_config,
            &self.remote_tier(&configs),
        )?;
        let topic = Arc::new(Topic {
            name: name.to_string(),
            name_bytes: StrBytes::from_string(name.to_string()),
            id: new_topic_id(),
            configs,
            partitions: parts,
        });
        let mut next = self.topics.read().clone();
        next.insert(name.to_string(), topic.clone());
        if let Err(e) = self.save(&next) {
            let dirs: Vec<PathBuf> = topic.partitions.iter().map(|p| p.dir.clone()).collect();
            remove_created(&topic.partitions, &dirs);
            return Err(e);
        }
        *self.topics.write() = next;
        tracing::info!(topic = name, partitions, id = %topic.id, "created topic");
        Ok(Some(topic))
    }

    /// Delete a topic and its data.
    pub fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError> {
        // Every entry point (DeleteTopics, the dashboard, the CLI through DeleteTopics) ends here.
        if is_internal_topic(name) {
            return Err(TopicError::InternalTopic(name.to_string()));
        }
        let _admin = self.admin.lock();
        let mut next = self.topics.read().clone();
        let topic = next.remove(name).ok_or(TopicError::UnknownTopic)?;
        self.save(&next)?;
        *self.topics.write() = next;
        for p in &topic.partitions {
            // Fetches waiting on it wake and see it is gone.
            if let Err(e) = p.stop(true) {
                tracing::warn!(dir = %p.dir.display(), error = %e, "could not remove deleted partition");
            }
        }
        tracing::info!(topic = name, id = %topic.id, "deleted topic");
        Ok(topic.id)
    }

    /// Grow a topic to `count` partitions.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let _admin = self.admin.lock();
        let topic = self.topic(name).ok_or(TopicError::UnknownTopic)?;
        let current = topic.partitions.len() as i32;
        if count < current {
            return Err(TopicError::InvalidPartitions(format!(
                "Topic currently has {current} partitions, which is higher than the requested {count}."
            )));
        }
        if count == current {
            return Err(TopicError::InvalidPartitions(format!(
                "Topic already has {current} partitions."
            )));
        }
        if count > PARTITIONS_PER_TOPIC_MAX {
            return Err(TopicError::InvalidPartitions(format!(
                "Number of partitions must be at most {PARTITIONS_PER_TOPIC_MAX}, got {count}."
            )));
        }
        self.check_partition_limit(count - current)?;
        if validate_only {
            return Ok(());
        }
        let log_config = topic_config::log_config(&self.log_defaults(), &topic.configs);
        let mut parts = topic.partitions.clone();
        let name_arc = topic.partitions[0].topic.clone();
        let added = create_all(
            &name_arc,
            current..count,
            &self.data_dir,
            &log_config,
            &self.remote_tier(&topic.configs),
        )?;
        parts.extend(added.iter().cloned());
        let replaced = self.replace(Topic {
            name: topic.name.clone(),
            name_bytes: topic.name_bytes.clone(),
            id: topic.id,
            configs: topic.configs.clone(),
            partitions: parts,
        });
        if let Err(e) = replaced {
            let dirs: Vec<PathBuf> = added.iter().map(|p| p.dir.clone()).collect();
            remove_created(&added, &dirs);
            return Err(e);
        }
        tracing::info!(
            topic = name,
            from = current,
            to = count,
            "created partitions"
        );
        Ok(())
    }

    /// Replace a topic's config overrides (validated) and apply them to its logs.
    pub fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        topic_config::validate_all(&configs).map_err(TopicError::InvalidConfig)?;
        let _admin = self.admin.lock();
        let topic = self.topic(name).ok_or(TopicError::UnknownTopic)?;
        if validate_only {
            return Ok(());
        }
        let log_config = topic_config::log_config(&self.log_defaults(), &configs);
        let remote_enabled = crate::tiered::remote_enabled(&configs);
        for p in &topic.partitions {
            p.update_config(log_config.clone(), remote_enabled);
        }
        self.replace(Topic {
            name: topic.name.clone(),
            name_bytes: topic.name_bytes.clone(),
            id: topic.id,
            configs,
            partitions: topic.partitions.clone(),
        })?;
        tracing::info!(topic = name, "altered topic configs");
        Ok(())
    }

    fn replace(&self, topic: Topic) -> Result<(), TopicError> {
        let mut next = self.topics.read().clone();
        next.insert(topic.name.clone(), Arc::new(topic));
        self.save(&next)?;
        *self.topics.write() = next;
        Ok(())
    }

    /// Every partition of every topic.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    /// Housekeeping on every log: roll, retention, `flush.ms`, recovery-point checkpoint, and
    /// the periodic background flush (`background_flush_ms`, 0 = off).
    pub fn tick(&self, now_ms: i64, background_flush_ms: u64) {
        for p in self.all_partitions() {
            p.tick(now_ms, background_flush_ms);
        }
    }

    /// How new partitions of a topic with `configs` reach remote storage.
    fn remote_tier(&self, configs: &BTreeMap<String, String>) -> RemoteTier {
        RemoteTier {
            tiering: self.tiering.clone(),
            enabled: crate::tiered::remote_enabled(configs),
        }
    }
}

/// A random (version 4) topic UUID.
pub fn new_topic_id() -> Uuid {
    loop {
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        // Kafka reserves the all-zero id and the metadata topic id (0...01).
        if id.as_u128() > 1 {
            return id;
        }
    }
}

//! The replica manager follows the metadata image: at start-up it opens the partitions the image
//! places here and gives each the role the image names; afterwards it applies each committed
//! delta's `local_changes` (become leader, become follower, stop and delete) and its config
//! changes. It owns no registry of its own: `topics` is the local view of the image.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use streamforge_metadata::records::ConfigResource;
use streamforge_metadata::{LocalPartition, MetadataDelta, MetadataImage, TopicImage};
use uuid::Uuid;

use super::roles::{RoleContext, take_role, take_roles};
use super::{ReplicaManager, Topic, TopicError, open_partitions};
use crate::partition::replica::ReplicaConfig;
use crate::partition::{OpenHighWatermark, RemoteTier};
use crate::partition_create::create_all;
use crate::topic_config;

/// A partition log that could not be created while applying a delta.
#[derive(Debug)]
pub(crate) struct CreateFailure {
    pub topic: String,
    pub error: TopicError,
}

/// The config overrides of `topic` in `image`.
pub(crate) fn topic_configs(image: &MetadataImage, topic: &str) -> BTreeMap<String, String> {
    image
        .configs()
        .get(&ConfigResource::Topic(topic.to_string()))
        .cloned()
        .unwrap_or_default()
}

impl ReplicaManager {
    /// Open every partition the image places on this broker (any subset of each topic's
    /// partitions), with its role. Every topic of the image gets an entry, hosted here or not,
    /// so requests for another broker's partition are told apart from unknown ones.
    pub(crate) fn open_from_image(&self, image: &MetadataImage) -> BTreeMap<String, Arc<Topic>> {
        let node = self.metadata.node_id();
        let mut topics = BTreeMap::new();
        let mut roles = Vec::new();
        let defaults = self.log_defaults();
        for t in image.topics() {
            let hosted: Vec<i32> = t
                .partitions
                .iter()
                .filter(|(_, s)| s.replicas.contains(&node))
                .map(|(&p, _)| p)
                .collect();
            let configs = topic_configs(image, &t.name);
            self.replication_quotas
                .apply_topic_configs(&t.name, Some(&configs));
            let config = topic_config::log_config(&defaults, &configs);
            let name: Arc<str> = Arc::from(t.name.as_str());
            let remote = self.remote_tier(&configs);
            let hw = |p: i32| match t.partitions.get(&p) {
                Some(state) => self.open_high_watermark(&t.name, p, state),
                None => OpenHighWatermark::LogEnd,
            };
            let partitions = open_partitions(&name, &hosted, &self.data_dir, &config, &remote, &hw);
            let replica_config = self.replica_config(&configs);
            roles.extend(
                partitions
                    .iter()
                    .zip(&hosted)
                    .map(|(p, i)| (p.clone(), t.partitions[i].clone(), replica_config)),
            );
            let checked: u64 = partitions.iter().map(|p| p.recovery_checked_bytes()).sum();
            let count = partition_count(t);
            tracing::info!(topic = %t.name, partitions = partitions.len(), of = count, recovery_checked_bytes = checked, "loaded topic");
            let topic = Topic::new(&t.name, t.id, configs, count, partitions);
            topics.insert(t.name.clone(), Arc::new(topic));
        }
        take_roles(&roles, node, &self.isr_sink, self.now_ms() as i64);
        topics
    }

    /// Apply what committed. Call with the admin lock held. Partitions whose log cannot be
    /// created are returned (the caller of a creation rolls it back).
    pub(crate) fn apply_delta(&self, delta: &MetadataDelta) -> Vec<CreateFailure> {
        if delta.is_empty() {
            return Vec::new();
        }
        let node = self.metadata.node_id();
        let image = self.metadata.image();
        let changes = delta.local_changes(node);
        let mut next = self.topics.read().clone();
        for (id, topic, index) in &changes.deletes {
            stop_hosting(&mut next, *id, topic, *index);
        }
        for (id, name) in &delta.topics_removed {
            if next.get(name).is_some_and(|t| t.id == *id) {
                next.remove(name);
            }
            tracing::info!(topic = %name, %id, "deleted topic");
        }
        self.follow_throttles(delta, &image);
        follow_partition_counts(&mut next, &image, delta);
        let mut new: BTreeMap<String, Vec<&LocalPartition>> = BTreeMap::new();
        for lp in changes.leaders.iter().chain(&changes.followers) {
            let topic = next.get(&lp.topic);
            match topic.and_then(|t| t.partition(lp.partition).map(|p| (t, p))) {
                Some((t, p)) => take_role(p, &lp.state, &self.role_context(&t.configs)),
                None => new.entry(lp.topic.clone()).or_default().push(lp),
            }
        }
        let mut failures = Vec::new();
        for (topic, mut added) in new {
            added.sort_by_key(|lp| lp.partition);
            if let Err(error) = self.create_local(&mut next, &added) {
                failures.push(CreateFailure { topic, error });
            }
        }
        for resource in &delta.configs_changed {
            if let ConfigResource::Topic(name) = resource
                && let Some(t) = next.get(name).cloned()
            {
                next.insert(name.clone(), Arc::new(self.with_configs(&t, &image)));
            }
        }
        *self.topics.write() = next;
        self.roles.send_modify(|version| *version += 1);
        failures
    }

    /// The reassignment throttles of every topic the delta created, removed or configured
    /// (Kafka's `TopicConfigHandler` marks and unmarks them on every topic config change).
    fn follow_throttles(&self, delta: &MetadataDelta, image: &MetadataImage) {
        let quotas = &self.replication_quotas;
        for name in delta.topics_removed.values() {
            quotas.apply_topic_configs(name, None);
        }
        let configured = delta.configs_changed.iter().filter_map(|r| match r {
            ConfigResource::Topic(name) => Some(name),
            _ => None,
        });
        for name in delta.topics_created.values().chain(configured) {
            let live = image.topic_by_name(name).is_some();
            let configs = live.then(|| topic_configs(image, name));
            quotas.apply_topic_configs(name, configs.as_ref());
        }
    }

    /// Create the logs of `added` (partitions of one topic newly placed here, by index, with
    /// gaps where other brokers host the rest), all or none, with the roles they name. The
    /// topic's entry exists already ([`follow_partition_counts`]).
    fn create_local(
        &self,
        topics: &mut BTreeMap<String, Arc<Topic>>,
        added: &[&LocalPartition],
    ) -> Result<(), TopicError> {
        let Some(first) = added.first() else {
            return Ok(());
        };
        let Some(topic) = topics.get(&first.topic).filter(|t| t.id == first.topic_id) else {
            return Err(TopicError::Storage(format!(
                "partitions of '{}' ({}) placed here but the topic is not in the image",
                first.topic, first.topic_id
            )));
        };
        let indexes: Vec<i32> = added.iter().map(|lp| lp.partition).collect();
        let config = topic_config::log_config(&self.log_defaults(), &topic.configs);
        let name: Arc<str> = topic
            .hosted()
            .next()
            .map_or_else(|| Arc::from(first.topic.as_str()), |p| p.topic.clone());
        let remote = self.remote_tier(&topic.configs);
        let created = create_all(&name, &indexes, &self.data_dir, &config, &remote)?;
        let cx = self.role_context(&topic.configs);
        for (p, lp) in created.iter().zip(added) {
            take_role(p, &lp.state, &cx);
        }
        let grown = topic
            .resized(topic.partition_count(), topic.configs.clone())
            .with_hosted(created);
        topics.insert(first.topic.clone(), Arc::new(grown));
        Ok(())
    }

    /// `t` with the image's configs, applied to its logs.
    fn with_configs(&self, t: &Topic, image: &MetadataImage) -> Topic {
        let configs = topic_configs(image, &t.name);
        let log_config = topic_config::log_config(&self.log_defaults(), &configs);
        let remote_enabled = crate::tiered::remote_enabled(&configs);
        for p in t.hosted() {
            p.update_config(log_config.clone(), remote_enabled);
        }
        tracing::info!(topic = %t.name, "applied topic configs");
        t.resized(t.partition_count(), configs)
    }

    /// The replica rules of a topic with `configs` (its `min.insync.replicas`, else the
    /// broker's `--min-insync-replicas`), with this broker's `replica.lag.time.max.ms`.
    pub(crate) fn replica_config(&self, configs: &BTreeMap<String, String>) -> ReplicaConfig {
        ReplicaConfig {
            replica_lag_time_max_ms: self.replica_lag_time_max_ms,
            min_insync_replicas: self.log_defaults().min_insync_replicas.max(1),
        }
        .with_topic_configs(configs)
    }

    fn role_context(&self, configs: &BTreeMap<String, String>) -> RoleContext<'_> {
        RoleContext {
            node: self.metadata.node_id(),
            sink: &self.isr_sink,
            config: self.replica_config(configs),
            now_ms: self.now_ms() as i64,
        }
    }

    /// How new partitions of a topic with `configs` reach remote storage.
    pub(crate) fn remote_tier(&self, configs: &BTreeMap<String, String>) -> RemoteTier {
        RemoteTier {
            tiering: self.tiering.clone(),
            enabled: crate::tiered::remote_enabled(configs),
        }
    }
}

/// Partitions of `t`: one past the highest index (the controller numbers them from 0).
fn partition_count(t: &TopicImage) -> i32 {
    t.partitions.keys().next_back().map_or(0, |&p| p + 1)
}

/// This node left the replicas of `name`-`index`: stop its log and delete it, that one only.
fn stop_hosting(topics: &mut BTreeMap<String, Arc<Topic>>, id: Uuid, name: &str, index: i32) {
    let Some(t) = topics.get(name).filter(|t| t.id == id) else {
        return;
    };
    let Some(p) = t.partition(index) else {
        return;
    };
    if let Err(e) = p.stop(true) {
        tracing::warn!(dir = %p.dir.display(), error = %e, "could not remove deleted partition");
    }
    tracing::info!(topic = name, partition = index, "stopped hosting partition");
    let without = t.without(index);
    topics.insert(name.to_string(), Arc::new(without));
}

/// Every topic the delta created or grew gets its entry with the image's partition count,
/// whether or not any of its partitions is placed here.
fn follow_partition_counts(
    topics: &mut BTreeMap<String, Arc<Topic>>,
    image: &MetadataImage,
    delta: &MetadataDelta,
) {
    let touched: BTreeSet<Uuid> = delta
        .topics_created
        .keys()
        .copied()
        .chain(delta.partitions.keys().map(|(id, _)| *id))
        .collect();
    for t in touched.iter().filter_map(|id| image.topic(*id)) {
        let count = partition_count(t);
        let next = match topics.get(&t.name) {
            Some(existing) if existing.id == t.id => {
                if existing.partition_count() >= count {
                    continue;
                }
                existing.resized(count, existing.configs.clone())
            }
            _ => Topic::new(&t.name, t.id, topic_configs(image, &t.name), count, []),
        };
        topics.insert(t.name.clone(), Arc::new(next));
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

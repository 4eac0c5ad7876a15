//! The replica manager follows the metadata image: at start-up it opens the partitions the image
//! places here and gives each the role the image names; afterwards it applies each committed
//! delta's `local_changes` (become leader, become follower, stop and delete) and its config
//! changes. It owns no registry of its own: `topics` is the local view of the image.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::protocol::StrBytes;
use streamforge_metadata::records::ConfigResource;
use streamforge_metadata::{LocalPartition, MetadataDelta, MetadataImage, PartitionState};

use super::{Partition, ReplicaManager, Topic, TopicError, open_partitions};
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
    /// Open every partition the image places on this broker, with its role.
    pub(crate) fn open_from_image(&self, image: &MetadataImage) -> BTreeMap<String, Arc<Topic>> {
        let node = self.metadata.node_id();
        let mut topics = BTreeMap::new();
        let mut roles = Vec::new();
        let defaults = self.log_defaults();
        for t in image.topics() {
            let hosted = t
                .partitions
                .iter()
                .take_while(|(_, s)| s.replicas.contains(&node))
                .count();
            let configs = topic_configs(image, &t.name);
            let config = topic_config::log_config(&defaults, &configs);
            let name: Arc<str> = Arc::from(t.name.as_str());
            let remote = self.remote_tier(&configs);
            let hw = |p: i32| match t.partitions.get(&p) {
                Some(state) => self.open_high_watermark(&t.name, p, state),
                None => OpenHighWatermark::LogEnd,
            };
            let partitions =
                open_partitions(&name, hosted as i32, &self.data_dir, &config, &remote, &hw);
            roles.extend(
                partitions
                    .iter()
                    .cloned()
                    .zip(t.partitions.values().cloned()),
            );
            let checked: u64 = partitions.iter().map(|p| p.recovery_checked_bytes()).sum();
            tracing::info!(topic = %t.name, partitions = partitions.len(), recovery_checked_bytes = checked, "loaded topic");
            topics.insert(
                t.name.clone(),
                Arc::new(Topic {
                    name_bytes: StrBytes::from_string(t.name.clone()),
                    name: t.name.clone(),
                    id: t.id,
                    configs,
                    partitions,
                }),
            );
        }
        take_roles(&roles, node);
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
        for (_, topic, index) in &changes.deletes {
            if let Some(p) = next
                .get(topic)
                .and_then(|t| t.partitions.get(*index as usize))
                && let Err(e) = p.stop(true)
            {
                tracing::warn!(dir = %p.dir.display(), error = %e, "could not remove deleted partition");
            }
        }
        for (id, name) in &delta.topics_removed {
            next.remove(name);
            tracing::info!(topic = %name, %id, "deleted topic");
        }
        let mut new: BTreeMap<String, Vec<&LocalPartition>> = BTreeMap::new();
        for lp in changes.leaders.iter().chain(&changes.followers) {
            match next
                .get(&lp.topic)
                .and_then(|t| t.partitions.get(lp.partition as usize))
            {
                Some(p) => take_role(p, &lp.state, node),
                None => new.entry(lp.topic.clone()).or_default().push(lp),
            }
        }
        let mut failures = Vec::new();
        for (topic, mut added) in new {
            added.sort_by_key(|lp| lp.partition);
            if let Err(error) = self.create_local(&mut next, &image, &added) {
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
        failures
    }

    /// Create the logs of `added` (new partitions of one topic, by index), all or none, with
    /// the roles they name.
    fn create_local(
        &self,
        topics: &mut BTreeMap<String, Arc<Topic>>,
        image: &MetadataImage,
        added: &[&LocalPartition],
    ) -> Result<(), TopicError> {
        let (Some(first), Some(last)) = (added.first(), added.last()) else {
            return Ok(());
        };
        let node = self.metadata.node_id();
        let existing = topics.get(&first.topic).cloned();
        let mut partitions = existing
            .as_ref()
            .map_or_else(Vec::new, |t| t.partitions.clone());
        let range = first.partition..last.partition + 1;
        if partitions.len() != first.partition as usize || range.len() != added.len() {
            // Partitions are hosted by index from 0; a gap means this broker hosts only part
            // of the topic, which needs the cluster's sparse partition map (not built yet).
            return Err(TopicError::Storage(format!(
                "partitions {range:?} of '{}' do not follow the {} hosted here",
                first.topic,
                partitions.len()
            )));
        }
        let configs = topic_configs(image, &first.topic);
        let config = topic_config::log_config(&self.log_defaults(), &configs);
        let name: Arc<str> = existing
            .as_ref()
            .and_then(|t| t.partitions.first().map(|p| p.topic.clone()))
            .unwrap_or_else(|| Arc::from(first.topic.as_str()));
        let remote = self.remote_tier(&configs);
        let created = create_all(&name, range, &self.data_dir, &config, &remote)?;
        for (p, lp) in created.iter().zip(added) {
            take_role(p, &lp.state, node);
        }
        partitions.extend(created);
        let topic = Topic {
            name: first.topic.clone(),
            name_bytes: StrBytes::from_string(first.topic.clone()),
            id: first.topic_id,
            configs,
            partitions,
        };
        topics.insert(first.topic.clone(), Arc::new(topic));
        Ok(())
    }

    /// `t` with the image's configs, applied to its logs.
    fn with_configs(&self, t: &Topic, image: &MetadataImage) -> Topic {
        let configs = topic_configs(image, &t.name);
        let log_config = topic_config::log_config(&self.log_defaults(), &configs);
        let remote_enabled = crate::tiered::remote_enabled(&configs);
        for p in &t.partitions {
            p.update_config(log_config.clone(), remote_enabled);
        }
        tracing::info!(topic = %t.name, "applied topic configs");
        Topic {
            name: t.name.clone(),
            name_bytes: t.name_bytes.clone(),
            id: t.id,
            configs,
            partitions: t.partitions.clone(),
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

/// Roles taken at once at start-up: a new leader epoch writes (and fsyncs) the partition's
/// leader-epoch checkpoint, an I/O wait, so one after another they made a restart with 450
/// partitions take 3.5 s instead of 0.2 s.
pub const ROLE_THREADS_MAX: usize = 16;

/// Every partition takes its role, on up to [`ROLE_THREADS_MAX`] threads.
fn take_roles(roles: &[(Arc<Partition>, PartitionState)], node: i32) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..roles.len().min(ROLE_THREADS_MAX) {
            scope.spawn(|| {
                while let Some((p, state)) =
                    roles.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    take_role(p, state, node);
                }
            });
        }
    });
}

/// Lead or follow as `state` says (an offline partition stays offline).
fn take_role(p: &Partition, state: &PartitionState, node: i32) {
    let result = if state.leader == node {
        p.make_leader(state.leader_epoch)
    } else {
        p.make_follower(state.leader_epoch, state.leader)
    };
    if let Err(e) = result
        && p.offline_reason().is_none()
    {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "role change refused");
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

//! What one or more applied records changed, and what that means for one broker.
//!
//! A broker that replays the metadata log hands each [`MetadataDelta`] to its replica manager,
//! which asks [`MetadataDelta::local_changes`] for its own node id: the partitions it must lead,
//! follow, or stop hosting (and delete), exactly KRaft's `LocalReplicaChanges`.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::image::PartitionState;
use crate::records::{BrokerId, ConfigResource};

/// A partition's state before and after the records of a delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDelta {
    pub topic: String,
    /// `None` when the partition was created by the delta.
    pub before: Option<PartitionState>,
    /// `None` when the partition was removed by the delta.
    pub after: Option<PartitionState>,
}

/// Changes accumulated over applied records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataDelta {
    pub brokers_changed: BTreeSet<BrokerId>,
    pub topics_created: BTreeMap<Uuid, String>,
    pub topics_removed: BTreeMap<Uuid, String>,
    pub partitions: BTreeMap<(Uuid, i32), PartitionDelta>,
    /// Resources with a config entry set or deleted (a broker applies its topics' new configs).
    pub configs_changed: BTreeSet<ConfigResource>,
}

/// A partition this broker hosts, with the state to take on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPartition {
    pub topic_id: Uuid,
    pub topic: String,
    pub partition: i32,
    pub state: PartitionState,
}

/// What one broker must do after a delta.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalChanges {
    /// Become (or stay, with a new ISR or epoch) leader.
    pub leaders: Vec<LocalPartition>,
    /// Become (or stay, with a new leader or epoch) follower.
    pub followers: Vec<LocalPartition>,
    /// Stop hosting and delete: the topic is gone or this broker left the assignment.
    pub deletes: Vec<(Uuid, String, i32)>,
}

impl MetadataDelta {
    pub fn is_empty(&self) -> bool {
        self.brokers_changed.is_empty()
            && self.topics_created.is_empty()
            && self.topics_removed.is_empty()
            && self.partitions.is_empty()
            && self.configs_changed.is_empty()
    }

    pub(crate) fn note_broker(&mut self, id: BrokerId) {
        self.brokers_changed.insert(id);
    }

    pub(crate) fn note_topic_created(&mut self, id: Uuid, name: &str) {
        self.topics_created.insert(id, name.to_string());
    }

    pub(crate) fn note_topic_removed(&mut self, id: Uuid, name: &str) {
        // A topic created and removed within one delta leaves no trace.
        if self.topics_created.remove(&id).is_none() {
            self.topics_removed.insert(id, name.to_string());
        }
    }

    /// Record a partition transition; the first `before` seen for a partition is kept.
    pub(crate) fn note_partition(
        &mut self,
        topic_id: Uuid,
        topic: &str,
        partition: i32,
        before: Option<PartitionState>,
        after: Option<PartitionState>,
    ) {
        let entry = self
            .partitions
            .entry((topic_id, partition))
            .or_insert(PartitionDelta {
                topic: topic.to_string(),
                before,
                after: None,
            });
        entry.after = after;
    }

    /// Fold a later delta into this one (earliest `before`, latest `after` per partition).
    pub fn merge(&mut self, later: MetadataDelta) {
        self.brokers_changed.extend(later.brokers_changed);
        self.configs_changed.extend(later.configs_changed);
        for (id, name) in later.topics_created {
            self.note_topic_created(id, &name);
        }
        for (id, name) in later.topics_removed {
            self.note_topic_removed(id, &name);
        }
        for ((topic_id, partition), d) in later.partitions {
            self.note_partition(topic_id, &d.topic, partition, d.before, d.after);
        }
    }

    /// The partitions `node` must lead, follow or delete.
    pub fn local_changes(&self, node: BrokerId) -> LocalChanges {
        let mut changes = LocalChanges::default();
        for (&(topic_id, partition), d) in &self.partitions {
            let was_replica = d
                .before
                .as_ref()
                .is_some_and(|s| s.replicas.contains(&node));
            match &d.after {
                Some(state) if state.replicas.contains(&node) => {
                    if d.before.as_ref() == Some(state) {
                        continue;
                    }
                    let local = LocalPartition {
                        topic_id,
                        topic: d.topic.clone(),
                        partition,
                        state: state.clone(),
                    };
                    if state.leader == node {
                        changes.leaders.push(local);
                    } else {
                        changes.followers.push(local);
                    }
                }
                _ if was_replica => changes.deletes.push((topic_id, d.topic.clone(), partition)),
                _ => {}
            }
        }
        changes
    }
}

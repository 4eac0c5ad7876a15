//! The metadata image: an immutable view of the cluster as of one metadata log offset.
//!
//! Applying a record never changes an image; it returns a new one (sharing every unchanged part
//! through `Arc`s, so a clone is a handful of reference-count bumps) plus a [`MetadataDelta`]
//! saying what changed. Application is deterministic and validates each record against the
//! image: a record that does not fit (an unknown topic id, a leader outside the ISR, a stale
//! broker epoch) is an [`ApplyError`] and leaves the image as it was. The controller only writes
//! records that apply, so on a replica of the log an error means a bug, not bad input.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::delta::MetadataDelta;
use crate::records::{
    BrokerId, ConfigRecord, ConfigResource, Endpoint, NO_LEADER, PartitionChange, PartitionElr,
    PartitionReassignment, PartitionRecord, ProducerIdsRecord, Record, RegisterBroker, TopicRecord,
};

/// Where a record sits in the metadata log: its offset and the quorum epoch (Raft term) that
/// wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LogPosition {
    pub offset: i64,
    pub epoch: i32,
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: BrokerId,
    pub epoch: i64,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// One partition's replication state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionState {
    /// The assignment; `replicas[0]` is the preferred leader.
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub leader: BrokerId,
    /// Bumped on every leader change; fences requests from older leaders.
    pub leader_epoch: i32,
    /// Bumped on every change; AlterPartition must name the current one.
    pub partition_epoch: i32,
    /// A reassignment in progress (KIP-455): replicas it adds (they leave `adding` when it
    /// completes) ...
    #[serde(default)]
    pub adding_replicas: Vec<BrokerId>,
    /// ... and replicas it removes when it completes. Both empty when none is in progress.
    #[serde(default)]
    pub removing_replicas: Vec<BrokerId>,
    /// KIP-966 eligible leader replicas: outside the ISR, yet holding every committed record
    /// (they left the ISR while it was below `min.insync.replicas`). Electable when the ISR
    /// is empty. Never overlaps the ISR.
    #[serde(default)]
    pub elr: Vec<BrokerId>,
    /// KIP-966 `LastKnownElr`: the last leader, kept when the ISR became empty; elected (an
    /// unclean election) only when the ISR and the ELR are both empty.
    #[serde(default)]
    pub last_known_elr: Vec<BrokerId>,
}

impl PartitionState {
    pub fn preferred_leader(&self) -> BrokerId {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas before the reassignment in progress: what cancelling it restores.
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        let adding = &self.adding_replicas;
        self.replicas
            .iter()
            .copied()
            .filter(|r| !adding.contains(r))
            .collect()
    }

    /// The replicas once the reassignment in progress completes.
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        let removing = &self.removing_replicas;
        self.replicas
            .iter()
            .copied()
            .filter(|r| !removing.contains(r))
            .collect()
    }
}

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionState>,
}

/// Why a record does not apply to an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("offset {offset} is not after the image's offset {image}")]
    OffsetNotAfter { offset: i64, image: i64 },
    #[error("unknown broker {0}")]
    UnknownBroker(BrokerId),
    #[error("broker {broker} epoch {epoch} is not its current one")]
    StaleBrokerEpoch { broker: BrokerId, epoch: i64 },
    #[error("topic name {0} already exists")]
    DuplicateTopicName(String),
    #[error("topic id {0} already exists")]
    DuplicateTopicId(Uuid),
    #[error("unknown topic id {0}")]
    UnknownTopicId(Uuid),
    #[error("unknown topic {0}")]
    UnknownTopicName(String),
    #[error("partition {1} of topic {0} already exists")]
    DuplicatePartition(Uuid, i32),
    #[error("unknown partition {1} of topic {0}")]
    UnknownPartition(Uuid, i32),
    #[error("invalid partition state: {0}")]
    InvalidPartition(&'static str),
    #[error("producer id block must move forward: {next} <= {current}")]
    ProducerIdsBackwards { next: i64, current: i64 },
}

/// The cluster as of [`MetadataImage::position`]. Cloning is cheap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataImage {
    position: LogPosition,
    brokers: Arc<BTreeMap<BrokerId, BrokerInfo>>,
    topics: Arc<BTreeMap<Uuid, Arc<TopicImage>>>,
    topic_ids: Arc<BTreeMap<String, Uuid>>,
    configs: Arc<BTreeMap<ConfigResource, BTreeMap<String, String>>>,
    producer_ids: Option<ProducerIdsRecord>,
}

impl MetadataImage {
    /// The image before any record: offset -1.
    pub fn empty() -> MetadataImage {
        MetadataImage {
            position: LogPosition {
                offset: -1,
                epoch: 0,
            },
            ..Default::default()
        }
    }

    pub fn position(&self) -> LogPosition {
        self.position
    }
    pub fn brokers(&self) -> &BTreeMap<BrokerId, BrokerInfo> {
        &self.brokers
    }
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerInfo> {
        self.brokers.get(&id)
    }
    /// Brokers that may lead and be placed on, in id order.
    pub fn unfenced_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers.values().filter(|b| !b.fenced)
    }
    pub fn is_unfenced(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }
    /// The highest broker epoch handed out so far (0 before any registration).
    pub fn broker_epoch_max(&self) -> i64 {
        self.brokers.values().map(|b| b.epoch).max().unwrap_or(0)
    }
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values().map(|t| t.as_ref())
    }
    pub fn topic(&self, id: Uuid) -> Option<&TopicImage> {
        self.topics.get(&id).map(|t| t.as_ref())
    }
    pub fn topic_by_name(&self, name: &str) -> Option<&TopicImage> {
        self.topic_ids.get(name).and_then(|id| self.topic(*id))
    }
    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<&PartitionState> {
        self.topic(topic_id)?.partitions.get(&partition)
    }
    pub fn configs(&self) -> &BTreeMap<ConfigResource, BTreeMap<String, String>> {
        &self.configs
    }
    /// One topic's config overrides.
    pub fn topic_config(&self, topic: &str, name: &str) -> Option<&str> {
        let entries = self
            .configs
            .get(&ConfigResource::Topic(topic.to_string()))?;
        entries.get(name).map(String::as_str)
    }
    /// The first producer id of the next block to hand out.
    pub fn next_producer_id(&self) -> i64 {
        self.producer_ids.as_ref().map_or(0, |p| p.next_producer_id)
    }
    pub(crate) fn producer_ids_record(&self) -> Option<&ProducerIdsRecord> {
        self.producer_ids.as_ref()
    }
    pub(crate) fn with_position(mut self, position: LogPosition) -> MetadataImage {
        self.position = position;
        self
    }

    /// Apply one record written at `at`, returning the new image and what changed.
    pub fn apply(
        &self,
        record: &Record,
        at: LogPosition,
    ) -> Result<(MetadataImage, MetadataDelta), ApplyError> {
        let mut delta = MetadataDelta::default();
        let image = self.apply_into(record, at, &mut delta)?;
        Ok((image, delta))
    }

    /// Apply records in order, accumulating one delta; stops at the first that does not apply.
    /// The records are applied in place to one copy, so a batch copies the shared maps it
    /// touches once, not once per record.
    pub fn apply_all<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a Record, LogPosition)>,
    ) -> Result<(MetadataImage, MetadataDelta), ApplyError> {
        let mut delta = MetadataDelta::default();
        let mut image = self.clone();
        for (record, at) in records {
            image.apply_mut(record, at, &mut delta)?;
        }
        Ok((image, delta))
    }

    /// Apply `record` onto a copy of this image, noting changes in `delta`.
    pub fn apply_into(
        &self,
        record: &Record,
        at: LogPosition,
        delta: &mut MetadataDelta,
    ) -> Result<MetadataImage, ApplyError> {
        let mut next = self.clone();
        next.apply_mut(record, at, delta)?;
        Ok(next)
    }

    /// Apply `record` to this image in place, noting changes in `delta`. All or nothing: a
    /// record that does not apply leaves the image and `delta` as they were (every rule is
    /// checked before anything changes). Replaying a log this way copies a map shared with an
    /// older image only the first time it changes.
    pub fn apply_mut(
        &mut self,
        record: &Record,
        at: LogPosition,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        if at.offset <= self.position.offset {
            return Err(ApplyError::OffsetNotAfter {
                offset: at.offset,
                image: self.position.offset,
            });
        }
        match record {
            Record::RegisterBroker(r) => self.register_broker(r, delta)?,
            Record::FenceBroker {
                broker_id,
                broker_epoch,
            } => self.set_fenced(*broker_id, *broker_epoch, true, delta)?,
            Record::UnfenceBroker {
                broker_id,
                broker_epoch,
            } => self.set_fenced(*broker_id, *broker_epoch, false, delta)?,
            Record::Topic(t) => self.add_topic(t, delta)?,
            Record::Partition(p) => self.add_partition(p, delta)?,
            Record::PartitionChange(c) => self.change_partition(c, delta)?,
            Record::Config(c) => {
                self.set_config(c)?;
                delta.configs_changed.insert(c.resource.clone());
            }
            Record::ProducerIds(p) => {
                let current = self.next_producer_id();
                if p.next_producer_id <= current {
                    return Err(ApplyError::ProducerIdsBackwards {
                        next: p.next_producer_id,
                        current,
                    });
                }
                self.producer_ids = Some(p.clone());
            }
            Record::RemoveTopic { topic_id } => self.remove_topic(*topic_id, delta)?,
            Record::PartitionReassignment(r) => self.set_reassignment(r, delta)?,
            Record::PartitionElr(e) => self.set_partition_elr(e, delta)?,
        }
        self.position = at;
        Ok(())
    }

    fn register_broker(
        &mut self,
        r: &RegisterBroker,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        if r.broker_id < 0 {
            return Err(ApplyError::UnknownBroker(r.broker_id));
        }
        if let Some(old) = self.brokers.get(&r.broker_id)
            && old.epoch >= r.broker_epoch
        {
            return Err(ApplyError::StaleBrokerEpoch {
                broker: r.broker_id,
                epoch: r.broker_epoch,
            });
        }
        let info = BrokerInfo {
            id: r.broker_id,
            epoch: r.broker_epoch,
            incarnation_id: r.incarnation_id,
            endpoints: r.endpoints.clone(),
            rack: r.rack.clone(),
            fenced: r.fenced,
        };
        Arc::make_mut(&mut self.brokers).insert(r.broker_id, info);
        delta.note_broker(r.broker_id);
        Ok(())
    }

    fn set_fenced(
        &mut self,
        id: BrokerId,
        epoch: i64,
        fenced: bool,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        let brokers = Arc::make_mut(&mut self.brokers);
        let broker = brokers.get_mut(&id).ok_or(ApplyError::UnknownBroker(id))?;
        if broker.epoch != epoch {
            return Err(ApplyError::StaleBrokerEpoch { broker: id, epoch });
        }
        broker.fenced = fenced;
        delta.note_broker(id);
        Ok(())
    }

    fn add_topic(&mut self, t: &TopicRecord, delta: &mut MetadataDelta) -> Result<(), ApplyError> {
        if self.topic_ids.contains_key(&t.name) {
            return Err(ApplyError::DuplicateTopicName(t.name.clone()));
        }
        if self.topics.contains_key(&t.topic_id) {
            return Err(ApplyError::DuplicateTopicId(t.topic_id));
        }
        let topic = TopicImage {
            name: t.name.clone(),
            id: t.topic_id,
            partitions: BTreeMap::new(),
        };
        Arc::make_mut(&mut self.topics).insert(t.topic_id, Arc::new(topic));
        Arc::make_mut(&mut self.topic_ids).insert(t.name.clone(), t.topic_id);
        delta.note_topic_created(t.topic_id, &t.name);
        Ok(())
    }

    fn topic_mut(&mut self, id: Uuid) -> Result<&mut TopicImage, ApplyError> {
        let topic = Arc::make_mut(&mut self.topics)
            .get_mut(&id)
            .ok_or(ApplyError::UnknownTopicId(id))?;
        Ok(Arc::make_mut(topic))
    }

    fn add_partition(
        &mut self,
        p: &PartitionRecord,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        let state = PartitionState {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        };
        validate_partition(&state)?;
        let topic = self.topic_mut(p.topic_id)?;
        if p.partition < 0 || topic.partitions.contains_key(&p.partition) {
            return Err(ApplyError::DuplicatePartition(p.topic_id, p.partition));
        }
        topic.partitions.insert(p.partition, state.clone());
        let name = topic.name.clone();
        delta.note_partition(p.topic_id, &name, p.partition, None, Some(state));
        Ok(())
    }

    fn change_partition(
        &mut self,
        c: &PartitionChange,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        let topic = self.topic_mut(c.topic_id)?;
        let name = topic.name.clone();
        let old = topic
            .partitions
            .get(&c.partition)
            .ok_or(ApplyError::UnknownPartition(c.topic_id, c.partition))?;
        let mut new = old.clone();
        // A new assignment ends the reassignment in progress; a PartitionReassignment record
        // right after this one (same batch) starts the next.
        let mut replica_left = false;
        if let Some(replicas) = &c.replicas {
            replica_left = old.replicas.iter().any(|r| !replicas.contains(r));
            new.replicas = replicas.clone();
            new.adding_replicas.clear();
            new.removing_replicas.clear();
        }
        if let Some(isr) = &c.isr {
            new.isr = isr.clone();
        }
        // The ELR never overlaps the ISR and stays inside the replicas, whatever writes the
        // change: a `PartitionElr` that follows in the batch sets the rest.
        let (isr, replicas) = (&new.isr, &new.replicas);
        new.elr.retain(|r| !isr.contains(r) && replicas.contains(r));
        new.last_known_elr.retain(|r| replicas.contains(r));
        let leader_changed = c.leader.is_some_and(|l| l != old.leader);
        if let Some(leader) = c.leader {
            new.leader = leader;
        }
        // A replica leaving the assignment bumps the leader epoch even when the leader stays
        // (Kafka's `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`): the removed
        // replica's fetches are fenced, and the leader starts over with the new replica set.
        if leader_changed || replica_left {
            new.leader_epoch = old.leader_epoch.saturating_add(1);
        }
        new.partition_epoch = old.partition_epoch.saturating_add(1);
        validate_partition(&new)?;
        let old = topic.partitions.insert(c.partition, new.clone());
        delta.note_partition(c.topic_id, &name, c.partition, old, Some(new));
        Ok(())
    }

    fn set_reassignment(
        &mut self,
        r: &PartitionReassignment,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        let topic = self.topic_mut(r.topic_id)?;
        let name = topic.name.clone();
        let old = topic
            .partitions
            .get(&r.partition)
            .ok_or(ApplyError::UnknownPartition(r.topic_id, r.partition))?;
        if old.adding_replicas == r.adding && old.removing_replicas == r.removing {
            return Ok(());
        }
        let mut new = old.clone();
        new.adding_replicas = r.adding.clone();
        new.removing_replicas = r.removing.clone();
        // No epoch of its own: the controller writes it right after the PartitionChange that
        // bumped them, and a snapshot right after the Partition record that carries them.
        validate_partition(&new)?;
        let old = topic.partitions.insert(r.partition, new.clone());
        delta.note_partition(r.topic_id, &name, r.partition, old, Some(new));
        Ok(())
    }

    /// KIP-966 state of one partition: ELR members must be replicas outside the ISR, the last
    /// known ELR replicas; neither list has duplicates. Epochs are unchanged (the
    /// `PartitionChange` before it in the batch bumped them).
    fn set_partition_elr(
        &mut self,
        e: &PartitionElr,
        delta: &mut MetadataDelta,
    ) -> Result<(), ApplyError> {
        let topic = self.topic_mut(e.topic_id)?;
        let name = topic.name.clone();
        let old = topic
            .partitions
            .get(&e.partition)
            .ok_or(ApplyError::UnknownPartition(e.topic_id, e.partition))?;
        let in_replicas = |ids: &[BrokerId]| ids.iter().all(|r| old.replicas.contains(r));
        if has_duplicates(&e.elr)
            || has_duplicates(&e.last_known_elr)
            || !in_replicas(&e.elr)
            || !in_replicas(&e.last_known_elr)
            || e.elr.iter().any(|r| old.isr.contains(r))
        {
            return Err(ApplyError::InvalidPartition(
                "ELR duplicated, outside the replicas or inside the ISR",
            ));
        }
        let mut new = old.clone();
        new.elr = e.elr.clone();
        new.last_known_elr = e.last_known_elr.clone();
        let old = topic.partitions.insert(e.partition, new.clone());
        delta.note_partition(e.topic_id, &name, e.partition, old, Some(new));
        Ok(())
    }

    fn set_config(&mut self, c: &ConfigRecord) -> Result<(), ApplyError> {
        if let ConfigResource::Topic(name) = &c.resource
            && !self.topic_ids.contains_key(name)
        {
            return Err(ApplyError::UnknownTopicName(name.clone()));
        }
        let configs = Arc::make_mut(&mut self.configs);
        match &c.value {
            Some(value) => {
                let entries = configs.entry(c.resource.clone()).or_default();
                entries.insert(c.name.clone(), value.clone());
            }
            None => {
                if let Some(entries) = configs.get_mut(&c.resource) {
                    entries.remove(&c.name);
                    if entries.is_empty() {
                        configs.remove(&c.resource);
                    }
                }
            }
        }
        Ok(())
    }

    fn remove_topic(&mut self, id: Uuid, delta: &mut MetadataDelta) -> Result<(), ApplyError> {
        let topic = Arc::make_mut(&mut self.topics)
            .remove(&id)
            .ok_or(ApplyError::UnknownTopicId(id))?;
        Arc::make_mut(&mut self.topic_ids).remove(&topic.name);
        Arc::make_mut(&mut self.configs).remove(&ConfigResource::Topic(topic.name.clone()));
        for (partition, state) in &topic.partitions {
            delta.note_partition(id, &topic.name, *partition, Some(state.clone()), None);
        }
        delta.note_topic_removed(id, &topic.name);
        Ok(())
    }
}

fn has_duplicates(ids: &[BrokerId]) -> bool {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0] == w[1])
}

/// The rules every partition state obeys: a non-empty assignment without duplicates, an ISR
/// inside it, a leader (when there is one) inside the ISR, non-negative epochs, and a
/// reassignment's adding and removing replicas disjoint, inside the assignment, and leaving
/// at least one replica.
fn validate_partition(p: &PartitionState) -> Result<(), ApplyError> {
    if p.replicas.is_empty() || has_duplicates(&p.replicas) || p.replicas.iter().any(|&r| r < 0) {
        return Err(ApplyError::InvalidPartition(
            "replicas empty, duplicated or negative",
        ));
    }
    if has_duplicates(&p.isr) || p.isr.iter().any(|id| !p.replicas.contains(id)) {
        return Err(ApplyError::InvalidPartition(
            "ISR duplicated or outside the replicas",
        ));
    }
    if p.leader != NO_LEADER && !p.isr.contains(&p.leader) {
        return Err(ApplyError::InvalidPartition("leader outside the ISR"));
    }
    if p.leader_epoch < 0 || p.partition_epoch < 0 {
        return Err(ApplyError::InvalidPartition("negative epoch"));
    }
    let (adding, removing) = (&p.adding_replicas, &p.removing_replicas);
    let outside = |ids: &[BrokerId]| ids.iter().any(|id| !p.replicas.contains(id));
    if has_duplicates(adding) || has_duplicates(removing) || outside(adding) || outside(removing) {
        return Err(ApplyError::InvalidPartition(
            "reassignment lists duplicated or outside the replicas",
        ));
    }
    if adding.iter().any(|id| removing.contains(id)) || removing.len() >= p.replicas.len() {
        return Err(ApplyError::InvalidPartition(
            "a reassignment adds a replica it removes, or removes every replica",
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;

//! Topic administration: CreateTopics (validation, placement or explicit assignment),
//! CreatePartitions, DeleteTopics and AlterConfigs.
//!
//! Config names and values are validated by the broker's handler (it owns the table of topic
//! configs and their types) before it forwards the request; the controller records them.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::placement::{Load, place_replicas};
use super::{AlterConfig, Controller, CreatePartitions, CreateTopic, CreatedTopic, Effects};
use super::{Reply, TopicRef};
use crate::records::{
    BrokerId, ConfigRecord, ConfigResource, NO_LEADER, PartitionRecord, Record, TopicRecord,
};

/// Kafka's longest legal topic name.
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;
/// Bound on partitions per topic one request may create.
pub const PARTITIONS_PER_REQUEST_MAX: i32 = 100_000;

/// Kafka's `Topic.validate`: 1..=249 of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= TOPIC_NAME_LENGTH_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl Controller {
    /// Replicas and preferred leaderships each broker carries now.
    fn current_load(&self) -> BTreeMap<BrokerId, Load> {
        let mut load: BTreeMap<BrokerId, Load> = BTreeMap::new();
        for p in self.image.topics().flat_map(|t| t.partitions.values()) {
            for (i, &r) in p.replicas.iter().enumerate() {
                let l = load.entry(r).or_default();
                l.replicas += 1;
                l.leaders += usize::from(i == 0);
            }
        }
        load
    }

    fn placeable_brokers(&self) -> Vec<(BrokerId, Option<String>)> {
        self.image
            .unfenced_brokers()
            .map(|b| (b.id, b.rack.clone()))
            .collect()
    }

    /// Check an explicit assignment: partitions 0..n, equal non-empty lists without
    /// duplicates, registered brokers, and at least one unfenced replica each.
    fn check_assignment<'a>(
        &self,
        lists: impl IntoIterator<Item = &'a Vec<BrokerId>>,
    ) -> Result<(), ResponseError> {
        let mut width = None;
        for list in lists {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let unfenced = list.iter().any(|&r| self.image.is_unfenced(r));
            if list.is_empty()
                || sorted.len() != list.len()
                || *width.get_or_insert(list.len()) != list.len()
                || list.iter().any(|&r| self.image.broker(r).is_none())
                || !unfenced
            {
                return Err(ResponseError::InvalidReplicaAssignment);
            }
        }
        Ok(())
    }

    /// A new partition: the unfenced replicas form the ISR, its first member leads.
    fn new_partition(&self, topic_id: Uuid, partition: i32, replicas: Vec<BrokerId>) -> Record {
        let isr: Vec<BrokerId> = replicas
            .iter()
            .copied()
            .filter(|&r| self.image.is_unfenced(r))
            .collect();
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        Record::Partition(PartitionRecord {
            topic_id,
            partition,
            replicas,
            isr,
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
        })
    }

    /// The replica lists a CreateTopics entry asks for, or the error Kafka answers.
    fn plan_topic(&self, t: &CreateTopic) -> Result<Vec<Vec<BrokerId>>, ResponseError> {
        if !valid_topic_name(&t.name) {
            return Err(ResponseError::InvalidTopicException);
        }
        if self.image.topic_by_name(&t.name).is_some() {
            return Err(ResponseError::TopicAlreadyExists);
        }
        if !t.assignment.is_empty() {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                return Err(ResponseError::InvalidRequest);
            }
            let consecutive = t
                .assignment
                .keys()
                .copied()
                .eq(0..t.assignment.len() as i32);
            if !consecutive {
                return Err(ResponseError::InvalidReplicaAssignment);
            }
            self.check_assignment(t.assignment.values())?;
            return Ok(t.assignment.values().cloned().collect());
        }
        let partitions = match t.num_partitions {
            -1 => self.config.default_num_partitions,
            n => n,
        };
        if !(1..=PARTITIONS_PER_REQUEST_MAX).contains(&partitions) {
            return Err(ResponseError::InvalidPartitions);
        }
        let rf = match t.replication_factor {
            -1 => self.config.default_replication_factor,
            n => n,
        };
        if rf < 1 {
            return Err(ResponseError::InvalidReplicationFactor);
        }
        place_replicas(
            &self.placeable_brokers(),
            &mut self.current_load(),
            partitions as usize,
            rf as usize,
        )
        .map_err(|_| ResponseError::InvalidReplicationFactor)
    }

    /// CreateTopics: per topic, the new id or Kafka's error; `validate_only` writes nothing.
    pub(super) fn create_topics(
        &mut self,
        topics: Vec<CreateTopic>,
        validate_only: bool,
        fx: &mut Effects,
    ) -> Reply {
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            let result = self.plan_topic(&t).map(|lists| {
                let created = CreatedTopic {
                    topic_id: self.new_topic_id(),
                    num_partitions: lists.len() as i32,
                    replication_factor: lists.first().map_or(0, |l| l.len() as i16),
                };
                if !validate_only {
                    self.write_topic(&t, created.topic_id, lists, fx);
                }
                created
            });
            results.push((t.name, result));
        }
        Reply::CreateTopics(results)
    }

    fn write_topic(
        &mut self,
        t: &CreateTopic,
        topic_id: Uuid,
        lists: Vec<Vec<BrokerId>>,
        fx: &mut Effects,
    ) {
        self.emit(
            Record::Topic(TopicRecord {
                name: t.name.clone(),
                topic_id,
            }),
            fx,
        );
        for (partition, replicas) in lists.into_iter().enumerate() {
            let record = self.new_partition(topic_id, partition as i32, replicas);
            self.emit(record, fx);
        }
        for (name, value) in &t.configs {
            let resource = ConfigResource::Topic(t.name.clone());
            let record = ConfigRecord {
                resource,
                name: name.clone(),
                value: Some(value.clone()),
            };
            self.emit(Record::Config(record), fx);
        }
    }

    /// A random (version 4) topic id, never nil and never one in use.
    fn new_topic_id(&mut self) -> Uuid {
        loop {
            let id = uuid::Builder::from_random_bytes(rand::Rng::random(&mut self.rng)).into_uuid();
            if !id.is_nil() && self.image.topic(id).is_none() {
                return id;
            }
        }
    }

    /// CreatePartitions: grow a topic to `count`, placing the new partitions with the topic's
    /// replication factor (or the given assignment).
    pub(super) fn create_partitions(
        &mut self,
        requests: Vec<CreatePartitions>,
        fx: &mut Effects,
    ) -> Reply {
        let mut results = Vec::with_capacity(requests.len());
        for c in requests {
            let result = self.plan_partitions(&c).map(|(topic_id, first, lists)| {
                for (i, replicas) in lists.into_iter().enumerate() {
                    let record = self.new_partition(topic_id, first + i as i32, replicas);
                    self.emit(record, fx);
                }
            });
            results.push((c.topic, result));
        }
        Reply::CreatePartitions(results)
    }

    fn plan_partitions(
        &self,
        c: &CreatePartitions,
    ) -> Result<(Uuid, i32, Vec<Vec<BrokerId>>), ResponseError> {
        let topic = self
            .image
            .topic_by_name(&c.topic)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let current = topic.partitions.len() as i32;
        if c.count <= current || c.count - current > PARTITIONS_PER_REQUEST_MAX {
            return Err(ResponseError::InvalidPartitions);
        }
        let new = (c.count - current) as usize;
        if let Some(lists) = &c.assignment {
            if lists.len() != new {
                return Err(ResponseError::InvalidReplicaAssignment);
            }
            self.check_assignment(lists)?;
            return Ok((topic.id, current, lists.clone()));
        }
        let rf = topic
            .partitions
            .values()
            .next()
            .map_or(1, |p| p.replicas.len());
        let lists = place_replicas(&self.placeable_brokers(), &mut self.current_load(), new, rf)
            .map_err(|_| ResponseError::InvalidReplicationFactor)?;
        Ok((topic.id, current, lists))
    }

    /// DeleteTopics by name or id.
    pub(super) fn delete_topics(&mut self, topics: Vec<TopicRef>, fx: &mut Effects) -> Reply {
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            let found = match &t {
                TopicRef::Name(name) => self
                    .image
                    .topic_by_name(name)
                    .map(|t| t.id)
                    .ok_or(ResponseError::UnknownTopicOrPartition),
                TopicRef::Id(id) => self
                    .image
                    .topic(*id)
                    .map(|t| t.id)
                    .ok_or(ResponseError::UnknownTopicId),
            };
            if let Ok(topic_id) = found {
                self.emit(Record::RemoveTopic { topic_id }, fx);
            }
            results.push((t, found));
        }
        Reply::DeleteTopics(results)
    }

    /// IncrementalAlterConfigs: set or delete entries of existing topics or brokers.
    pub(super) fn alter_configs(&mut self, changes: Vec<AlterConfig>, fx: &mut Effects) -> Reply {
        let mut results = Vec::with_capacity(changes.len());
        for c in changes {
            let exists = match &c.resource {
                ConfigResource::Topic(name) => self.image.topic_by_name(name).is_some(),
                // Broker configs may be set for a broker before it registers (and for the
                // cluster default, id -1 in this model's callers).
                ConfigResource::Broker(_) => true,
            };
            let result = if exists {
                for (name, value) in &c.entries {
                    let record = ConfigRecord {
                        resource: c.resource.clone(),
                        name: name.clone(),
                        value: value.clone(),
                    };
                    self.emit(Record::Config(record), fx);
                }
                Ok(())
            } else {
                Err(ResponseError::UnknownTopicOrPartition)
            };
            results.push((c.resource, result));
        }
        Reply::AlterConfigs(results)
    }
}

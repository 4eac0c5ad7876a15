//! Topic administration on the metadata image: CreateTopics, CreatePartitions, DeleteTopics and
//! topic configs are checked here (names, counts, configs, the partition limit, with Kafka's
//! messages), sent to the controller, and answered once what it wrote has committed and been
//! applied to the partitions hosted here.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use streamforge_metadata::controller::{
    AlterConfig, CreatePartitions, CreateTopic, ElectionType, Event, Reply, TopicRef,
};
use streamforge_metadata::records::ConfigResource;
use uuid::Uuid;

use super::{
    PARTITIONS_PER_TOPIC_MAX, ReplicaManager, Topic, TopicError, is_internal_topic,
    validate_topic_name,
};
use crate::partition_create::colliding_topic;
use crate::topic_config;

/// ElectLeaders' answer: per partition, its new leader or why not.
pub type ElectionResults = Vec<((String, i32), Result<i32, ResponseError>)>;

/// A controller error for topic `name` as a [`TopicError`] (Kafka's messages where we have them).
fn controller_error(name: &str, e: ResponseError) -> TopicError {
    match e {
        ResponseError::TopicAlreadyExists => TopicError::AlreadyExists(name.to_string()),
        ResponseError::UnknownTopicOrPartition => TopicError::UnknownTopic,
        ResponseError::InvalidReplicationFactor => TopicError::Controller(
            e,
            "Replication factor must be larger than 0 and at most the number of live brokers."
                .into(),
        ),
        other => TopicError::Controller(other, format!("{other:?}")),
    }
}

impl ReplicaManager {
    /// Create a topic (or only validate the request when `validate_only`) with the default
    /// replication factor.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Option<Arc<Topic>>, TopicError> {
        // The broker's own topics (`__consumer_offsets`) are created at start-up, before other
        // brokers may have joined: the default factor, capped by the live brokers (there is no
        // `offsets.topic.replication.factor` setting yet).
        let replication_factor = if is_internal_topic(name) {
            // In a cluster every voter hosts the internal topics (their coordinators read them
            // locally). `__consumer_offsets` is created at start-up: wait, bounded, for the
            // voters that have not started yet; later ones take the brokers that are live.
            let live = match self.metadata.voter_count() {
                Some(voters) if name == "__consumer_offsets" => self.wait_for_live_brokers(voters),
                _ => self.image().unfenced_brokers().count(),
            }
            .max(1);
            let default = match self.metadata.voter_count() {
                Some(voters) => i16::try_from(voters).unwrap_or(i16::MAX),
                None => self.metadata.default_replication_factor().max(1),
            };
            default.min(i16::try_from(live).unwrap_or(i16::MAX))
        } else {
            -1
        };
        let spec = CreateTopic {
            name: name.to_string(),
            num_partitions: partitions,
            replication_factor,
            assignment: BTreeMap::new(),
            configs,
        };
        self.create_topic_spec(spec, validate_only)
    }

    /// Create a topic as CreateTopics asks (replication factor, explicit assignment). The
    /// controller places it; the reply waits for the commit and for the logs hosted here. A log
    /// that cannot be created undoes the creation (the topic is deleted again), as creation is
    /// all or nothing.
    pub fn create_topic_spec(
        &self,
        spec: CreateTopic,
        validate_only: bool,
    ) -> Result<Option<Arc<Topic>>, TopicError> {
        let name = spec.name.clone();
        let partitions = match spec.num_partitions {
            -1 if !spec.assignment.is_empty() => spec.assignment.len() as i32,
            n => n,
        };
        validate_topic_name(&name)?;
        if partitions <= 0 || partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(TopicError::InvalidPartitions(format!(
                "Number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {partitions}."
            )));
        }
        topic_config::validate_all(&spec.configs).map_err(TopicError::InvalidConfig)?;
        let _admin = self.admin.lock();
        if self.topics.read().contains_key(&name) {
            return Err(TopicError::AlreadyExists(name));
        }
        if let Some(other) = colliding_topic(self.topics.read().keys(), &name) {
            return Err(TopicError::InvalidName(format!(
                "Topic '{name}' collides with existing topic: {other}"
            )));
        }
        self.check_partition_limit(partitions)?;
        let event = Event::CreateTopics {
            topics: vec![spec],
            validate_only,
        };
        let (reply, failures) = self.request(event)?;
        let created = match reply {
            Reply::CreateTopics(mut r) if r.len() == 1 => r.remove(0).1,
            _ => Err(ResponseError::NotController),
        };
        let created = created.map_err(|e| controller_error(&name, e))?;
        if validate_only {
            return Ok(None);
        }
        if let Some(failure) = failures.into_iter().find(|f| f.topic == name) {
            self.undo_creation(created.topic_id);
            return Err(failure.error);
        }
        tracing::info!(topic = %name, partitions, id = %created.topic_id, "created topic");
        Ok(self.topic(&name))
    }

    /// Delete a topic whose logs could not be created here (`create_all` removed what it made).
    fn undo_creation(&self, id: Uuid) {
        if let Err(e) = self.request(Event::DeleteTopics(vec![TopicRef::Id(id)])) {
            tracing::error!(error = %e, %id, "could not undo a failed topic creation");
        }
    }

    /// Delete a topic and its data.
    pub fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError> {
        // Every entry point (DeleteTopics, the dashboard, the CLI through DeleteTopics) ends here.
        if is_internal_topic(name) {
            return Err(TopicError::InternalTopic(name.to_string()));
        }
        let _admin = self.admin.lock();
        let (reply, _) = self.request(Event::DeleteTopics(vec![TopicRef::Name(name.into())]))?;
        match reply {
            Reply::DeleteTopics(mut r) if r.len() == 1 => {
                r.remove(0).1.map_err(|e| controller_error(name, e))
            }
            _ => Err(controller_error(name, ResponseError::NotController)),
        }
    }

    /// Grow a topic to `count` partitions (`assignment`: replica lists of the new ones).
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        self.create_partitions_assigned(name, count, None, validate_only)
    }

    pub fn create_partitions_assigned(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let _admin = self.admin.lock();
        let topic = self.topic(name).ok_or(TopicError::UnknownTopic)?;
        let current = topic.partition_count();
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
        let event = Event::CreatePartitions(vec![CreatePartitions {
            topic: name.to_string(),
            count,
            assignment,
        }]);
        let (reply, failures) = self.request(event)?;
        match reply {
            Reply::CreatePartitions(mut r) if r.len() == 1 => {
                r.remove(0).1.map_err(|e| controller_error(name, e))?
            }
            _ => return Err(controller_error(name, ResponseError::NotController)),
        }
        if let Some(f) = failures.into_iter().next() {
            // Committed: the partitions exist and are offline here until repaired.
            return Err(f.error);
        }
        tracing::info!(
            topic = name,
            from = current,
            to = count,
            "created partitions"
        );
        Ok(())
    }

    /// Replace a topic's config overrides (validated): the controller records the difference,
    /// and every broker applies it to its logs.
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
        let mut entries: Vec<(String, Option<String>)> = configs
            .iter()
            .filter(|(k, v)| topic.configs.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        let removed = topic.configs.keys().filter(|k| !configs.contains_key(*k));
        entries.extend(removed.map(|k| (k.clone(), None)));
        if entries.is_empty() {
            return Ok(());
        }
        let resource = ConfigResource::Topic(name.to_string());
        let event = Event::AlterConfigs(vec![AlterConfig { resource, entries }]);
        match self.request(event)?.0 {
            Reply::AlterConfigs(mut r) if r.len() == 1 => {
                r.remove(0).1.map_err(|e| controller_error(name, e))?
            }
            _ => return Err(controller_error(name, ResponseError::NotController)),
        }
        tracing::info!(topic = name, "altered topic configs");
        Ok(())
    }

    /// ElectLeaders (`partitions: None` = all): the controller's answer per partition, once
    /// what it wrote has committed and been applied to the partitions hosted here.
    pub fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<ElectionResults, TopicError> {
        let _admin = self.admin.lock();
        let event = Event::ElectLeaders {
            election,
            partitions,
        };
        match self.request(event)?.0 {
            Reply::ElectLeaders(results) => Ok(results),
            _ => Err(controller_error("", ResponseError::NotController)),
        }
    }
}

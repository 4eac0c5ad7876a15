//! A topic as this broker sees it: every partition the metadata image gives it, and the logs of
//! those whose replicas include this node.
//!
//! The hosted logs sit in a vector with one slot per partition of the topic (`None` where
//! another broker holds it), not in a map: Produce and Fetch look a partition up on every
//! request, and a slot is one bounds check and one null check, the cost of the dense vector
//! this replaced. An empty slot costs 8 bytes (`Option<Arc<_>>` is pointer-sized), so
//! [`PARTITIONS_PER_TOPIC_MAX`](super::PARTITIONS_PER_TOPIC_MAX) partitions cost at most 80 kB
//! per topic. Measured (release, random partitions, with the `Arc` clone): slots 12–13 ns per
//! look-up at 50–10,000 partitions, the dense vector 12–13 ns, a `BTreeMap<i32, _>` 28–65 ns;
//! the whole `lookup_partition` path (lock, topic by name, slot) about 31 ns.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::Partition;

/// Why a partition could not be served here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No such topic, or the topic has fewer partitions.
    #[error("This server does not host this topic-partition.")]
    Unknown,
    /// The partition exists but this broker is not one of its replicas: Kafka answers
    /// NOT_LEADER_OR_FOLLOWER, and the client refreshes its metadata and goes to the leader.
    #[error("This server is not a replica of this partition.")]
    NotHosted,
}

impl LookupError {
    pub fn response_error(self) -> ResponseError {
        match self {
            LookupError::Unknown => ResponseError::UnknownTopicOrPartition,
            LookupError::NotHosted => ResponseError::NotLeaderOrFollower,
        }
    }

    pub fn kafka_code(self) -> i16 {
        self.response_error().code()
    }
}

/// A topic and its partitions hosted here (immutable snapshot; changes replace the `Arc<Topic>`).
pub struct Topic {
    pub name: String,
    pub name_bytes: StrBytes,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    /// One slot per partition of the topic in the image, by index; `Some` where hosted here.
    slots: Vec<Option<Arc<Partition>>>,
}

impl Topic {
    /// `name` with `partition_count` partitions, of which `hosted` live here.
    pub(crate) fn new(
        name: &str,
        id: Uuid,
        configs: BTreeMap<String, String>,
        partition_count: i32,
        hosted: impl IntoIterator<Item = Arc<Partition>>,
    ) -> Topic {
        let topic = Topic {
            name: name.to_string(),
            name_bytes: StrBytes::from_string(name.to_string()),
            id,
            configs,
            slots: vec![None; partition_count.max(0) as usize],
        };
        topic.with_hosted(hosted)
    }

    /// This topic with `added` hosted too (each in the slot of its index).
    pub(crate) fn with_hosted(mut self, added: impl IntoIterator<Item = Arc<Partition>>) -> Topic {
        let count = self.slots.len();
        for p in added {
            let index = usize::try_from(p.index).unwrap_or(usize::MAX);
            let Some(slot) = self.slots.get_mut(index) else {
                panic!(
                    "partition {} of '{}' is outside its {count} partitions",
                    p.index, self.name
                );
            };
            assert!(
                slot.is_none(),
                "partition {} of '{}' hosted twice",
                p.index,
                self.name
            );
            *slot = Some(p);
        }
        self
    }

    /// A copy with `partition_count` partitions (a topic only grows) and `configs`.
    pub(crate) fn resized(&self, partition_count: i32, configs: BTreeMap<String, String>) -> Topic {
        let mut slots = self.slots.clone();
        let count = partition_count.max(0) as usize;
        assert!(count >= slots.len(), "'{}' cannot shrink", self.name);
        slots.resize(count, None);
        Topic {
            name: self.name.clone(),
            name_bytes: self.name_bytes.clone(),
            id: self.id,
            configs,
            slots,
        }
    }

    /// A copy without partition `index` hosted here (this node left its replicas).
    pub(crate) fn without(&self, index: i32) -> Topic {
        let mut topic = self.resized(self.partition_count(), self.configs.clone());
        if let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| topic.slots.get_mut(i))
        {
            *slot = None;
        }
        topic
    }

    pub fn is_internal(&self) -> bool {
        super::is_internal_topic(&self.name)
    }

    /// Partitions of the topic in the metadata image, hosted here or not.
    pub fn partition_count(&self) -> i32 {
        self.slots.len() as i32
    }

    /// The log of partition `index` when it is hosted here.
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(Option::as_ref)
    }

    /// Partition `index`, or why it cannot be served here.
    pub fn lookup(&self, index: i32) -> Result<&Arc<Partition>, LookupError> {
        match usize::try_from(index).ok().and_then(|i| self.slots.get(i)) {
            Some(Some(p)) => Ok(p),
            Some(None) => Err(LookupError::NotHosted),
            None => Err(LookupError::Unknown),
        }
    }

    /// The partitions hosted here, by index.
    pub fn hosted(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.slots.iter().flatten()
    }

    pub fn hosted_count(&self) -> usize {
        self.hosted().count()
    }

    /// One slot per partition, `None` where not hosted here (services indexing by partition).
    pub fn slots(&self) -> &[Option<Arc<Partition>>] {
        &self.slots
    }
}

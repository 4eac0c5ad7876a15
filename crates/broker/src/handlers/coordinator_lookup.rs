//! Where FindCoordinator sends a client: the broker that leads the key's partition of the
//! internal topic (`__consumer_offsets` for groups, `__transaction_state` for transactional
//! ids), as the metadata image says, answered with that broker's endpoint on the listener the
//! request came in on. Kafka: `partitionFor(key) = abs(key.hashCode) % partitions`, then the
//! partition's leader; COORDINATOR_NOT_AVAILABLE while it has none.

use kafka_protocol::ResponseError;
use streamforge_metadata::MetadataImage;

/// A coordinator's address, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CoordinatorNode {
    /// This broker (also when the internal topic does not exist yet: this broker's
    /// coordinator creates it on first use).
    Here,
    Other {
        id: i32,
        host: String,
        port: i32,
    },
    NotAvailable,
}

impl CoordinatorNode {
    /// The error code FindCoordinator answers with (0 when there is a coordinator).
    pub(crate) fn error_code(&self) -> i16 {
        match self {
            CoordinatorNode::NotAvailable => ResponseError::CoordinatorNotAvailable.code(),
            _ => 0,
        }
    }
}

/// The leader of `key`'s partition of `topic`, reachable on `listener_name`.
pub(crate) fn coordinator_node(
    image: &MetadataImage,
    me: i32,
    listener_name: &str,
    topic: &str,
    key: &str,
) -> CoordinatorNode {
    let Some(t) = image.topic_by_name(topic) else {
        return CoordinatorNode::Here;
    };
    let partitions = t.partitions.len() as i32;
    if partitions == 0 {
        return CoordinatorNode::NotAvailable;
    }
    let partition = streamforge_coordinator::partition_for_group(key, partitions);
    let Some(state) = t.partitions.get(&partition) else {
        return CoordinatorNode::NotAvailable;
    };
    if state.leader == me {
        return CoordinatorNode::Here;
    }
    if state.leader < 0 || !image.is_unfenced(state.leader) {
        return CoordinatorNode::NotAvailable;
    }
    let endpoint = image
        .broker(state.leader)
        .and_then(|b| b.endpoints.iter().find(|e| e.name == listener_name));
    match endpoint {
        Some(e) => CoordinatorNode::Other {
            id: state.leader,
            host: e.host.clone(),
            port: i32::from(e.port),
        },
        None => CoordinatorNode::NotAvailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use streamforge_metadata::LogPosition;
    use streamforge_metadata::records::{
        Endpoint, PartitionRecord, Record, RegisterBroker, TopicRecord,
    };
    use uuid::Uuid;

    const TOPIC: &str = "__consumer_offsets";

    fn image(leaders: &[i32], fenced: &[i32]) -> MetadataImage {
        let id = Uuid::from_u128(7);
        let mut records = Vec::new();
        for b in 1..=3 {
            records.push(Record::RegisterBroker(RegisterBroker {
                broker_id: b,
                incarnation_id: Uuid::from_u128(b as u128),
                broker_epoch: 1,
                endpoints: vec![Endpoint {
                    name: "PLAINTEXT".into(),
                    host: format!("10.0.0.{b}"),
                    port: 9092,
                }],
                rack: None,
                fenced: fenced.contains(&b),
            }));
        }
        records.push(Record::Topic(TopicRecord {
            name: TOPIC.into(),
            topic_id: id,
        }));
        for (p, leader) in leaders.iter().enumerate() {
            records.push(Record::Partition(PartitionRecord {
                partition: p as i32,
                topic_id: id,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                leader: *leader,
                leader_epoch: 1,
                partition_epoch: 1,
            }));
        }
        let mut image = MetadataImage::default();
        for (offset, r) in records.into_iter().enumerate() {
            let at = LogPosition {
                offset: offset as i64 + 1,
                epoch: 1,
            };
            image = image.apply(&r, at).expect("applies").0;
        }
        image
    }

    #[test]
    fn the_coordinator_is_the_leader_of_the_keys_partition() {
        // 4 partitions: "hello" hashes to 99162322 % 4 = 2.
        let img = image(&[1, 1, 3, 1], &[]);
        assert_eq!(
            coordinator_node(&img, 1, "PLAINTEXT", TOPIC, "hello"),
            CoordinatorNode::Other {
                id: 3,
                host: "10.0.0.3".into(),
                port: 9092
            }
        );
        assert_eq!(
            coordinator_node(&img, 3, "PLAINTEXT", TOPIC, "hello"),
            CoordinatorNode::Here
        );
    }

    #[test]
    fn no_leader_or_a_fenced_leader_is_coordinator_not_available() {
        let img = image(&[1, 1, -1, 1], &[]);
        let answer = coordinator_node(&img, 1, "PLAINTEXT", TOPIC, "hello");
        assert_eq!(answer, CoordinatorNode::NotAvailable);
        assert_eq!(
            answer.error_code(),
            ResponseError::CoordinatorNotAvailable.code()
        );
        let img = image(&[1, 1, 3, 1], &[3]);
        assert_eq!(
            coordinator_node(&img, 1, "PLAINTEXT", TOPIC, "hello"),
            CoordinatorNode::NotAvailable
        );
    }

    #[test]
    fn a_leader_without_the_requests_listener_is_not_available() {
        let img = image(&[1, 1, 3, 1], &[]);
        assert_eq!(
            coordinator_node(&img, 1, "SASL_SSL", TOPIC, "hello"),
            CoordinatorNode::NotAvailable
        );
    }

    #[test]
    fn a_topic_not_created_yet_is_coordinated_here() {
        let img = MetadataImage::default();
        assert_eq!(
            coordinator_node(&img, 1, "PLAINTEXT", TOPIC, "g"),
            CoordinatorNode::Here
        );
    }
}

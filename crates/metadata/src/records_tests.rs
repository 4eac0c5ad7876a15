use proptest::prelude::*;

use super::*;

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

fn ids() -> impl Strategy<Value = Vec<BrokerId>> {
    prop::collection::vec(-1..100i32, 0..8)
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._-]{0,40}"
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            any::<i32>(),
            any::<i64>(),
            uuid(),
            prop::collection::vec((name(), name(), any::<u16>()), 0..3),
            prop::option::of(name()),
            any::<bool>()
        )
            .prop_map(
                |(broker_id, broker_epoch, incarnation_id, eps, rack, fenced)| {
                    Record::RegisterBroker(RegisterBroker {
                        broker_id,
                        broker_epoch,
                        incarnation_id,
                        endpoints: eps
                            .into_iter()
                            .map(|(name, host, port)| Endpoint { name, host, port })
                            .collect(),
                        rack,
                        fenced,
                    })
                }
            ),
        (any::<i32>(), any::<i64>()).prop_map(|(broker_id, broker_epoch)| Record::FenceBroker {
            broker_id,
            broker_epoch
        }),
        (any::<i32>(), any::<i64>()).prop_map(|(broker_id, broker_epoch)| Record::UnfenceBroker {
            broker_id,
            broker_epoch
        }),
        (name(), uuid()).prop_map(|(name, topic_id)| Record::Topic(TopicRecord { name, topic_id })),
        (
            uuid(),
            any::<i32>(),
            ids(),
            ids(),
            any::<i32>(),
            any::<i32>(),
            any::<i32>()
        )
            .prop_map(
                |(topic_id, partition, replicas, isr, leader, leader_epoch, partition_epoch)| {
                    Record::Partition(PartitionRecord {
                        topic_id,
                        partition,
                        replicas,
                        isr,
                        leader,
                        leader_epoch,
                        partition_epoch,
                    })
                }
            ),
        (
            uuid(),
            any::<i32>(),
            prop::option::of(any::<i32>()),
            prop::option::of(ids()),
            prop::option::of(ids())
        )
            .prop_map(|(topic_id, partition, leader, isr, replicas)| {
                Record::PartitionChange(PartitionChange {
                    topic_id,
                    partition,
                    leader,
                    isr,
                    replicas,
                })
            }),
        (
            prop_oneof![
                name().prop_map(ConfigResource::Topic),
                any::<i32>().prop_map(ConfigResource::Broker)
            ],
            name(),
            prop::option::of(name())
        )
            .prop_map(|(resource, name, value)| Record::Config(ConfigRecord {
                resource,
                name,
                value
            })),
        (any::<i32>(), any::<i64>(), any::<i64>()).prop_map(
            |(broker_id, broker_epoch, next_producer_id)| {
                Record::ProducerIds(ProducerIdsRecord {
                    broker_id,
                    broker_epoch,
                    next_producer_id,
                })
            }
        ),
        uuid().prop_map(|topic_id| Record::RemoveTopic { topic_id }),
        (uuid(), any::<i32>(), ids(), ids()).prop_map(|(topic_id, partition, adding, removing)| {
            Record::PartitionReassignment(PartitionReassignment {
                topic_id,
                partition,
                adding,
                removing,
            })
        }),
        partition_elr(),
    ]
}

fn partition_elr() -> impl Strategy<Value = Record> {
    (uuid(), any::<i32>(), ids(), ids()).prop_map(|(topic_id, partition, elr, last_known_elr)| {
        Record::PartitionElr(PartitionElr {
            topic_id,
            partition,
            elr,
            last_known_elr,
        })
    })
}

proptest! {
    #[test]
    fn every_record_round_trips(record in record()) {
        let bytes = record.encode().unwrap();
        prop_assert_eq!(Record::decode(&bytes).unwrap(), record);
    }

    #[test]
    fn a_partition_elr_record_round_trips(record in partition_elr()) {
        let bytes = record.encode().unwrap();
        prop_assert_eq!(bytes[0], 10);
        prop_assert_eq!(Record::decode(&bytes).unwrap(), record);
    }

    /// Arbitrary bodies behind the PartitionElr kind: an error or a record, never a panic.
    #[test]
    fn decoding_arbitrary_partition_elr_bodies_never_panics(
        body in prop::collection::vec(any::<u8>(), 0..128)
    ) {
        let mut bytes = vec![10, RECORD_VERSION];
        bytes.extend_from_slice(&body);
        let _ = Record::decode(&bytes);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Record::decode(&bytes);
    }

    #[test]
    fn every_truncation_of_a_record_is_an_error(record in record()) {
        let bytes = record.encode().unwrap();
        for len in 0..bytes.len() {
            prop_assert!(Record::decode(&bytes[..len]).is_err());
        }
    }
}

#[test]
fn newer_versions_and_unknown_types_are_refused() {
    let mut bytes = Record::RemoveTopic {
        topic_id: Uuid::nil(),
    }
    .encode()
    .unwrap();
    bytes[1] = RECORD_VERSION + 1;
    assert!(matches!(
        Record::decode(&bytes),
        Err(RecordError::UnsupportedVersion { .. })
    ));
    bytes[0] = 200;
    assert_eq!(Record::decode(&bytes), Err(RecordError::UnknownType(200)));
    // 9 is PartitionReassignment, 10 PartitionElr; 11 is the first kind this build does not know.
    bytes[0] = 11;
    bytes[1] = RECORD_VERSION;
    assert_eq!(Record::decode(&bytes), Err(RecordError::UnknownType(11)));
}

#[test]
fn a_partition_elr_record_has_a_fixed_layout() {
    let record = Record::PartitionElr(PartitionElr {
        topic_id: Uuid::from_u128(1),
        partition: 2,
        elr: vec![3],
        last_known_elr: vec![],
    });
    let mut expected = vec![10, 0];
    expected.extend_from_slice(Uuid::from_u128(1).as_bytes());
    expected.extend_from_slice(&2i32.to_be_bytes());
    expected.extend_from_slice(&[0, 1, 0, 0, 0, 3, 0, 0]);
    assert_eq!(record.encode().unwrap(), expected);
}

#[test]
fn over_long_lists_are_refused_before_allocating() {
    // A partition record whose replica count says 65535.
    let mut bytes = vec![4, 0];
    bytes.extend_from_slice(&[0; 16]);
    bytes.extend_from_slice(&0i32.to_be_bytes());
    bytes.extend_from_slice(&u16::MAX.to_be_bytes());
    assert!(matches!(
        Record::decode(&bytes),
        Err(RecordError::TooLong { .. })
    ));
    let too_many = Record::Partition(PartitionRecord {
        topic_id: Uuid::nil(),
        partition: 0,
        replicas: vec![1; REPLICAS_MAX + 1],
        isr: vec![],
        leader: NO_LEADER,
        leader_epoch: 0,
        partition_epoch: 0,
    });
    assert!(too_many.encode().is_err());
}

#[test]
fn a_partition_reassignment_is_kind_9_and_the_kinds_before_it_keep_their_encoding() {
    let r = Record::PartitionReassignment(PartitionReassignment {
        topic_id: Uuid::from_u128(1),
        partition: 2,
        adding: vec![3],
        removing: vec![4, 5],
    });
    let bytes = r.encode().unwrap();
    let mut expected = vec![9, RECORD_VERSION];
    expected.extend_from_slice(Uuid::from_u128(1).as_bytes());
    expected.extend_from_slice(&2i32.to_be_bytes());
    expected.extend_from_slice(&[0, 1, 0, 0, 0, 3]);
    expected.extend_from_slice(&[0, 2, 0, 0, 0, 4, 0, 0, 0, 5]);
    assert_eq!(bytes, expected);
    let remove = Record::RemoveTopic {
        topic_id: Uuid::nil(),
    };
    assert_eq!(remove.encode().unwrap()[0], 8);
}

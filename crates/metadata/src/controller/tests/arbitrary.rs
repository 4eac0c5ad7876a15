//! Arbitrary event sequences, including nonsense (unknown ids, negative counts, stale epochs):
//! the controller answers every one without panicking, and every record it writes applies.

use std::collections::BTreeMap;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;

fn id() -> impl Strategy<Value = BrokerId> {
    prop_oneof![4 => 1..5i32, 1 => any::<i32>()]
}

fn event() -> impl Strategy<Value = (Event, u64)> {
    let topic = prop_oneof![Just("a".to_string()), Just("b".to_string()), "[a-z.]{0,3}"];
    let e = prop_oneof![
        (id(), 0..3u128, -1..8i64).prop_map(|(broker_id, inc, previous_broker_epoch)| {
            Event::BrokerRegistration(BrokerRegistration {
                broker_id,
                incarnation_id: Uuid::from_u128(inc),
                endpoints: vec![],
                rack: None,
                previous_broker_epoch,
            })
        }),
        (id(), 0..8i64, any::<bool>(), any::<bool>()).prop_map(
            |(broker_id, broker_epoch, f, s)| {
                Event::BrokerHeartbeat(BrokerHeartbeat {
                    broker_id,
                    broker_epoch,
                    metadata_offset: i64::MAX,
                    wants_fence: f,
                    wants_shutdown: s,
                })
            }
        ),
        (
            topic.clone(),
            -2..5i32,
            -2..5i16,
            prop::collection::btree_map(-1..3i32, prop::collection::vec(id(), 0..4), 0..3)
        )
            .prop_map(|(name, num_partitions, replication_factor, assignment)| {
                Event::CreateTopics {
                    topics: vec![CreateTopic {
                        name,
                        num_partitions,
                        replication_factor,
                        assignment,
                        configs: BTreeMap::new(),
                    }],
                    validate_only: false,
                }
            }),
        (topic.clone(), -1..8i32).prop_map(|(topic, count)| Event::CreatePartitions(vec![
            CreatePartitions {
                topic,
                count,
                assignment: None
            }
        ])),
        topic
            .clone()
            .prop_map(|t| Event::DeleteTopics(vec![TopicRef::Name(t)])),
        (id(), 0..8i64).prop_map(|(broker_id, broker_epoch)| Event::AllocateProducerIds {
            broker_id,
            broker_epoch
        }),
        any::<bool>().prop_map(|p| Event::ElectLeaders {
            election: if p {
                ElectionType::Preferred
            } else {
                ElectionType::Unclean
            },
            partitions: None,
        }),
        (
            topic.clone(),
            -1..3i32,
            prop::option::of(prop::collection::vec(id(), 0..4)),
            any::<bool>()
        )
            .prop_map(|(topic, partition, replicas, allow)| {
                Event::AlterPartitionReassignments {
                    partitions: vec![ReassignPartition {
                        topic,
                        partition,
                        replicas,
                    }],
                    allow_replication_factor_change: allow,
                }
            }),
        Just(Event::Tick),
    ];
    (e, 0..20_000u64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_events_never_panic_and_every_record_applies(events in prop::collection::vec(event(), 1..40)) {
        let mut h = Harness::new(ControllerConfig::default());
        let mut now = 0;
        for (event, step) in events {
            now += step;
            // `run` commits what was written; a record that does not apply fails the test.
            let _ = h.run(event, now);
        }
    }

    /// AlterPartition with arbitrary contents on a live topic.
    #[test]
    fn arbitrary_alter_partitions_never_panic(
        requests in prop::collection::vec((id(), -1..3i32, -1..3i32, -1..3i32, prop::collection::vec(id(), 0..5)), 1..20)
    ) {
        let mut h = cluster(4);
        h.create("t", 2, 3).unwrap();
        let topic_id = h.c.committed().topic_by_name("t").unwrap().id;
        for (broker_id, partition, leader_epoch, partition_epoch, new_isr) in requests {
            let broker_epoch = h.epochs.get(&broker_id).copied().unwrap_or(0);
            let a = AlterPartition { broker_id, broker_epoch, topic_id, partition, leader_epoch, partition_epoch, new_isr };
            let _ = h.run(Event::AlterPartition(a), 1);
        }
    }

    /// Reassignments, cancels and AlterPartitions with arbitrary contents interleaved on a live
    /// topic: every record applies, and a partition's lists stay inside its replicas.
    #[test]
    fn arbitrary_reassignments_and_isr_changes_never_panic(
        steps in prop::collection::vec((any::<bool>(), 0..2i32, prop::option::of(prop::collection::vec(id(), 0..4)), prop::collection::vec(id(), 0..5)), 1..30)
    ) {
        let mut h = cluster(4);
        h.create("t", 2, 2).unwrap();
        let topic_id = h.c.committed().topic_by_name("t").unwrap().id;
        for (reassign, partition, replicas, new_isr) in steps {
            if reassign {
                let r = ReassignPartition { topic: "t".into(), partition, replicas };
                let event = Event::AlterPartitionReassignments { partitions: vec![r], allow_replication_factor_change: true };
                let _ = h.run(event, 1);
            } else {
                let p = h.partition("t", partition);
                let leader = p.leader;
                let broker_epoch = h.epochs.get(&leader).copied().unwrap_or(0);
                let a = AlterPartition { broker_id: leader, broker_epoch, topic_id, partition, leader_epoch: p.leader_epoch, partition_epoch: p.partition_epoch, new_isr };
                let _ = h.run(Event::AlterPartition(a), 1);
            }
            let p = h.partition("t", partition);
            prop_assert!(p.adding_replicas.iter().chain(&p.removing_replicas).all(|r| p.replicas.contains(r)));
        }
    }
}

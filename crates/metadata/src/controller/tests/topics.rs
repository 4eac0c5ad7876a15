//! Placement and topic administration.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::*;
use crate::records::ConfigResource;

#[test]
fn placement_spreads_leaders_and_replicas_within_one_of_even() {
    let mut h = cluster(5);
    h.create("a", 7, 3).unwrap();
    h.create("b", 11, 2).unwrap();
    let mut leaders = BTreeMap::<BrokerId, usize>::new();
    let mut replicas = BTreeMap::<BrokerId, usize>::new();
    for t in h.c.committed().topics() {
        for p in t.partitions.values() {
            *leaders.entry(p.leader).or_default() += 1;
            for r in &p.replicas {
                *replicas.entry(*r).or_default() += 1;
            }
        }
    }
    let spread =
        |m: &BTreeMap<BrokerId, usize>| m.values().max().unwrap() - m.values().min().unwrap();
    assert_eq!(leaders.len(), 5);
    assert!(spread(&leaders) <= 1, "leaders {leaders:?}");
    assert!(spread(&replicas) <= 1, "replicas {replicas:?}");
}

#[test]
fn placement_puts_replicas_on_distinct_racks() {
    let mut h = Harness::new(ControllerConfig::default());
    for (id, rack) in [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")] {
        h.register(id, Some(rack), 0);
    }
    h.create("t", 12, 3).unwrap();
    let rack = |id: BrokerId| h.c.committed().broker(id).unwrap().rack.clone();
    for p in
        h.c.committed()
            .topic_by_name("t")
            .unwrap()
            .partitions
            .values()
    {
        let mut racks: Vec<_> = p.replicas.iter().map(|&r| rack(r)).collect();
        racks.sort();
        racks.dedup();
        assert_eq!(racks.len(), 3, "{:?}", p.replicas);
    }
}

#[test]
fn a_replication_factor_above_the_unfenced_brokers_is_invalid() {
    let mut h = cluster(3);
    assert_eq!(
        h.create("t", 1, 4),
        Err(ResponseError::InvalidReplicationFactor)
    );
    h.heartbeat(1, TIMEOUT);
    h.heartbeat(2, TIMEOUT);
    h.run(Event::Tick, TIMEOUT + 1); // 3 is fenced
    assert_eq!(
        h.create("t", 1, 3),
        Err(ResponseError::InvalidReplicationFactor)
    );
    assert!(h.create("t", 1, 2).is_ok());
}

#[test]
fn create_topics_validates_names_counts_and_duplicates() {
    let mut h = cluster(1);
    assert_eq!(
        h.create("bad name", 1, 1),
        Err(ResponseError::InvalidTopicException)
    );
    assert_eq!(h.create("t", 0, 1), Err(ResponseError::InvalidPartitions));
    assert!(h.create("t", -1, -1).is_ok());
    assert_eq!(h.create("t", 1, 1), Err(ResponseError::TopicAlreadyExists));
    let event = Event::CreateTopics {
        topics: vec![CreateTopic {
            name: "v".into(),
            num_partitions: 1,
            replication_factor: 1,
            assignment: BTreeMap::new(),
            configs: BTreeMap::new(),
        }],
        validate_only: true,
    };
    let fx = h.c.handle(event, 0);
    assert!(fx.records.is_empty());
}

#[test]
fn an_explicit_replica_assignment_is_honoured_and_checked() {
    let mut h = cluster(3);
    let t = |assignment: BTreeMap<i32, Vec<BrokerId>>| CreateTopic {
        name: "t".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment,
        configs: BTreeMap::new(),
    };
    let bad = BTreeMap::from([(0, vec![3, 9])]);
    assert_eq!(
        h.create_with(t(bad)),
        Err(ResponseError::InvalidReplicaAssignment)
    );
    let uneven = BTreeMap::from([(0, vec![3, 1]), (1, vec![2])]);
    assert_eq!(
        h.create_with(t(uneven)),
        Err(ResponseError::InvalidReplicaAssignment)
    );
    let good = BTreeMap::from([(0, vec![3, 1]), (1, vec![2, 3])]);
    h.create_with(t(good)).unwrap();
    assert_eq!(h.partition("t", 0).replicas, vec![3, 1]);
    assert_eq!(h.partition("t", 1).leader, 2);
}

#[test]
fn create_partitions_delete_topics_and_alter_configs() {
    let mut h = cluster(3);
    let created = h.create("t", 2, 2).unwrap();
    let grow = |count| {
        Event::CreatePartitions(vec![CreatePartitions {
            topic: "t".into(),
            count,
            assignment: None,
        }])
    };
    assert_eq!(
        h.run(grow(2), 0),
        Some(Reply::CreatePartitions(vec![(
            "t".into(),
            Err(ResponseError::InvalidPartitions)
        )]))
    );
    assert_eq!(
        h.run(grow(5), 0),
        Some(Reply::CreatePartitions(vec![("t".into(), Ok(()))]))
    );
    assert_eq!(h.partition("t", 4).replicas.len(), 2);
    let set = Event::AlterConfigs(vec![AlterConfig {
        resource: ConfigResource::Topic("t".into()),
        entries: vec![("retention.ms".into(), Some("5".into()))],
    }]);
    h.run(set, 0);
    assert_eq!(h.c.committed().topic_config("t", "retention.ms"), Some("5"));
    let missing = Event::AlterConfigs(vec![AlterConfig {
        resource: ConfigResource::Topic("nope".into()),
        entries: vec![],
    }]);
    assert_eq!(
        h.run(missing, 0),
        Some(Reply::AlterConfigs(vec![(
            ConfigResource::Topic("nope".into()),
            Err(ResponseError::UnknownTopicOrPartition)
        )]))
    );
    let delete = Event::DeleteTopics(vec![
        TopicRef::Id(created.topic_id),
        TopicRef::Name("t".into()),
    ]);
    assert_eq!(
        h.run(delete, 0),
        Some(Reply::DeleteTopics(vec![
            (TopicRef::Id(created.topic_id), Ok(created.topic_id)),
            (
                TopicRef::Name("t".into()),
                Err(ResponseError::UnknownTopicOrPartition)
            ),
        ]))
    );
    assert!(h.c.committed().topic_by_name("t").is_none());
}

#[test]
fn an_inactive_controller_writes_nothing_and_answers_not_controller() {
    let mut c = Controller::new(ControllerConfig::default());
    let fx = c.handle(
        Event::AllocateProducerIds {
            broker_id: 1,
            broker_epoch: 1,
        },
        0,
    );
    assert_eq!(
        fx,
        Effects {
            records: vec![],
            reply: Some(Reply::NotController)
        }
    );
    assert_eq!(c.handle(Event::Tick, 0), Effects::default());
}

#[test]
fn placement_refuses_more_replicas_than_brokers() {
    let brokers = vec![(1, None), (2, None)];
    assert!(place_replicas(&brokers, &mut BTreeMap::new(), 1, 3).is_err());
    assert_eq!(
        place_replicas(&brokers, &mut BTreeMap::new(), 2, 2).unwrap(),
        vec![vec![1, 2], vec![2, 1]]
    );
}

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::records::ConfigRecord;
use crate::snapshot::Snapshot;

const T: Uuid = Uuid::from_u128(7);

fn broker(id: BrokerId, epoch: i64) -> Record {
    Record::RegisterBroker(RegisterBroker {
        broker_id: id,
        broker_epoch: epoch,
        incarnation_id: Uuid::from_u128(id as u128),
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }],
        rack: Some(format!("r{}", id % 2)),
        fenced: false,
    })
}

fn partition(p: i32, replicas: &[BrokerId]) -> Record {
    Record::Partition(PartitionRecord {
        topic_id: T,
        partition: p,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader: replicas[0],
        leader_epoch: 0,
        partition_epoch: 0,
    })
}

fn change(p: i32, leader: Option<BrokerId>, isr: Option<&[BrokerId]>) -> Record {
    Record::PartitionChange(PartitionChange {
        topic_id: T,
        partition: p,
        leader,
        isr: isr.map(<[BrokerId]>::to_vec),
        replicas: None,
    })
}

fn elr(p: i32, elr: &[BrokerId], last_known_elr: &[BrokerId]) -> Record {
    Record::PartitionElr(crate::records::PartitionElr {
        topic_id: T,
        partition: p,
        elr: elr.to_vec(),
        last_known_elr: last_known_elr.to_vec(),
    })
}

/// Apply records at offsets 0, 1, ... and return the final image.
fn build(records: &[Record]) -> MetadataImage {
    let mut image = MetadataImage::empty();
    for r in records {
        let at = LogPosition {
            offset: image.position().offset + 1,
            epoch: 1,
        };
        image = image.apply(r, at).unwrap().0;
    }
    image
}

fn cluster() -> Vec<Record> {
    vec![
        broker(1, 1),
        broker(2, 2),
        broker(3, 3),
        Record::Topic(TopicRecord {
            name: "t".into(),
            topic_id: T,
        }),
        partition(0, &[1, 2, 3]),
        partition(1, &[2, 3, 1]),
        Record::Config(ConfigRecord {
            resource: ConfigResource::Topic("t".into()),
            name: "retention.ms".into(),
            value: Some("1000".into()),
        }),
        Record::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 1,
            next_producer_id: 1000,
        }),
    ]
}

fn next(image: &MetadataImage) -> LogPosition {
    LogPosition {
        offset: image.position().offset + 1,
        epoch: 1,
    }
}

#[test]
fn image_holds_brokers_topics_partitions_configs_and_producer_ids() {
    let image = build(&cluster());
    assert_eq!(image.brokers().len(), 3);
    assert_eq!(image.topic_by_name("t").unwrap().id, T);
    assert_eq!(image.partition(T, 1).unwrap().leader, 2);
    assert_eq!(image.topic_config("t", "retention.ms"), Some("1000"));
    assert_eq!(image.next_producer_id(), 1000);
    assert_eq!(image.position().offset, 7);
}

#[test]
fn leader_change_bumps_both_epochs_isr_change_only_the_partition_epoch() {
    let image = build(&cluster());
    let (image, _) = image
        .apply(&change(0, None, Some(&[1, 2])), next(&image))
        .unwrap();
    let p = image.partition(T, 0).unwrap();
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
    let (image, _) = image
        .apply(&change(0, Some(2), Some(&[2])), next(&image))
        .unwrap();
    let p = image.partition(T, 0).unwrap();
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
}

#[test]
fn records_that_do_not_fit_are_refused_and_leave_the_image_unchanged() {
    let image = build(&cluster());
    let at = next(&image);
    let bad = [
        change(0, Some(9), None), // leader outside the ISR
        change(5, Some(1), None), // unknown partition
        partition(0, &[1]),       // duplicate partition
        Record::Topic(TopicRecord {
            name: "t".into(),
            topic_id: Uuid::from_u128(8),
        }),
        Record::FenceBroker {
            broker_id: 1,
            broker_epoch: 99,
        }, // stale epoch
        broker(2, 2), // epoch not newer
        Record::ProducerIds(ProducerIdsRecord {
            broker_id: 1,
            broker_epoch: 1,
            next_producer_id: 1000,
        }),
        Record::RemoveTopic {
            topic_id: Uuid::from_u128(99),
        },
    ];
    for record in &bad {
        assert!(image.apply(record, at).is_err(), "{record:?} applied");
        // In place too: all or nothing, the image and the delta as they were.
        let mut in_place = image.clone();
        let mut delta = MetadataDelta::default();
        assert!(in_place.apply_mut(record, at, &mut delta).is_err());
        assert_eq!(in_place, image, "{record:?} changed the image");
        assert_eq!(
            delta,
            MetadataDelta::default(),
            "{record:?} changed the delta"
        );
    }
    let old = LogPosition {
        offset: image.position().offset,
        epoch: 1,
    };
    assert!(matches!(
        image.apply(&broker(4, 4), old),
        Err(ApplyError::OffsetNotAfter { .. })
    ));
}

#[test]
fn delta_tells_each_broker_to_lead_follow_or_delete() {
    let image = build(&cluster());
    let (image, delta) = image
        .apply(&change(0, Some(2), Some(&[2, 3])), next(&image))
        .unwrap();
    let two = delta.local_changes(2);
    assert_eq!(two.leaders.len(), 1);
    assert_eq!(two.leaders[0].state.leader_epoch, 1);
    assert_eq!(delta.local_changes(1).followers.len(), 1);
    assert!(delta.local_changes(4).leaders.is_empty());

    let (_, delta) = image
        .apply(&Record::RemoveTopic { topic_id: T }, next(&image))
        .unwrap();
    assert_eq!(delta.local_changes(1).deletes.len(), 2);
    assert_eq!(delta.topics_removed.get(&T).map(String::as_str), Some("t"));
}

#[test]
fn creation_deltas_give_new_leaders_and_followers() {
    let (_, delta) = MetadataImage::empty()
        .apply_all(cluster().iter().enumerate().map(|(i, r)| {
            (
                r,
                LogPosition {
                    offset: i as i64,
                    epoch: 1,
                },
            )
        }))
        .unwrap();
    let one = delta.local_changes(1);
    assert_eq!((one.leaders.len(), one.followers.len()), (1, 1));
}

#[test]
fn removing_a_topic_removes_its_configs() {
    let image = build(&cluster());
    let (image, _) = image
        .apply(&Record::RemoveTopic { topic_id: T }, next(&image))
        .unwrap();
    assert!(image.topic_by_name("t").is_none());
    assert!(image.configs().is_empty());
}

#[test]
fn an_image_equals_the_load_of_its_snapshot() {
    let mut records = cluster();
    records.push(change(0, Some(2), Some(&[2, 3])));
    records.push(Record::FenceBroker {
        broker_id: 1,
        broker_epoch: 1,
    });
    let image = build(&records);
    let snapshot = image.snapshot();
    assert_eq!(MetadataImage::load(&snapshot).unwrap(), image);
    let bytes = snapshot.encode().unwrap();
    let decoded = Snapshot::decode(&bytes).unwrap();
    assert_eq!(decoded, snapshot);
    assert_eq!(MetadataImage::load(&decoded).unwrap(), image);
}

#[test]
fn a_partition_elr_record_sets_the_elr_without_touching_epochs() {
    let mut records = cluster();
    records.push(change(0, None, Some(&[1])));
    records.push(elr(0, &[2, 3], &[]));
    let image = build(&records);
    let p = image.partition(T, 0).unwrap();
    assert_eq!(
        (p.elr.clone(), p.last_known_elr.clone()),
        (vec![2, 3], vec![])
    );
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
    // The delta of the ELR record carries the new state to the brokers.
    let (_, delta) = image.apply(&elr(0, &[2], &[1]), next(&image)).unwrap();
    let after = delta.partitions[&(T, 0)].after.clone().unwrap();
    assert_eq!((after.elr, after.last_known_elr), (vec![2], vec![1]));
}

#[test]
fn an_elr_inside_the_isr_or_outside_the_replicas_is_refused() {
    let mut records = cluster();
    records.push(change(0, None, Some(&[1])));
    let image = build(&records);
    for bad in [
        elr(0, &[1], &[]),
        elr(0, &[4], &[]),
        elr(0, &[2, 2], &[]),
        elr(0, &[], &[5]),
        elr(9, &[], &[]),
    ] {
        assert!(image.apply(&bad, next(&image)).is_err(), "{bad:?}");
    }
}

#[test]
fn a_replica_that_rejoins_the_isr_leaves_the_elr() {
    let mut records = cluster();
    records.push(change(0, None, Some(&[1])));
    records.push(elr(0, &[2, 3], &[]));
    records.push(change(0, None, Some(&[1, 2])));
    let image = build(&records);
    assert_eq!(image.partition(T, 0).unwrap().elr, vec![3]);
}

#[test]
fn an_image_with_elr_equals_the_load_of_its_snapshot() {
    let mut records = cluster();
    records.push(change(0, Some(NO_LEADER), Some(&[])));
    records.push(elr(0, &[2, 3], &[1]));
    let image = build(&records);
    let snapshot = image.snapshot();
    let partition_at = snapshot
        .records
        .iter()
        .position(|r| matches!(r, Record::Partition(p) if p.partition == 0))
        .unwrap();
    assert_eq!(snapshot.records[partition_at + 1], elr(0, &[2, 3], &[1]));
    let decoded = Snapshot::decode(&snapshot.encode().unwrap()).unwrap();
    assert_eq!(MetadataImage::load(&decoded).unwrap(), image);
}

proptest! {
    /// Random leader, ISR and ELR changes: whatever applies, the snapshot reloads to the same
    /// image.
    #[test]
    fn snapshots_with_elr_round_trip_after_random_changes(
        changes in prop::collection::vec((0..2i32, prop::option::of(1..4i32), prop::collection::vec(0..4i32, 0..3), prop::collection::vec(1..4i32, 0..3), prop::collection::vec(1..4i32, 0..2)), 0..20)
    ) {
        let mut image = build(&cluster());
        for (p, leader, isr, e, lke) in changes {
            for record in [change(p, leader, Some(&isr)), elr(p, &e, &lke)] {
                if let Ok((next_image, _)) = image.apply(&record, next(&image)) {
                    image = next_image;
                }
            }
        }
        prop_assert_eq!(MetadataImage::load(&image.snapshot()).unwrap(), image);
    }

    /// Random leader and ISR changes: whatever applies, the snapshot reloads to the same image.
    #[test]
    fn snapshots_round_trip_after_random_changes(
        changes in prop::collection::vec((0..2i32, prop::option::of(1..4i32), prop::collection::vec(1..4i32, 1..3)), 0..20)
    ) {
        let mut image = build(&cluster());
        for (p, leader, isr) in changes {
            if let Ok((next_image, _)) = image.apply(&change(p, leader, Some(&isr)), next(&image)) {
                image = next_image;
            }
        }
        prop_assert_eq!(MetadataImage::load(&image.snapshot()).unwrap(), image);
    }

    /// Replaying in place (what a node does at start-up) gives the image and the delta that
    /// applying each record to a new copy gives, whichever records refuse to apply.
    #[test]
    fn replaying_in_place_equals_applying_to_copies(
        changes in prop::collection::vec((0..3i32, prop::option::of(0..5i32), prop::collection::vec(1..4i32, 0..3)), 0..30)
    ) {
        let mut copied = build(&cluster());
        let mut in_place = copied.clone();
        let (mut copied_delta, mut in_place_delta) = (MetadataDelta::default(), MetadataDelta::default());
        for (p, leader, isr) in changes {
            let record = change(p, leader, Some(&isr));
            let at = next(&copied);
            let a = copied.apply_into(&record, at, &mut copied_delta);
            let b = in_place.apply_mut(&record, at, &mut in_place_delta);
            prop_assert_eq!(a.is_ok(), b.is_ok());
            if let Ok(image) = a {
                copied = image;
            }
            prop_assert_eq!(&copied, &in_place);
        }
        prop_assert_eq!(copied_delta, in_place_delta);
    }

    #[test]
    fn decoding_arbitrary_snapshot_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(snapshot) = Snapshot::decode(&bytes) {
            let _ = MetadataImage::load(&snapshot);
        }
    }
}

fn reassignment(p: i32, adding: &[BrokerId], removing: &[BrokerId]) -> Record {
    Record::PartitionReassignment(crate::records::PartitionReassignment {
        topic_id: T,
        partition: p,
        adding: adding.to_vec(),
        removing: removing.to_vec(),
    })
}

fn assign(
    p: i32,
    replicas: &[BrokerId],
    isr: Option<&[BrokerId]>,
    leader: Option<BrokerId>,
) -> Record {
    Record::PartitionChange(PartitionChange {
        topic_id: T,
        partition: p,
        leader,
        isr: isr.map(<[BrokerId]>::to_vec),
        replicas: Some(replicas.to_vec()),
    })
}

#[test]
fn a_reassignment_record_sets_adding_and_removing_and_a_new_assignment_ends_it() {
    let mut records = cluster();
    records.push(broker(4, 4));
    // Move partition 0 from [1, 2, 3] to [4, 2, 3]: 4 joins as a follower, 1 leaves later.
    records.push(assign(0, &[4, 2, 3, 1], None, None));
    records.push(reassignment(0, &[4], &[1]));
    let image = build(&records);
    let p = image.partition(T, 0).unwrap();
    assert_eq!(p.replicas, vec![4, 2, 3, 1]);
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![4], vec![1])
    );
    assert_eq!(
        (p.leader_epoch, p.partition_epoch),
        (0, 1),
        "growing keeps the leader epoch"
    );
    assert_eq!(p.original_replicas(), vec![2, 3, 1]);
    assert_eq!(p.target_replicas(), vec![4, 2, 3]);
    // The snapshot carries the reassignment after the partition.
    assert_eq!(MetadataImage::load(&image.snapshot()).unwrap(), image);

    // Completion: a replica leaves, so the leader epoch moves even though the leader (2 after
    // the election) is new anyway; the lists clear with the new assignment.
    let (image, delta) = image
        .apply_all([
            (
                &assign(0, &[4, 2, 3], Some(&[2, 3, 4]), Some(2)),
                next(&image),
            ),
            (
                &reassignment(0, &[], &[]),
                LogPosition {
                    offset: next(&image).offset + 1,
                    epoch: 1,
                },
            ),
        ])
        .unwrap();
    let p = image.partition(T, 0).unwrap();
    assert!(!p.is_reassigning());
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
    assert_eq!(
        delta.local_changes(1).deletes.len(),
        1,
        "the removed replica deletes its copy"
    );
}

#[test]
fn a_replica_leaving_bumps_the_leader_epoch_with_the_same_leader() {
    let image = build(&cluster());
    let (image, _) = image
        .apply(&assign(0, &[1, 2], Some(&[1, 2]), None), next(&image))
        .unwrap();
    let p = image.partition(T, 0).unwrap();
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 1, 1));
}

#[test]
fn reassignment_lists_outside_the_replicas_or_overlapping_are_refused() {
    let image = build(&cluster());
    let at = next(&image);
    for bad in [
        reassignment(0, &[4], &[]),       // not a replica
        reassignment(0, &[2], &[2]),      // added and removed
        reassignment(0, &[], &[1, 2, 3]), // removes every replica
        reassignment(0, &[2, 2], &[]),    // duplicated
        reassignment(7, &[], &[1]),       // unknown partition
    ] {
        assert!(image.apply(&bad, at).is_err(), "{bad:?} applied");
    }
}

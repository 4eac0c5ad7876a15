//! Partition reassignment (KIP-455): start, completion when the added replicas join the ISR,
//! leader hand-over, cancel, listing, and Kafka's error codes.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::*;
use crate::records::{ConfigResource, NO_LEADER, PartitionReassignment};

/// A cluster of `n` brokers with topic "t": one partition on `replicas` (the first leads).
fn topic_on(n: BrokerId, replicas: &[BrokerId]) -> Harness {
    let mut h = cluster(n);
    h.create_with(CreateTopic {
        name: "t".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment: BTreeMap::from([(0, replicas.to_vec())]),
        configs: BTreeMap::new(),
    })
    .unwrap();
    h
}

fn reassign_event(replicas: Option<&[BrokerId]>) -> Event {
    Event::AlterPartitionReassignments {
        partitions: vec![ReassignPartition {
            topic: "t".into(),
            partition: 0,
            replicas: replicas.map(<[BrokerId]>::to_vec),
        }],
        allow_replication_factor_change: true,
    }
}

/// Reassign partition 0 of "t" (`None` cancels); the partition's answer.
fn reassign(h: &mut Harness, replicas: Option<&[BrokerId]>) -> Result<(), ResponseError> {
    match h.run(reassign_event(replicas), 1) {
        Some(Reply::AlterPartitionReassignments(mut r)) if r.len() == 1 => r.remove(0).1,
        other => panic!("unexpected reply {other:?}"),
    }
}

/// The leader of partition 0 asks for `new_isr`.
fn alter_isr(h: &mut Harness, new_isr: &[BrokerId]) -> Result<PartitionState, ResponseError> {
    let p = h.partition("t", 0);
    let a = AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: new_isr.to_vec(),
    };
    match h.run(Event::AlterPartition(a), 1) {
        Some(Reply::AlterPartition(r)) => r,
        other => panic!("unexpected reply {other:?}"),
    }
}

fn listed(h: &mut Harness) -> Vec<OngoingReassignment> {
    match h.run(Event::ListPartitionReassignments(None), 1) {
        Some(Reply::ListPartitionReassignments(v)) => v,
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn a_reassignment_adds_the_target_replicas_as_followers_outside_the_isr() {
    let mut h = topic_on(4, &[1, 2, 3]);
    let fx = h.c.handle(reassign_event(Some(&[4, 2, 3])), 1);
    // One batch: the change (new replica list), then the reassignment's lists.
    let topic_id = h.c.image().topic_by_name("t").unwrap().id;
    assert_eq!(
        fx.records.last(),
        Some(&Record::PartitionReassignment(PartitionReassignment {
            topic_id,
            partition: 0,
            adding: vec![4],
            removing: vec![1],
        }))
    );
    assert!(matches!(fx.records[0], Record::PartitionChange(_)));
    assert_eq!(fx.records.len(), 2);
    let p = h.c.image().partition(topic_id, 0).unwrap().clone();
    assert_eq!(
        p.replicas,
        vec![4, 2, 3, 1],
        "target first, then the removed ones"
    );
    assert_eq!(p.isr, vec![1, 2, 3], "the new replica is not in the ISR");
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 0, 1));
    assert_eq!((p.adding_replicas, p.removing_replicas), (vec![4], vec![1]));
}

#[test]
fn listing_shows_reassignments_in_progress_with_adding_and_removing() {
    let mut h = topic_on(4, &[1, 2]);
    assert!(listed(&mut h).is_empty());
    reassign(&mut h, Some(&[3, 4])).unwrap();
    let ongoing = OngoingReassignment {
        topic: "t".into(),
        partition: 0,
        replicas: vec![3, 4, 1, 2],
        adding: vec![3, 4],
        removing: vec![1, 2],
    };
    assert_eq!(listed(&mut h), vec![ongoing.clone()]);
    let named = Event::ListPartitionReassignments(Some(vec![
        ("t".into(), vec![0, 5]),
        ("missing".into(), vec![0]),
    ]));
    assert_eq!(
        h.run(named, 1),
        Some(Reply::ListPartitionReassignments(vec![ongoing]))
    );
}

#[test]
fn the_reassignment_completes_when_every_added_replica_joins_the_isr() {
    let mut h = topic_on(5, &[1, 2, 3]);
    reassign(&mut h, Some(&[1, 4, 5])).unwrap();
    // One added replica caught up: still in progress.
    alter_isr(&mut h, &[1, 2, 3, 4]).unwrap();
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![1, 4, 5, 2, 3]);
    assert!(p.is_reassigning());
    // The second one: replicas = target, the removed ones leave the ISR, the leader stays and
    // its epoch moves (replicas left the assignment).
    let before = h.partition("t", 0);
    let answered = alter_isr(&mut h, &[1, 2, 3, 4, 5]).unwrap();
    let p = h.partition("t", 0);
    assert_eq!(
        answered, p,
        "AlterPartition answers with the completed state"
    );
    assert_eq!(p.replicas, vec![1, 4, 5]);
    assert_eq!(p.isr, vec![1, 4, 5]);
    assert_eq!(p.leader, 1);
    assert_eq!(p.leader_epoch, before.leader_epoch + 1);
    assert_eq!(p.partition_epoch, before.partition_epoch + 1);
    assert!(!p.is_reassigning());
    assert!(listed(&mut h).is_empty());
}

#[test]
fn a_removed_leader_hands_over_to_the_first_target_replica_in_the_isr() {
    let mut h = topic_on(3, &[1]);
    reassign(&mut h, Some(&[2, 3])).unwrap();
    let p = h.partition("t", 0);
    assert_eq!((p.replicas.clone(), p.leader), (vec![2, 3, 1], 1));
    let p = alter_isr(&mut h, &[1, 3, 2]).unwrap();
    assert_eq!(p.replicas, vec![2, 3]);
    assert_eq!(
        p.isr,
        vec![3, 2],
        "the ISR keeps its order without the removed leader"
    );
    assert_eq!(p.leader, 2, "the preferred target replica leads");
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
}

#[test]
fn a_target_already_in_the_isr_completes_at_once() {
    let mut h = topic_on(3, &[1, 2, 3]);
    // Shrinking to replicas in the ISR: one change, no reassignment left in progress.
    let fx = h.c.handle(reassign_event(Some(&[2, 3])), 1);
    assert_eq!(fx.records.len(), 1, "{:?}", fx.records);
    for r in &fx.records {
        let at = LogPosition {
            offset: h.c.committed().position().offset + 1,
            epoch: 1,
        };
        h.c.replay(r, at).unwrap();
    }
    let p = h.partition("t", 0);
    assert_eq!(
        (p.replicas.clone(), p.isr.clone(), p.leader),
        (vec![2, 3], vec![2, 3], 2)
    );
    assert!(!p.is_reassigning());
    // Reordering changes the preferred replica only; the same assignment writes nothing.
    reassign(&mut h, Some(&[3, 2])).unwrap();
    let p = h.partition("t", 0);
    assert_eq!((p.replicas.clone(), p.leader), (vec![3, 2], 2));
    let fx = h.c.handle(reassign_event(Some(&[3, 2])), 1);
    assert!(fx.records.is_empty());
}

#[test]
fn cancelling_restores_the_original_replicas_and_takes_added_ones_out_of_the_isr() {
    let mut h = topic_on(5, &[1, 2]);
    reassign(&mut h, Some(&[1, 3, 4])).unwrap();
    alter_isr(&mut h, &[1, 2, 3]).unwrap();
    let before = h.partition("t", 0);
    reassign(&mut h, None).unwrap();
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![1, 2]);
    assert_eq!(p.isr, vec![1, 2]);
    assert_eq!(p.leader, 1);
    assert_eq!(
        p.leader_epoch,
        before.leader_epoch + 1,
        "the added replicas left the assignment"
    );
    assert!(!p.is_reassigning());
    assert!(listed(&mut h).is_empty());
}

#[test]
fn cancelling_with_nothing_in_progress_is_no_reassignment_in_progress() {
    let mut h = topic_on(2, &[1, 2]);
    assert_eq!(
        reassign(&mut h, None),
        Err(ResponseError::NoReassignmentInProgress)
    );
}

#[test]
fn a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it() {
    let mut h = topic_on(4, &[1, 2]);
    reassign(&mut h, Some(&[3, 4])).unwrap();
    alter_isr(&mut h, &[1, 3]).unwrap();
    // 1 and 2 go silent: 3 leads with an ISR of added replicas only.
    h.heartbeat(3, TIMEOUT);
    h.heartbeat(4, TIMEOUT);
    h.run(Event::Tick, TIMEOUT + 1);
    let p = h.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
    assert_eq!(
        reassign(&mut h, None),
        Err(ResponseError::InvalidReplicaAssignment)
    );
    let allow = AlterConfig {
        resource: ConfigResource::Topic("t".into()),
        entries: vec![(UNCLEAN_LEADER_ELECTION_ENABLE.into(), Some("true".into()))],
    };
    h.run(Event::AlterConfigs(vec![allow]), TIMEOUT + 1);
    reassign(&mut h, None).unwrap();
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![1, 2]);
    // Both original replicas are fenced: nobody can lead, and the ISR holds the first one.
    assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]));
}

fn attempt(
    h: &mut Harness,
    (topic, partition): (&str, i32),
    replicas: Option<Vec<BrokerId>>,
    allow_replication_factor_change: bool,
) -> Result<(), ResponseError> {
    let event = Event::AlterPartitionReassignments {
        partitions: vec![ReassignPartition {
            topic: topic.into(),
            partition,
            replicas,
        }],
        allow_replication_factor_change,
    };
    match h.run(event, 1) {
        Some(Reply::AlterPartitionReassignments(mut r)) => r.remove(0).1,
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn reassignment_errors_are_kafkas_and_write_nothing() {
    use ResponseError::*;
    let mut h = topic_on(3, &[1, 2]);
    let offset = h.c.committed().position().offset;
    let cases = [
        (("missing", 0), Some(vec![1]), true, UnknownTopicOrPartition),
        (("t", 1), Some(vec![1]), true, UnknownTopicOrPartition),
        (("t", -1), None, true, UnknownTopicOrPartition),
        (("t", 0), Some(vec![]), true, InvalidReplicaAssignment),
        (("t", 0), Some(vec![1, 1]), true, InvalidReplicaAssignment),
        (("t", 0), Some(vec![1, 9]), true, InvalidReplicaAssignment),
        (("t", 0), Some(vec![-1]), true, InvalidReplicaAssignment),
        (
            ("t", 0),
            Some(vec![1, 2, 3]),
            false,
            InvalidReplicationFactor,
        ),
    ];
    for (at, replicas, allow, code) in cases {
        let what = format!("{at:?} {replicas:?}");
        assert_eq!(attempt(&mut h, at, replicas, allow), Err(code), "{what}");
    }
    assert_eq!(h.c.committed().position().offset, offset, "nothing written");
    // The same size with the flag off is fine.
    assert_eq!(attempt(&mut h, ("t", 0), Some(vec![2, 3]), false), Ok(()));
}

#[test]
fn an_inactive_controller_answers_reassignments_with_not_controller() {
    let mut h = topic_on(2, &[1]);
    h.c.deactivate();
    let fx = h.c.handle(reassign_event(Some(&[2])), 1);
    assert!(fx.records.is_empty());
    assert_eq!(fx.reply, Some(Reply::NotController));
    assert!(
        Reply::AlterPartitionReassignments(vec![(
            ("t".into(), 0),
            Err(ResponseError::NotController)
        )])
        .is_not_controller()
    );
}

//! Reassignments as node 2 of three applies them: an added replica opens the partition as a
//! follower, the leader tracks it outside the ISR, the ISR change that holds every target
//! replica completes the move, and the replica that left deletes its copy.

use streamforge_metadata::controller::{AlterPartition, ReassignPartition, Reply};

use crate::partition::PartitionRole;
use crate::replica_manager::ReplicaManager;
use crate::replica_manager::test_cluster::{NODE, cluster, create_placed};

fn reassign(rm: &ReplicaManager, topic: &str, replicas: Option<&[i32]>) {
    let partitions = vec![ReassignPartition {
        topic: topic.into(),
        partition: 0,
        replicas: replicas.map(<[i32]>::to_vec),
    }];
    let results = rm.alter_partition_reassignments(partitions, true).unwrap();
    assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
}

/// This node, leading `topic`-0, asks the controller for `new_isr`.
fn alter_isr(rm: &ReplicaManager, topic: &str, new_isr: &[i32]) {
    let image = rm.image();
    let t = image.topic_by_name(topic).unwrap();
    let p = &t.partitions[&0];
    let change = AlterPartition {
        broker_id: NODE,
        broker_epoch: rm.metadata().broker_epoch(),
        topic_id: t.id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: new_isr.to_vec(),
    };
    let reply = rm.alter_partition(change).unwrap();
    assert!(matches!(reply, Reply::AlterPartition(Ok(_))), "{reply:?}");
}

#[test]
fn an_added_replica_is_followed_and_the_leader_tracks_it_outside_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let rm = cluster(dir.path(), "led", &[&[NODE]]);
    create_placed(&rm, "elsewhere", &[&[1]]);
    assert!(
        rm.partition("elsewhere", 0).is_none(),
        "not hosted here yet"
    );

    // Node 2 gains a follower: it leads with replicas [2, 3], ISR [2], in the same epoch.
    let epoch = rm.partition("led", 0).unwrap().leader_epoch();
    reassign(&rm, "led", Some(&[NODE, 3]));
    let p = rm.partition("led", 0).unwrap();
    assert_eq!((p.role(), p.leader_epoch()), (PartitionRole::Leader, epoch));
    let (replicas, isr, _) = p.replica_status().expect("leads with followers");
    assert_eq!((replicas, isr), (vec![NODE, 3], vec![NODE]));

    // Node 2 is added to another broker's partition: it opens it and follows broker 1.
    reassign(&rm, "elsewhere", Some(&[1, NODE]));
    let p = rm.partition("elsewhere", 0).expect("opened here");
    assert_eq!(
        (p.role(), p.leader_id()),
        (PartitionRole::Follower, Some(1))
    );
    assert!(dir.path().join("elsewhere-0").is_dir());

    // Cancelled: node 2 leaves again and deletes its copy.
    reassign(&rm, "elsewhere", None);
    assert!(rm.partition("elsewhere", 0).is_none());
    assert!(!dir.path().join("elsewhere-0").exists());
    rm.close_all();
}

#[test]
fn a_leader_moved_away_hands_over_and_deletes_its_copy_once_the_target_is_in_sync() {
    let dir = tempfile::tempdir().unwrap();
    let rm = cluster(dir.path(), "t", &[&[NODE]]);
    reassign(&rm, "t", Some(&[3]));
    assert!(
        rm.partition("t", 0).is_some(),
        "kept until the move completes"
    );
    // Broker 3 caught up: the leader's ISR expansion completes the reassignment.
    alter_isr(&rm, "t", &[NODE, 3]);
    let image = rm.image();
    let p = &image.topic_by_name("t").unwrap().partitions[&0];
    assert_eq!(
        (p.replicas.clone(), p.isr.clone(), p.leader),
        (vec![3], vec![3], 3)
    );
    assert!(!p.is_reassigning());
    assert!(rm.partition("t", 0).is_none());
    assert!(
        !dir.path().join("t-0").exists(),
        "the old replica's directory is deleted"
    );
    rm.close_all();
}

//! Elections, epochs, unclean election, AlterPartition, ElectLeaders, rebalance.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::*;
use crate::image::PartitionState;
use crate::records::NO_LEADER;

#[test]
fn election_takes_the_preferred_replica_first() {
    let mut h = cluster(3);
    h.create("t", 1, 3).unwrap();
    let p = h.partition("t", 0);
    assert_eq!(
        p.leader, p.replicas[0],
        "a new partition is led by its preferred replica"
    );
    // Fence the leader: the next replica in assignment order takes over.
    h.heartbeat(p.replicas[1], TIMEOUT);
    h.heartbeat(p.replicas[2], TIMEOUT);
    h.run(Event::Tick, TIMEOUT + 1);
    assert_eq!(h.partition("t", 0).leader, p.replicas[1]);
}

#[test]
fn every_leader_change_bumps_the_leader_epoch_and_the_partition_epoch() {
    let mut h = cluster(3);
    h.create("t", 1, 3).unwrap();
    let before = h.partition("t", 0);
    assert_eq!((before.leader_epoch, before.partition_epoch), (0, 0));
    let leader = before.leader;
    let hb = BrokerHeartbeat {
        broker_id: leader,
        broker_epoch: h.epochs[&leader],
        metadata_offset: 0,
        wants_fence: true,
        wants_shutdown: false,
    };
    h.run(Event::BrokerHeartbeat(hb), 1);
    let after = h.partition("t", 0);
    assert_ne!(after.leader, leader);
    assert_eq!((after.leader_epoch, after.partition_epoch), (1, 1));
}

pub(super) fn lose_everyone_but(h: &mut Harness, topic: &str, survivor: BrokerId, now: u64) {
    // Shrink the ISR to the leader, then fence the leader, leaving only `survivor` alive.
    let p = h.partition(topic, 0);
    let a = AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id: h.c.committed().topic_by_name(topic).unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: vec![p.leader],
    };
    assert!(matches!(
        h.run(Event::AlterPartition(a), now),
        Some(Reply::AlterPartition(Ok(_)))
    ));
    h.heartbeat(survivor, now + TIMEOUT);
    h.run(Event::Tick, now + TIMEOUT + 1);
}

#[test]
fn with_unclean_election_off_a_partition_whose_isr_is_gone_stays_leaderless() {
    let mut h = cluster(2);
    h.create("t", 1, 2).unwrap();
    let follower = h.partition("t", 0).replicas[1];
    lose_everyone_but(&mut h, "t", follower, 0);
    let p = h.partition("t", 0);
    assert_eq!(p.leader, NO_LEADER);
    assert!(!p.isr.contains(&follower), "the survivor is not in the ISR");
}

#[test]
fn with_unclean_election_on_a_replica_outside_the_isr_is_elected() {
    let mut h = cluster(2);
    let mut configs = BTreeMap::new();
    configs.insert(
        UNCLEAN_LEADER_ELECTION_ENABLE.to_string(),
        "true".to_string(),
    );
    h.create_with(CreateTopic {
        name: "t".into(),
        num_partitions: 1,
        replication_factor: 2,
        assignment: BTreeMap::new(),
        configs,
    })
    .unwrap();
    let follower = h.partition("t", 0).replicas[1];
    lose_everyone_but(&mut h, "t", follower, 0);
    let p = h.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (follower, vec![follower]));
}

#[test]
fn alter_partition_shrinks_and_expands_the_isr_and_rejects_stale_epochs() {
    let mut h = cluster(3);
    h.create("t", 1, 3).unwrap();
    let topic_id = h.c.committed().topic_by_name("t").unwrap().id;
    let p = h.partition("t", 0);
    let alter =
        |p: &PartitionState, isr: Vec<BrokerId>, epochs: &BTreeMap<BrokerId, i64>| AlterPartition {
            broker_id: p.leader,
            broker_epoch: epochs[&p.leader],
            topic_id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: isr,
        };
    let shrink = alter(&p, vec![p.leader], &h.epochs);
    let Some(Reply::AlterPartition(Ok(shrunk))) = h.run(Event::AlterPartition(shrink.clone()), 1)
    else {
        panic!()
    };
    assert_eq!(
        (
            shrunk.isr.clone(),
            shrunk.partition_epoch,
            shrunk.leader_epoch
        ),
        (vec![p.leader], 1, 0)
    );
    // The same request again carries the old partition epoch.
    assert_eq!(
        h.run(Event::AlterPartition(shrink), 1),
        Some(Reply::AlterPartition(Err(
            ResponseError::InvalidUpdateVersion
        )))
    );
    let expand = alter(&shrunk, p.replicas.clone(), &h.epochs);
    let Some(Reply::AlterPartition(Ok(expanded))) = h.run(Event::AlterPartition(expand), 2) else {
        panic!()
    };
    assert_eq!(expanded.isr, p.replicas);
    let mut old_leader_epoch = alter(&expanded, p.replicas.clone(), &h.epochs);
    old_leader_epoch.leader_epoch -= 1;
    assert_eq!(
        h.run(Event::AlterPartition(old_leader_epoch), 2),
        Some(Reply::AlterPartition(Err(ResponseError::FencedLeaderEpoch)))
    );
    let mut not_leader = alter(&expanded, p.replicas.clone(), &h.epochs);
    not_leader.broker_id = p.replicas[1];
    not_leader.broker_epoch = h.epochs[&p.replicas[1]];
    assert_eq!(
        h.run(Event::AlterPartition(not_leader), 2),
        Some(Reply::AlterPartition(Err(ResponseError::InvalidRequest)))
    );
}

#[test]
fn alter_partition_refuses_fenced_replicas_in_the_isr() {
    let mut h = cluster(3);
    h.create("t", 1, 3).unwrap();
    let p = h.partition("t", 0);
    let (a, b) = (p.replicas[0], p.replicas[1]);
    h.heartbeat(a, TIMEOUT);
    h.heartbeat(b, TIMEOUT);
    h.run(Event::Tick, TIMEOUT + 1);
    let p = h.partition("t", 0);
    let a_req = AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: p.replicas.clone(),
    };
    assert_eq!(
        h.run(Event::AlterPartition(a_req), TIMEOUT + 2),
        Some(Reply::AlterPartition(Err(ResponseError::IneligibleReplica)))
    );
}

#[test]
fn elect_leaders_preferred_moves_leadership_back_and_reports_not_needed() {
    let mut h = cluster(2);
    h.create("t", 1, 2).unwrap();
    let preferred = h.partition("t", 0).replicas[0];
    h.heartbeat_with(preferred, 1, true); // controlled shutdown
    assert_ne!(h.partition("t", 0).leader, preferred);
    // It comes back (new incarnation), and the leader adds it to the ISR again.
    h.c.last_contact_ms.insert(preferred, 0);
    h.register(preferred, None, TIMEOUT + 5);
    let p = h.partition("t", 0);
    let a = AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: p.replicas.clone(),
    };
    assert!(matches!(
        h.run(Event::AlterPartition(a), TIMEOUT + 6),
        Some(Reply::AlterPartition(Ok(_)))
    ));
    let elect = Event::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: Some(vec![("t".into(), 0)]),
    };
    assert_eq!(
        h.run(elect.clone(), TIMEOUT + 7),
        Some(Reply::ElectLeaders(vec![(("t".into(), 0), Ok(preferred))]))
    );
    assert_eq!(
        h.run(elect, TIMEOUT + 8),
        Some(Reply::ElectLeaders(vec![(
            ("t".into(), 0),
            Err(ResponseError::ElectionNotNeeded)
        )]))
    );
}

#[test]
fn the_auto_rebalance_returns_leadership_to_preferred_replicas() {
    let mut h = cluster(2);
    h.create("t", 1, 2).unwrap();
    let p = h.partition("t", 0);
    let (preferred, other) = (p.replicas[0], p.replicas[1]);
    // Move leadership away without taking the preferred replica out of the ISR for good.
    let e = Event::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: None,
    };
    assert_eq!(h.run(e, 1), Some(Reply::ElectLeaders(vec![])));
    let hb = BrokerHeartbeat {
        broker_id: preferred,
        broker_epoch: h.epochs[&preferred],
        metadata_offset: 0,
        wants_fence: true,
        wants_shutdown: false,
    };
    h.run(Event::BrokerHeartbeat(hb), 2);
    assert_eq!(h.partition("t", 0).leader, other);
    h.heartbeat(preferred, 3); // unfenced again
    let p = h.partition("t", 0);
    let a = AlterPartition {
        broker_id: other,
        broker_epoch: h.epochs[&other],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: vec![other, preferred],
    };
    assert!(matches!(
        h.run(Event::AlterPartition(a), 4),
        Some(Reply::AlterPartition(Ok(_)))
    ));
    h.heartbeat(preferred, LEADER_IMBALANCE_CHECK_INTERVAL_MS);
    h.heartbeat(other, LEADER_IMBALANCE_CHECK_INTERVAL_MS);
    h.run(Event::Tick, LEADER_IMBALANCE_CHECK_INTERVAL_MS);
    assert_eq!(h.partition("t", 0).leader, preferred);
}

#[test]
fn alter_partition_refuses_malformed_isrs_and_unknown_partitions_with_kafkas_codes() {
    let mut h = cluster(3);
    h.create("t", 1, 2).unwrap();
    let p = h.partition("t", 0);
    let topic_id = h.c.committed().topic_by_name("t").unwrap().id;
    let outsider = (1..=3).find(|r| !p.replicas.contains(r)).unwrap();
    let request = |isr: Vec<BrokerId>, topic_id, partition| AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id,
        partition,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr,
    };
    let cases = [
        (
            request(vec![p.leader, outsider], topic_id, 0),
            ResponseError::InvalidRequest,
        ),
        (
            request(vec![p.replicas[1]], topic_id, 0),
            ResponseError::InvalidRequest,
        ),
        (
            request(vec![p.leader, p.leader], topic_id, 0),
            ResponseError::InvalidRequest,
        ),
        (
            request(vec![p.leader], topic_id, 7),
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            request(vec![p.leader], uuid::Uuid::from_u128(1), 0),
            ResponseError::UnknownTopicId,
        ),
    ];
    for (a, code) in cases {
        assert_eq!(
            h.run(Event::AlterPartition(a), 1),
            Some(Reply::AlterPartition(Err(code)))
        );
    }
}

#[test]
fn electing_all_partitions_reports_failures_but_not_partitions_already_led_by_preference() {
    let mut h = cluster(2);
    h.create("t", 2, 2).unwrap();
    // Partition 0's preferred replica leaves the ISR and leadership moves away from it.
    let p = h.partition("t", 0);
    let preferred = p.replicas[0];
    let hb = BrokerHeartbeat {
        broker_id: preferred,
        broker_epoch: h.epochs[&preferred],
        metadata_offset: 0,
        wants_fence: true,
        wants_shutdown: false,
    };
    h.run(Event::BrokerHeartbeat(hb), 1);
    let e = Event::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: None,
    };
    let Some(Reply::ElectLeaders(results)) = h.run(e, 2) else {
        panic!()
    };
    // Partition 1 is led by the remaining broker, its preferred replica: left out. Partition 0
    // cannot go back: reported.
    assert_eq!(
        results,
        vec![(
            ("t".to_string(), 0),
            Err(ResponseError::PreferredLeaderNotAvailable)
        )]
    );
}

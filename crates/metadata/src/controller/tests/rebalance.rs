//! The periodic rebalance's per-broker threshold and explicit unclean ElectLeaders.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::partitions::lose_everyone_but;
use super::*;
use crate::records::NO_LEADER;

const PARTITIONS: i32 = 10;

/// Two brokers, topic `t` with `PARTITIONS` partitions all preferring broker 1, of which the
/// first `led_elsewhere` are led by broker 2 (with broker 1 back in their ISR).
fn imbalanced(config: ControllerConfig, led_elsewhere: i32) -> Harness {
    let mut h = Harness::new(config);
    h.register(1, None, 0);
    h.register(2, None, 0);
    let assignment = (0..PARTITIONS).map(|p| (p, vec![1, 2])).collect();
    h.create_with(CreateTopic {
        name: "t".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment,
        configs: BTreeMap::new(),
    })
    .unwrap();
    // Broker 1 asks to be fenced: every leadership moves to broker 2; then it comes back and
    // broker 2 adds it to every ISR again.
    let hb = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: h.epochs[&1],
        metadata_offset: 0,
        wants_fence: true,
        wants_shutdown: false,
    };
    h.run(Event::BrokerHeartbeat(hb), 1);
    h.heartbeat(1, 2);
    let topic_id = h.c.committed().topic_by_name("t").unwrap().id;
    for partition in 0..PARTITIONS {
        let p = h.partition("t", partition);
        assert_eq!(p.leader, 2);
        let a = AlterPartition {
            broker_id: 2,
            broker_epoch: h.epochs[&2],
            topic_id,
            partition,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![2, 1],
        };
        assert!(matches!(
            h.run(Event::AlterPartition(a), 3),
            Some(Reply::AlterPartition(Ok(_)))
        ));
    }
    let back = (led_elsewhere..PARTITIONS).map(|p| ("t".to_string(), p));
    let e = Event::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: Some(back.collect()),
    };
    h.run(e, 4);
    h
}

/// Heartbeats from both brokers, then the tick at the next check.
fn check(h: &mut Harness) -> Vec<BrokerId> {
    check_at(h, LEADER_IMBALANCE_CHECK_INTERVAL_MS)
}

fn check_at(h: &mut Harness, at: u64) -> Vec<BrokerId> {
    h.heartbeat(1, at);
    h.heartbeat(2, at);
    h.run(Event::Tick, at);
    (0..PARTITIONS)
        .map(|p| h.partition("t", p).leader)
        .collect()
}

#[test]
fn the_auto_rebalance_leaves_a_broker_whose_imbalance_is_within_the_percentage() {
    // 1 of 10 preferred partitions led elsewhere: 10%, not above the default 10%.
    let mut h = imbalanced(ControllerConfig::default(), 1);
    let leaders = check(&mut h);
    assert_eq!(leaders[0], 2, "within the threshold: left alone");
    assert!(leaders[1..].iter().all(|&l| l == 1));
    // 2 of 10: 20%, above it: both move back.
    let mut h = imbalanced(ControllerConfig::default(), 2);
    assert!(check(&mut h).iter().all(|&l| l == 1));
    // A percentage of 0 (what Kafka's KRaft controller does) moves any imbalanced partition.
    let config = ControllerConfig {
        leader_imbalance_per_broker_percentage: 0,
        ..ControllerConfig::default()
    };
    let mut h = imbalanced(config, 1);
    assert!(check(&mut h).iter().all(|&l| l == 1));
}

#[test]
fn the_auto_rebalance_waits_for_its_interval_and_can_be_turned_off() {
    let mut h = imbalanced(ControllerConfig::default(), 5);
    let leaders = check_at(&mut h, LEADER_IMBALANCE_CHECK_INTERVAL_MS - 1);
    assert_eq!(leaders[0], 2, "not before the interval");
    assert_eq!(check(&mut h)[0], 1, "at the interval");
    let config = ControllerConfig {
        auto_leader_rebalance_enable: false,
        ..ControllerConfig::default()
    };
    let mut h = imbalanced(config, 5);
    assert_eq!(check(&mut h)[0], 2, "rebalance disabled");
}

#[test]
fn an_explicit_unclean_election_ignores_the_topic_setting_as_kip_460_says() {
    let mut h = cluster(2);
    h.create("t", 1, 2).unwrap();
    let follower = h.partition("t", 0).replicas[1];
    // Only `follower` (outside the ISR) stays alive; unclean election is off for the topic.
    lose_everyone_but(&mut h, "t", follower, 0);
    let now = TIMEOUT + 1;
    assert_eq!(h.partition("t", 0).leader, NO_LEADER);
    let elect = |kind| Event::ElectLeaders {
        election: kind,
        partitions: Some(vec![("t".into(), 0), ("t".into(), 5), ("u".into(), 0)]),
    };
    let Some(Reply::ElectLeaders(r)) = h.run(elect(ElectionType::Preferred), now + 2) else {
        panic!()
    };
    assert_eq!(r[0].1, Err(ResponseError::PreferredLeaderNotAvailable));
    assert_eq!(r[1].1, Err(ResponseError::UnknownTopicOrPartition));
    assert_eq!(r[2].1, Err(ResponseError::UnknownTopicOrPartition));
    let Some(Reply::ElectLeaders(r)) = h.run(elect(ElectionType::Unclean), now + 3) else {
        panic!()
    };
    assert_eq!(r[0].1, Ok(follower));
    let p = h.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (follower, vec![follower]));
    let Some(Reply::ElectLeaders(r)) = h.run(elect(ElectionType::Unclean), now + 4) else {
        panic!()
    };
    assert_eq!(r[0].1, Err(ResponseError::ElectionNotNeeded));
}

#[test]
fn an_unclean_election_without_a_live_replica_finds_no_eligible_leader() {
    let mut h = cluster(2);
    h.create("t", 1, 2).unwrap();
    // Both replicas go silent: the partition is left without a leader.
    h.run(Event::Tick, TIMEOUT + 1);
    assert!(h.fenced(1) && h.fenced(2));
    assert_eq!(h.partition("t", 0).leader, NO_LEADER);
    let e = Event::ElectLeaders {
        election: ElectionType::Unclean,
        partitions: Some(vec![("t".into(), 0)]),
    };
    assert_eq!(
        h.run(e, TIMEOUT + 2),
        Some(Reply::ElectLeaders(vec![(
            ("t".into(), 0),
            Err(ResponseError::EligibleLeadersNotAvailable)
        )]))
    );
}

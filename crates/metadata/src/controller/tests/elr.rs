//! KIP-966 eligible leader replicas: one test per rule of `partition_change.rs`, plus the
//! clean-shutdown detection at registration. Time is explicit: brokers are fenced by letting
//! their sessions run out (`TIMEOUT`) and a tick.

use std::collections::BTreeMap;

use super::*;
use crate::image::PartitionState;
use crate::records::{ConfigResource, NO_LEADER, Record};

/// A topic with one partition on brokers 1, 2, 3 (in that order) and the given configs.
fn create(h: &mut Harness, min_isr: Option<&str>, unclean: bool) {
    let mut configs = BTreeMap::new();
    if let Some(v) = min_isr {
        configs.insert(MIN_INSYNC_REPLICAS.to_string(), v.to_string());
    }
    if unclean {
        configs.insert(UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), "true".into());
    }
    let assignment = BTreeMap::from([(0, vec![1, 2, 3])]);
    h.create_with(CreateTopic {
        name: "t".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment,
        configs,
    })
    .unwrap();
}

fn alter_isr(h: &mut Harness, isr: Vec<BrokerId>, now: u64) -> PartitionState {
    let p = h.partition("t", 0);
    let a = AlterPartition {
        broker_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr,
    };
    match h.run(Event::AlterPartition(a), now) {
        Some(Reply::AlterPartition(Ok(state))) => state,
        other => panic!("AlterPartition: {other:?}"),
    }
}

/// Every broker's session runs out at once: the tick fences 1, then 2, then 3.
fn fence_everyone(h: &mut Harness) -> u64 {
    let now = TIMEOUT + 1;
    h.run(Event::Tick, now);
    assert!((1..=3).all(|id| h.fenced(id)));
    now
}

/// A new process of broker `id` registers; `clean` says whether it found the clean-shutdown
/// marker with its last epoch. It stays fenced until it heartbeats.
fn restart(h: &mut Harness, id: BrokerId, clean: bool, now: u64) {
    let previous_broker_epoch = if clean {
        h.epochs[&id]
    } else {
        NO_PREVIOUS_BROKER_EPOCH
    };
    let reg = BrokerRegistration {
        broker_id: id,
        incarnation_id: Uuid::from_u128(id as u128 + 5000 + u128::from(now)),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch,
    };
    let Some(Reply::BrokerRegistration(Ok(epoch))) = h.run(Event::BrokerRegistration(reg), now)
    else {
        panic!("registration of {id} failed");
    };
    h.epochs.insert(id, epoch);
}

fn state(p: &PartitionState) -> (BrokerId, Vec<BrokerId>, Vec<BrokerId>, Vec<BrokerId>) {
    (
        p.leader,
        p.isr.clone(),
        p.elr.clone(),
        p.last_known_elr.clone(),
    )
}

#[test]
fn an_isr_shrink_below_min_isr_moves_the_removed_members_to_the_elr() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    let p = alter_isr(&mut h, vec![1, 2], 1);
    assert_eq!(state(&p), (1, vec![1, 2], vec![], vec![]), "at min ISR");
    let p = alter_isr(&mut h, vec![1], 2);
    assert_eq!(state(&p), (1, vec![1], vec![2], vec![]), "below min ISR");
}

#[test]
fn an_isr_back_at_min_isr_clears_the_elr() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    alter_isr(&mut h, vec![1], 1);
    let p = alter_isr(&mut h, vec![1, 3], 2);
    assert_eq!(state(&p), (1, vec![1, 3], vec![], vec![]));
}

#[test]
fn the_last_isr_member_is_not_kept_in_the_isr_when_fenced() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    fence_everyone(&mut h);
    // 1 left while the ISR was still at min ISR (the high watermark could pass it); 2 and 3
    // left below it, and 3 led last.
    let p = h.partition("t", 0);
    assert_eq!(state(&p), (NO_LEADER, vec![], vec![2, 3], vec![3]));
}

#[test]
fn with_the_default_min_isr_the_last_isr_member_joins_the_elr() {
    let mut h = cluster(3);
    create(&mut h, None, false);
    fence_everyone(&mut h);
    let p = h.partition("t", 0);
    assert_eq!(state(&p), (NO_LEADER, vec![], vec![3], vec![3]));
}

#[test]
fn an_elr_member_is_elected_when_the_isr_is_empty() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    let now = fence_everyone(&mut h);
    restart(&mut h, 2, true, now + 1);
    assert_eq!(
        h.partition("t", 0).elr,
        vec![2, 3],
        "a clean restart keeps the ELR"
    );
    h.heartbeat(2, now + 2);
    let p = h.partition("t", 0);
    assert_eq!(state(&p), (2, vec![2], vec![3], vec![]));
    assert_eq!(h.c.unclean_elections(), 0);
}

#[test]
fn a_broker_back_from_an_unclean_shutdown_leaves_the_elr_and_is_not_elected() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    let now = fence_everyone(&mut h);
    restart(&mut h, 2, false, now + 1);
    h.heartbeat(2, now + 2);
    let p = h.partition("t", 0);
    assert_eq!(state(&p), (NO_LEADER, vec![], vec![3], vec![3]));
    // The ELR member that stopped cleanly leads once it is back.
    restart(&mut h, 3, true, now + 3);
    h.heartbeat(3, now + 4);
    assert_eq!(state(&h.partition("t", 0)), (3, vec![3], vec![], vec![]));
}

#[test]
fn a_broker_back_from_an_unclean_shutdown_leaves_the_isr_without_joining_the_elr() {
    let mut h = cluster(3);
    create(&mut h, Some("3"), false);
    // Broker 3 is alive in the image when its new process registers (same incarnation, so not
    // a duplicate): without the marker it cannot stay in the ISR, nor become eligible.
    let reg = BrokerRegistration {
        broker_id: 3,
        incarnation_id: Uuid::from_u128(3 + 1000),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: NO_PREVIOUS_BROKER_EPOCH,
    };
    h.run(Event::BrokerRegistration(reg.clone()), 1);
    assert_eq!(state(&h.partition("t", 0)), (1, vec![1, 2], vec![], vec![]));
    // The same restart with the marker: 3 left the ISR below min ISR, so it is eligible.
    let mut h = cluster(3);
    create(&mut h, Some("3"), false);
    let reg = BrokerRegistration {
        previous_broker_epoch: h.epochs[&3],
        ..reg
    };
    h.run(Event::BrokerRegistration(reg), 1);
    assert_eq!(
        state(&h.partition("t", 0)),
        (1, vec![1, 2], vec![3], vec![])
    );
}

#[test]
fn the_last_known_leader_is_elected_uncleanly_when_the_isr_and_elr_are_empty() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    let now = fence_everyone(&mut h);
    for id in 1..=3 {
        restart(&mut h, id, false, now + 1);
    }
    assert_eq!(
        state(&h.partition("t", 0)),
        (NO_LEADER, vec![], vec![], vec![3])
    );
    h.heartbeat(1, now + 2);
    h.heartbeat(2, now + 2);
    assert_eq!(
        h.partition("t", 0).leader,
        NO_LEADER,
        "1 and 2 never were eligible"
    );
    assert_eq!(h.c.unclean_elections(), 0);
    h.heartbeat(3, now + 3);
    assert_eq!(state(&h.partition("t", 0)), (3, vec![3], vec![], vec![]));
    assert_eq!(h.c.unclean_elections(), 1, "reported");
}

#[test]
fn a_replica_outside_the_isr_and_elr_leads_only_where_the_topic_allows_unclean_election() {
    for unclean in [false, true] {
        let mut h = cluster(3);
        create(&mut h, Some("2"), unclean);
        let now = fence_everyone(&mut h);
        // The last known leader (3) stays away; 1 and 2 come back without the marker.
        for id in 1..=2 {
            restart(&mut h, id, false, now + 1);
            h.heartbeat(id, now + 2);
        }
        let p = h.partition("t", 0);
        if unclean {
            assert_eq!(state(&p), (1, vec![1], vec![], vec![]));
            assert_eq!(h.c.unclean_elections(), 1);
        } else {
            assert_eq!(state(&p), (NO_LEADER, vec![], vec![3], vec![3]));
            assert_eq!(h.c.unclean_elections(), 0);
        }
    }
}

#[test]
fn min_insync_replicas_is_the_topics_or_the_default_at_most_the_replica_count() {
    let config = ControllerConfig {
        min_insync_replicas: 2,
        ..ControllerConfig::default()
    };
    let mut h = Harness::new(config);
    for id in 1..=3 {
        h.register(id, None, 0);
    }
    create(&mut h, None, false);
    let p = h.partition("t", 0);
    assert_eq!(h.c.min_isr("t", &p), 2, "the cluster default");
    let set = |h: &mut Harness, v: &str| {
        let c = AlterConfig {
            resource: ConfigResource::Topic("t".into()),
            entries: vec![(MIN_INSYNC_REPLICAS.to_string(), Some(v.to_string()))],
        };
        h.run(Event::AlterConfigs(vec![c]), 1);
    };
    set(&mut h, "1");
    assert_eq!(h.c.min_isr("t", &p), 1, "the topic's own value");
    set(&mut h, "5");
    assert_eq!(h.c.min_isr("t", &p), 3, "at most the replica count");
    set(&mut h, "0");
    assert_eq!(h.c.min_isr("t", &p), 1, "at least one");
}

#[test]
fn the_partition_elr_record_follows_its_partition_change_in_one_batch() {
    let mut h = cluster(3);
    create(&mut h, Some("2"), false);
    alter_isr(&mut h, vec![1, 2], 1);
    let p = h.partition("t", 0);
    let a = AlterPartition {
        broker_id: 1,
        broker_epoch: h.epochs[&1],
        topic_id: h.c.committed().topic_by_name("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: vec![1],
    };
    let fx = h.c.handle(Event::AlterPartition(a), 2);
    assert!(matches!(
        &fx.records[..],
        [Record::PartitionChange(_), Record::PartitionElr(e)] if e.elr == vec![2]
    ));
}

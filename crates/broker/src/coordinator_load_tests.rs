//! The rules of following leadership, and the cluster the services' tests run on: node 2
//! with brokers 1 and 3 registered (no processes), an internal topic placed by partition, and
//! leadership moved by deltas as the controller would commit them.

use std::collections::BTreeMap;

use streamforge_metadata::controller::{
    BrokerHeartbeat, BrokerRegistration, CreateTopic, Event, Reply,
};
use streamforge_metadata::{MetadataDelta, PartitionDelta};

use super::*;
use crate::replica_manager::MetadataOptions;

pub(crate) const NODE: i32 = 2;

fn register_peer(rm: &ReplicaManager, id: i32) {
    let registration = BrokerRegistration {
        broker_id: id,
        incarnation_id: uuid::Uuid::from_u128(id as u128 + 1),
        endpoints: Vec::new(),
        rack: None,
    };
    let (reply, _) = rm.request(Event::BrokerRegistration(registration)).unwrap();
    let Reply::BrokerRegistration(Ok(broker_epoch)) = reply else {
        panic!("registration of {id} refused: {reply:?}");
    };
    let heartbeat = BrokerHeartbeat {
        broker_id: id,
        broker_epoch,
        metadata_offset: i64::MAX,
        wants_fence: false,
        wants_shutdown: false,
    };
    rm.request(Event::BrokerHeartbeat(heartbeat)).unwrap();
}

/// Node 2 of three, with `topic` placed as `replicas` (by partition; the first one leads).
pub(crate) fn cluster(dir: &std::path::Path, topic: &str, replicas: &[&[i32]]) -> ReplicaManager {
    let options = MetadataOptions {
        node_id: NODE,
        ..MetadataOptions::default()
    };
    let rm = ReplicaManager::open_with(dir, options, Default::default(), None).unwrap();
    register_peer(&rm, 1);
    register_peer(&rm, 3);
    let spec = CreateTopic {
        name: topic.into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment: (0..).zip(replicas).map(|(p, r)| (p, r.to_vec())).collect(),
        configs: BTreeMap::new(),
    };
    rm.create_topic_spec(spec, false).unwrap();
    rm
}

/// Applies a delta that makes `leader` lead `topic`-`partition` under the next leader epoch
/// (the replicas stay: this broker keeps its log as a follower).
pub(crate) fn move_leader(rm: &ReplicaManager, topic: &str, partition: i32, leader: i32) {
    let image = rm.image();
    let t = image.topic_by_name(topic).unwrap();
    let local = rm.partition(topic, partition).unwrap();
    let mut before = t.partitions[&partition].clone();
    before.leader_epoch = local.leader_epoch();
    before.leader = local.leader_id().unwrap_or(NODE);
    let mut after = before.clone();
    after.leader = leader;
    after.leader_epoch += 1;
    let mut delta = MetadataDelta::default();
    let moved = PartitionDelta {
        topic: topic.into(),
        before: Some(before),
        after: Some(after),
    };
    delta.partitions.insert((t.id, partition), moved);
    assert!(rm.apply_delta(&delta).is_empty());
}

#[test]
fn follow_loads_new_leaderships_and_unloads_lost_or_renewed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let rm = cluster(dir.path(), "internal", &[&[2, 1], &[1, 2], &[3, 1]]);
    let mut loads = Vec::new();
    let led = led_partitions(&rm, "internal").unwrap();
    assert!(led[0].is_some() && led[1].is_none() && led[2].is_none());
    let (unload, jobs) = follow(&mut loads, &led);
    assert!(unload.is_empty());
    assert_eq!(jobs.iter().map(|j| j.index).collect::<Vec<_>>(), [0]);
    assert!(matches!(
        loads[0].serving(),
        Err(ResponseError::CoordinatorLoadInProgress)
    ));
    assert!(matches!(
        loads[1].serving(),
        Err(ResponseError::NotCoordinator)
    ));
    assert!(still_loading(&loads, &jobs[0]));
    // Nothing changed: nothing to do.
    assert!(matches!(follow(&mut loads, &led), (u, j) if u.is_empty() && j.is_empty()));

    // Leadership leaves while loading: the load no longer counts.
    move_leader(&rm, "internal", 0, 1);
    let led = led_partitions(&rm, "internal").unwrap();
    let (unload, jobs_after) = follow(&mut loads, &led);
    assert_eq!((unload, jobs_after.len()), (vec![0], 0));
    assert!(!still_loading(&loads, &jobs[0]));

    // Back under a newer epoch: loaded again; a later epoch reloads.
    move_leader(&rm, "internal", 0, NODE);
    let led = led_partitions(&rm, "internal").unwrap();
    let (_, jobs) = follow(&mut loads, &led);
    let job = jobs[0].clone();
    loads[0] = Load::Loaded {
        partition: job.partition.clone(),
        epoch: job.epoch,
    };
    assert!(loads[0].appendable().is_ok());
    // The partition moves on to a newer epoch before the coordinator looks: appends refused.
    job.partition.make_leader(job.epoch + 1).unwrap();
    assert!(matches!(
        loads[0].appendable(),
        Err(ResponseError::NotCoordinator)
    ));
    let led = led_partitions(&rm, "internal").unwrap();
    let (unload, jobs) = follow(&mut loads, &led);
    assert_eq!((unload, jobs[0].epoch), (vec![0], job.epoch + 1));
    rm.close_all();
}

#[test]
fn a_refused_coordinator_append_is_not_coordinator() {
    assert_eq!(
        append_error(&PartitionError::NotLeaderOrFollower),
        ResponseError::NotCoordinator
    );
    assert_eq!(
        append_error(&PartitionError::NotEnoughReplicas { isr: 1, min: 2 }),
        ResponseError::CoordinatorNotAvailable
    );
}

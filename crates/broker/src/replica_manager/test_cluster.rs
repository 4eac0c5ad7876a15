//! The cluster the unit tests run on: node 2 of three, with brokers 1 and 3 registered and
//! unfenced in its image (their processes are not needed; nothing talks to them), topics
//! placed by partition, and leadership moved by deltas as the controller would commit them.

use std::collections::BTreeMap;

use streamforge_metadata::controller::{
    BrokerHeartbeat, BrokerRegistration, CreateTopic, Event, Reply,
};
use streamforge_metadata::{MetadataDelta, PartitionDelta};

use crate::replica_manager::{MetadataOptions, ReplicaManager};

/// This broker's id.
pub(crate) const NODE: i32 = 2;

/// Opens (or reopens) node 2's replica manager in `dir`, without registering its peers.
pub(crate) fn open_node(dir: &std::path::Path) -> ReplicaManager {
    let options = MetadataOptions {
        node_id: NODE,
        ..MetadataOptions::default()
    };
    ReplicaManager::open_with(dir, options, Default::default(), None).unwrap()
}

/// Registers broker `id` with `rm`'s controller and unfences it.
pub(crate) fn register_peer(rm: &ReplicaManager, id: i32) {
    let registration = BrokerRegistration {
        broker_id: id,
        incarnation_id: uuid::Uuid::from_u128(id as u128 + 1),
        endpoints: Vec::new(),
        rack: None,
        previous_broker_epoch: -1,
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
    let (reply, _) = rm.request(Event::BrokerHeartbeat(heartbeat)).unwrap();
    assert!(
        matches!(reply, Reply::BrokerHeartbeat(Ok(r)) if !r.is_fenced),
        "{reply:?}"
    );
}

/// Creates `topic` placed as `replicas` (by partition; the first one leads).
pub(crate) fn create_placed(rm: &ReplicaManager, topic: &str, replicas: &[&[i32]]) {
    let spec = CreateTopic {
        name: topic.into(),
        num_partitions: -1,
        replication_factor: -1,
        assignment: (0..).zip(replicas).map(|(p, r)| (p, r.to_vec())).collect(),
        configs: BTreeMap::new(),
    };
    rm.create_topic_spec(spec, false).unwrap();
}

/// Node 2 of three, with `topic` placed as `replicas` (by partition; the first one leads).
pub(crate) fn cluster(dir: &std::path::Path, topic: &str, replicas: &[&[i32]]) -> ReplicaManager {
    let rm = open_node(dir);
    register_peer(&rm, 1);
    register_peer(&rm, 3);
    create_placed(&rm, topic, replicas);
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

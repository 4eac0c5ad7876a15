use std::collections::BTreeMap;

use crate::partition::PartitionRole;
use crate::producer_ids::ProducerIdBlocks;
use crate::replica_manager::ReplicaManager;

fn open(dir: &std::path::Path) -> ReplicaManager {
    ReplicaManager::open(dir, Default::default(), None).unwrap()
}

#[test]
fn topics_live_in_the_metadata_log_and_come_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rm = open(dir.path());
    let t = rm
        .create_topic("a", 2, BTreeMap::new(), false)
        .unwrap()
        .unwrap();
    rm.create_topic("b", 1, BTreeMap::new(), false).unwrap();
    rm.create_partitions("a", 3, false).unwrap();
    let configs = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
    rm.set_topic_configs("a", configs.clone(), false).unwrap();
    rm.delete_topic("b").unwrap();
    assert!(!dir.path().join("b-0").exists(), "deleted with its data");
    let image = rm.image();
    let a = image.topic(t.id).unwrap();
    assert_eq!(a.partitions.len(), 3);
    assert!(
        a.partitions
            .values()
            .all(|p| p.leader == 1 && p.replicas == [1])
    );
    rm.close_all();
    drop(rm);
    let rm = open(dir.path());
    let a = rm.topic("a").unwrap();
    assert_eq!((a.id, a.partitions.len()), (t.id, 3));
    assert_eq!(a.configs, configs);
    assert!(rm.topic("b").is_none());
    let epoch = rm.image().topic(t.id).unwrap().partitions[&0].leader_epoch;
    let p = rm.partition("a", 2).unwrap();
    assert_eq!((p.role(), p.leader_epoch()), (PartitionRole::Leader, epoch));
    rm.close_all();
}

#[test]
fn producer_id_blocks_come_from_the_controller_and_never_repeat_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rm = open(dir.path());
    let blocks = crate::metadata_service::ControllerBlocks {
        metadata: rm.metadata().clone(),
        clock: streamforge_protocol::clock::SystemClock::shared(),
    };
    let (a, len) = blocks.next_block().unwrap();
    let (b, _) = blocks.next_block().unwrap();
    assert_eq!(b, a + len);
    rm.close_all();
    drop((blocks, rm));
    let rm = open(dir.path());
    let blocks = crate::metadata_service::ControllerBlocks {
        metadata: rm.metadata().clone(),
        clock: streamforge_protocol::clock::SystemClock::shared(),
    };
    assert!(blocks.next_block().unwrap().0 >= b + len);
    rm.close_all();
}

#[test]
fn a_replication_factor_above_the_live_brokers_is_refused_by_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let rm = open(dir.path());
    let spec = streamforge_metadata::controller::CreateTopic {
        name: "r3".into(),
        num_partitions: 1,
        replication_factor: 3,
        assignment: BTreeMap::new(),
        configs: BTreeMap::new(),
    };
    let e = rm.create_topic_spec(spec, false).err().unwrap();
    assert_eq!(
        e.kafka_code(),
        kafka_protocol::ResponseError::InvalidReplicationFactor.code()
    );
    assert!(rm.topic("r3").is_none());
    rm.close_all();
}

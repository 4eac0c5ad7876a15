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
    assert_eq!((a.id, a.partition_count(), a.hosted_count()), (t.id, 3, 3));
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

/// Node 2 of three: brokers 1 and 3 are registered and unfenced in its image (their
/// processes are not needed; nothing here talks to them).
mod sparse {
    use std::sync::Arc;

    use streamforge_metadata::{MetadataDelta, PartitionDelta};

    use crate::partition::PartitionRole;
    use crate::replica_manager::test_cluster::{NODE, cluster, create_placed, open_node};
    use crate::replica_manager::{LookupError, ReplicaManager};

    fn hosted(rm: &ReplicaManager, name: &str) -> Vec<i32> {
        let t = rm.topic(name).unwrap();
        t.hosted().map(|p| p.index).collect()
    }

    /// Partitions 1 and 3 of 4 live on node 2; 0 and 2 on brokers 1 and 3.
    const GAPS: &[&[i32]] = &[&[1], &[2], &[3], &[2]];

    #[test]
    fn a_broker_opens_exactly_the_partitions_placed_on_it_with_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let rm = cluster(dir.path(), "t", GAPS);
        create_placed(&rm, "elsewhere", &[&[1], &[3]]);
        let t = rm.topic("t").unwrap();
        assert_eq!((t.partition_count(), hosted(&rm, "t")), (4, vec![1, 3]));
        for (p, dir_exists) in [(0, false), (1, true), (2, false), (3, true)] {
            assert_eq!(
                dir.path().join(format!("t-{p}")).exists(),
                dir_exists,
                "t-{p}"
            );
        }
        assert_eq!(t.lookup(0).err(), Some(LookupError::NotHosted));
        assert_eq!(t.lookup(4).err(), Some(LookupError::Unknown));
        assert_eq!(t.lookup(-1).err(), Some(LookupError::Unknown));
        assert_eq!(rm.partition("t", 3).unwrap().role(), PartitionRole::Leader);
        assert_eq!(rm.partition("t", 1).unwrap().role(), PartitionRole::Leader);
        // A topic with no partition here is still known, with its partition count.
        let e = rm.topic("elsewhere").unwrap();
        assert_eq!((e.partition_count(), e.hosted_count()), (2, 0));
        assert!(rm.partition_exists("elsewhere", 1) && !rm.partition_exists("elsewhere", 2));
        rm.close_all();
        drop(rm);

        let rm = open_node(dir.path());
        assert_eq!(rm.topic("t").unwrap().partition_count(), 4);
        assert_eq!(hosted(&rm, "t"), [1, 3], "after a restart");
        assert_eq!(rm.topic("elsewhere").unwrap().partition_count(), 2);
        assert_eq!(rm.partition("t", 3).unwrap().role(), PartitionRole::Leader);
        rm.close_all();
    }

    #[test]
    fn a_delta_that_adds_a_partition_here_opens_just_that_one() {
        let dir = tempfile::tempdir().unwrap();
        let rm = cluster(dir.path(), "t", GAPS);
        let before = rm.partition("t", 1).unwrap();
        let assignment = Some(vec![vec![1], vec![NODE]]);
        rm.create_partitions_assigned("t", 6, assignment, false)
            .unwrap();
        let t = rm.topic("t").unwrap();
        assert_eq!((t.partition_count(), hosted(&rm, "t")), (6, vec![1, 3, 5]));
        assert_eq!(t.lookup(4).err(), Some(LookupError::NotHosted));
        assert!(!dir.path().join("t-4").exists());
        assert_eq!(rm.partition("t", 5).unwrap().role(), PartitionRole::Leader);
        assert!(Arc::ptr_eq(&before, t.partition(1).unwrap()), "kept open");
        // Partitions added on other brokers only: the count follows, nothing opens here.
        rm.create_partitions_assigned("t", 7, Some(vec![vec![3]]), false)
            .unwrap();
        assert_eq!(rm.topic("t").unwrap().partition_count(), 7);
        assert_eq!(hosted(&rm, "t"), [1, 3, 5]);
        rm.close_all();
    }

    #[test]
    fn a_delta_that_moves_a_partition_away_stops_and_deletes_that_log_only() {
        let dir = tempfile::tempdir().unwrap();
        let rm = cluster(dir.path(), "t", GAPS);
        let kept = rm.partition("t", 1).unwrap();
        let image = rm.image();
        let topic = image.topic_by_name("t").unwrap();
        let before = topic.partitions[&3].clone();
        let mut after = before.clone();
        after.replicas = vec![1];
        after.isr = vec![1];
        after.leader = 1;
        after.leader_epoch += 1;
        let mut delta = MetadataDelta::default();
        let moved = PartitionDelta {
            topic: "t".into(),
            before: Some(before),
            after: Some(after),
        };
        delta.partitions.insert((topic.id, 3), moved);
        assert!(rm.apply_delta(&delta).is_empty());
        let t = rm.topic("t").unwrap();
        assert_eq!((t.partition_count(), hosted(&rm, "t")), (4, vec![1]));
        assert_eq!(t.lookup(3).err(), Some(LookupError::NotHosted));
        assert!(!dir.path().join("t-3").exists(), "its log is deleted");
        assert!(dir.path().join("t-1").exists());
        assert!(Arc::ptr_eq(&kept, t.partition(1).unwrap()));
        assert_eq!(kept.role(), PartitionRole::Leader);
        rm.close_all();
    }
}

#[test]
fn the_high_watermark_checkpoint_is_written_per_interval_and_at_shutdown() {
    use crate::partition::{Acks, AppendParams};
    use crate::replica_manager::hw_checkpoint;
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
    let dir = tempfile::tempdir().unwrap();
    let rm = open(dir.path());
    rm.create_topic("t", 2, BTreeMap::new(), false).unwrap();
    let p = rm.partition("t", 1).unwrap();
    let append = || {
        let params = AppendParams { acks: Acks::Leader };
        p.append(&mut build_simple(BatchSpec::default(), 4, 10), params)
            .unwrap();
    };
    let file = || hw_checkpoint::read(dir.path()).unwrap().unwrap_or_default();
    let hw = |entries: &hw_checkpoint::HighWatermarks, index| entries[&("t".to_string(), index)];
    append();
    rm.set_hw_checkpoint_interval_ms(5_000);
    rm.tick(1_000, 0);
    assert_eq!((hw(&file(), 0), hw(&file(), 1)), (0, 4));
    append();
    rm.tick(5_999, 0);
    assert_eq!(hw(&file(), 1), 4, "not before the interval");
    rm.tick(6_000, 0);
    assert_eq!(hw(&file(), 1), 8);
    append();
    rm.close_all();
    assert_eq!(hw(&file(), 1), 12, "written at shutdown");
    drop((p, rm));
    // A partition alone in its ISR opens at its log end whatever the file says.
    let lower = hw_checkpoint::HighWatermarks::from([(("t".to_string(), 1), 3)]);
    hw_checkpoint::write(dir.path(), &lower).unwrap();
    let rm = open(dir.path());
    assert_eq!(rm.partition("t", 1).unwrap().high_watermark().unwrap(), 12);
    // A damaged file is reported and read as empty; the broker still starts.
    rm.close_all();
    drop(rm);
    std::fs::write(dir.path().join(hw_checkpoint::HW_CHECKPOINT_FILE), "0\n9\n").unwrap();
    let rm = open(dir.path());
    assert_eq!(rm.partition("t", 1).unwrap().high_watermark().unwrap(), 12);
    rm.close_all();
    assert_eq!(hw(&file(), 1), 12, "the damaged file is replaced");
}

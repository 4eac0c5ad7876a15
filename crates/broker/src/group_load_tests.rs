//! The group coordinator follows `__consumer_offsets` leadership: node 2 leads partition 0,
//! follows partition 1 and does not host partition 2; leadership of 0 moves away and back.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use streamforge_coordinator as coord;
use streamforge_coordinator::{CoordinatorConfig, OFFSETS_TOPIC};

use crate::coordinator_load::led_partitions;
use crate::group_service::{GroupService, GroupsConfig};
use crate::replica_manager::ReplicaManager;
use crate::replica_manager::test_cluster::{NODE, cluster, move_leader};

const NOT_COORDINATOR: i16 = ResponseError::NotCoordinator.code();
const LOADING: i16 = ResponseError::CoordinatorLoadInProgress.code();

fn open(dir: &std::path::Path) -> (ReplicaManager, Arc<GroupService>) {
    let rm = cluster(dir, OFFSETS_TOPIC, &[&[NODE, 1], &[1, NODE], &[3, 1]]);
    let config = GroupsConfig {
        coordinator: CoordinatorConfig {
            offsets_topic_partitions: 3,
            group_initial_rebalance_delay_ms: 60_000,
            ..CoordinatorConfig::default()
        },
        ..GroupsConfig::default()
    };
    let service = Arc::new(GroupService::open(&rm, config).unwrap());
    (rm, service)
}

/// A group id stored in `partition` of 3.
fn group_on(partition: i32) -> String {
    (0..)
        .map(|i| format!("group-{i}"))
        .find(|g| coord::partition_for_group(g, 3) == partition)
        .unwrap()
}

/// An admin commit of `t`-0 at `offset`: the partition's code, or the group's error.
fn commit(service: &GroupService, group: &str, offset: i64) -> Result<i16, i16> {
    let request = coord::OffsetCommitRequest {
        group_id: group.into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        api_version: 8,
        topics: vec![coord::CommitTopic {
            name: "t".into(),
            partitions: vec![coord::CommitPartition {
                partition: 0,
                offset,
                leader_epoch: -1,
                metadata: None,
            }],
        }],
    };
    let (results, stored) =
        service.with_group(group, |c, now, out| c.commit_offsets(now, request, out))?;
    Ok(stored.err().unwrap_or(results[0].1[0].1))
}

fn committed(service: &GroupService, group: &str) -> Result<i64, i16> {
    service.read_group(group, |c| {
        let fetched = c.fetch_offsets(group, None);
        fetched
            .topics
            .first()
            .map_or(-1, |t| t.partitions[0].offset)
    })
}

fn follow(rm: &ReplicaManager, service: &GroupService) -> Vec<crate::coordinator_load::LoadJob> {
    service.follow_leadership(&led_partitions(rm, OFFSETS_TOPIC).unwrap())
}

#[test]
fn only_groups_of_partitions_led_here_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    assert_eq!(commit(&service, &group_on(0), 5), Ok(0));
    assert_eq!(committed(&service, &group_on(0)), Ok(5));
    // A follower's partition and one hosted elsewhere: NOT_COORDINATOR, nothing created.
    for p in [1, 2] {
        assert_eq!(
            commit(&service, &group_on(p), 5),
            Err(NOT_COORDINATOR),
            "{p}"
        );
        assert_eq!(committed(&service, &group_on(p)), Err(NOT_COORDINATOR));
    }
    assert_eq!(service.read(|c| c.group_count()), 1);
    rm.close_all();
}

#[test]
fn leadership_away_unloads_and_back_loads_the_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let group = group_on(0);
    assert_eq!(commit(&service, &group, 7), Ok(0));

    move_leader(&rm, OFFSETS_TOPIC, 0, 1);
    assert!(follow(&rm, &service).is_empty());
    assert_eq!(committed(&service, &group), Err(NOT_COORDINATOR));
    assert_eq!(commit(&service, &group, 8), Err(NOT_COORDINATOR));
    assert_eq!(
        service.read(|c| c.group_count()),
        0,
        "its groups are dropped"
    );

    move_leader(&rm, OFFSETS_TOPIC, 0, NODE);
    let jobs = follow(&rm, &service);
    assert_eq!(jobs.len(), 1);
    // Until the replay is done: COORDINATOR_LOAD_IN_PROGRESS, and ListGroups says so.
    assert_eq!(committed(&service, &group), Err(LOADING));
    assert_eq!(commit(&service, &group, 8), Err(LOADING));
    assert!(service.loading());
    service.load(jobs.into_iter().next().unwrap());
    assert!(!service.loading());
    assert_eq!(committed(&service, &group), Ok(7), "replayed from the log");
    assert_eq!(commit(&service, &group, 9), Ok(0));
    rm.close_all();
}

#[test]
fn a_load_finished_after_leadership_left_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let group = group_on(0);
    assert_eq!(commit(&service, &group, 3), Ok(0));
    move_leader(&rm, OFFSETS_TOPIC, 0, 1);
    follow(&rm, &service);
    move_leader(&rm, OFFSETS_TOPIC, 0, NODE);
    let job = follow(&rm, &service).remove(0);
    move_leader(&rm, OFFSETS_TOPIC, 0, 1);
    assert!(follow(&rm, &service).is_empty());
    service.load(job);
    assert_eq!(committed(&service, &group), Err(NOT_COORDINATOR));
    assert_eq!(service.read(|c| c.group_count()), 0);
    rm.close_all();
}

#[test]
fn a_write_under_a_newer_leader_epoch_than_the_load_is_not_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let group = group_on(0);
    let partition = rm.partition(OFFSETS_TOPIC, 0).unwrap();
    // Re-elected here before the coordinator looked: the loaded state may be stale.
    partition.make_leader(partition.leader_epoch() + 1).unwrap();
    assert_eq!(commit(&service, &group, 3), Ok(NOT_COORDINATOR));
    // Once it follows, the partition is reloaded under the new epoch and served.
    let job = follow(&rm, &service).remove(0);
    service.load(job);
    assert_eq!(commit(&service, &group, 3), Ok(0));
    rm.close_all();
}

#[tokio::test]
async fn a_parked_join_ends_with_not_coordinator_when_its_partition_moves_away() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let join = coord::JoinGroupRequest {
        group_id: group_on(0),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: String::new(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![coord::Protocol {
            name: "range".into(),
            metadata: bytes::Bytes::new(),
        }],
        client_id: "c".into(),
        client_host: String::new(),
        require_known_member_id: false,
    };
    let parked = tokio::spawn({
        let service = service.clone();
        async move { service.join(join).await }
    });
    // Parked in the initial rebalance delay (60 s).
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while service.inner.lock().waiters.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    move_leader(&rm, OFFSETS_TOPIC, 0, 1);
    follow(&rm, &service);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), parked)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.error_code, NOT_COORDINATOR);
    rm.close_all();
}

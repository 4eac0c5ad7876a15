//! The leader side of the reassignment throttles inside `Partition`: a throttled read gives a
//! follower outside the ISR no records but still counts its position; an in-sync follower is
//! never throttled (Kafka's `shouldLeaderThrottle`).

use std::sync::Arc;

use streamforge_log::LogConfig;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

use crate::partition::replica::{LeaderAndIsr, ReplicaConfig};
use crate::partition::{
    Acks, AppendParams, FetchIsolation, FetchParams, FollowerFetch, Partition, RemoteTier,
};

fn leader_with_followers(dir: &std::path::Path) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from("t");
    let p = Arc::new(
        Partition::create(&topic, 0, dir, LogConfig::default(), RemoteTier::default()).unwrap(),
    );
    let state = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 0,
        // Broker 3 is being added (a reassignment): outside the ISR.
        replicas: vec![1, 2, 3],
        isr: vec![1, 2],
    };
    let config = ReplicaConfig {
        replica_lag_time_max_ms: 10_000,
        min_insync_replicas: 1,
    };
    p.make_leader_replicated(1, state, config, Arc::new(|_| {}), 0)
        .unwrap();
    let batch = &mut build_simple(BatchSpec::default(), 10, 20);
    p.append(batch, AppendParams { acks: Acks::Leader })
        .unwrap();
    p
}

/// Bytes of records `replica_id` gets from offset 0, throttled or not.
fn fetched_bytes(p: &Partition, replica_id: i32, throttled: bool) -> usize {
    let params = FetchParams {
        fetch_offset: 0,
        max_bytes: 1 << 20,
        min_one_message: true,
        isolation: FetchIsolation::LogEnd,
        replica_id,
    };
    let fetch = FollowerFetch {
        replica_id,
        current_leader_epoch: 1,
        last_fetched_epoch: -1,
        log_start_offset: 0,
        throttled,
    };
    let read = p.read_for_follower(params, fetch, 1).unwrap();
    assert!(read.diverging_epoch.is_none());
    read.read.records.unwrap().bytes
}

#[test]
fn a_throttled_read_gives_a_follower_outside_the_isr_no_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = leader_with_followers(dir.path());
    assert_eq!(fetched_bytes(&p, 3, true), 0);
    // Its position counted all the same (the leader knows where the new replica is).
    let progress = p.replica_progress(1).unwrap();
    let f3 = progress.followers.iter().find(|f| f.id == 3).unwrap();
    assert_eq!(f3.log_end_offset, Some(0));
    assert!(fetched_bytes(&p, 3, false) > 0, "unthrottled it reads");
}

#[test]
fn an_in_sync_follower_is_never_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let p = leader_with_followers(dir.path());
    let unthrottled = fetched_bytes(&p, 2, false);
    assert!(unthrottled > 0);
    assert_eq!(fetched_bytes(&p, 2, true), unthrottled);
}

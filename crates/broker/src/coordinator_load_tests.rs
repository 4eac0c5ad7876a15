//! The rules of following leadership, on the cluster of
//! [`crate::replica_manager::test_cluster`].

use super::*;
use crate::replica_manager::test_cluster::{NODE, cluster, move_leader};

#[test]
fn follow_loads_new_leaderships_and_unloads_lost_or_renewed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let rm = cluster(dir.path(), "internal", &[&[2, 1], &[1, 2], &[3, 1]]);
    let mut loads = Vec::new();
    let led = led_partitions(&rm, "internal").unwrap();
    assert!(led[0].is_some() && led[1].is_none() && led[2].is_none());
    let (unload, jobs) = follow(&mut loads, &led, "internal");
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
    assert!(matches!(follow(&mut loads, &led, "internal"), (u, j) if u.is_empty() && j.is_empty()));

    // Leadership leaves while loading: the load no longer counts.
    move_leader(&rm, "internal", 0, 1);
    let led = led_partitions(&rm, "internal").unwrap();
    let (unload, jobs_after) = follow(&mut loads, &led, "internal");
    assert_eq!((unload, jobs_after.len()), (vec![0], 0));
    assert!(!still_loading(&loads, &jobs[0]));

    // Back under a newer epoch: loaded again; a later epoch reloads.
    move_leader(&rm, "internal", 0, NODE);
    let led = led_partitions(&rm, "internal").unwrap();
    let (_, jobs) = follow(&mut loads, &led, "internal");
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
    let (unload, jobs) = follow(&mut loads, &led, "internal");
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

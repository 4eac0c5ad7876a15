//! Transactional offset commits in `__consumer_offsets` (`group_txn.rs`): the group check and
//! the hold are one step (KIP-447); the offsets are the producer's transactional batch, pending
//! across a restart until its marker commits or drops them; a stale producer epoch is refused.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use kafka_protocol::ResponseError;
use streamforge_coordinator::{CoordinatorConfig, OFFSETS_TOPIC, TxnOffset};
use streamforge_log::TxnMarker;
use streamforge_protocol::control::ControlType;

use crate::group_service::{GroupService, GroupsConfig};
use crate::replica_manager::ReplicaManager;

fn offsets(offset: i64) -> Vec<TxnOffset> {
    vec![TxnOffset {
        topic: "t".into(),
        partition: 0,
        offset,
        leader_epoch: -1,
        metadata: "m".into(),
    }]
}

/// One broker with a one-partition `__consumer_offsets` (created and loaded by the service).
fn open(dir: &std::path::Path) -> (Arc<ReplicaManager>, Arc<GroupService>) {
    let rm = Arc::new(ReplicaManager::open(dir, Default::default(), None).unwrap());
    let config = GroupsConfig {
        coordinator: CoordinatorConfig {
            offsets_topic_partitions: 1,
            ..CoordinatorConfig::default()
        },
        ..GroupsConfig::default()
    };
    let service = Arc::new(GroupService::open(&rm, config).unwrap());
    (rm, service)
}

/// A TxnOffsetCommit whose transaction check passed, under the guard taken before it.
fn guarded(
    service: &GroupService,
    group: &str,
    producer: (i64, i16),
    offsets: Vec<TxnOffset>,
    check: impl FnOnce(&streamforge_coordinator::GroupCoordinator) -> Result<(), i16>,
) -> Result<(), i16> {
    let guard = service.start_txn_offsets_verification(group, producer, false)?;
    service.txn_offset_commit(group, producer, guard, offsets, check)
}

fn unchecked(_: &streamforge_coordinator::GroupCoordinator) -> Result<(), i16> {
    Ok(())
}

fn marker(service: &GroupService, rm: &ReplicaManager, pid: i64, epoch: i16, commit: bool) {
    let partition = rm.partition(OFFSETS_TOPIC, 0).unwrap();
    let kind = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    let m = TxnMarker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch: 0,
        kind,
    };
    service.write_txn_marker(&partition, m).unwrap();
}

fn committed(service: &GroupService, group: &str) -> i64 {
    service
        .read_group(group, |c| {
            let fetched = c.fetch_offsets(group, Some(&[("t".to_string(), vec![0])]));
            fetched.topics[0].partitions[0].offset
        })
        .unwrap()
}

fn pending(service: &GroupService, group: &str) -> bool {
    service
        .pending_txn_partitions(group)
        .contains(&("t".to_string(), 0))
}

#[test]
fn a_rebalance_never_comes_between_the_group_check_and_the_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let (checked_tx, checked_rx) = mpsc::channel();
    // A producer whose consumer passed the group's check commits offsets to its transaction.
    let commit = std::thread::spawn({
        let service = service.clone();
        move || {
            guarded(&service, "g", (7, 0), offsets(11), |_| {
                // Checked: the rebalance starts now and waits for the group's lock.
                checked_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
        }
    });
    checked_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // The rebalance (anything behind the group coordinator's lock): once through, the new
    // member's OffsetFetch (`require_stable`) finds the offsets pending.
    let seen = pending(&service, "g");
    assert_eq!(commit.join().unwrap(), Ok(()));
    assert!(
        seen,
        "the rebalance finished before the checked offsets were held"
    );
    // A zombie refused by the check holds nothing and appends nothing.
    let end = rm
        .partition(OFFSETS_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    let zombie = guarded(&service, "g", (8, 0), offsets(12), |_| {
        Err(ResponseError::IllegalGeneration.code())
    });
    assert_eq!(zombie, Err(ResponseError::IllegalGeneration.code()));
    let after = rm
        .partition(OFFSETS_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    assert_eq!(after, end);
    assert!(service.read(|c| c.pending_txn_offsets().all(|((_, pid), _)| *pid == 7)));
    rm.close_all();
}

#[test]
fn pending_offsets_survive_a_restart_and_commit_with_the_marker_after_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (rm, service) = open(dir.path());
        guarded(&service, "g", (7, 0), offsets(5), unchecked).unwrap();
        marker(&service, &rm, 7, 0, true);
        assert_eq!(committed(&service, "g"), 5);
        // The next transaction's offsets, and another producer's to abort.
        guarded(&service, "g", (7, 0), offsets(10), unchecked).unwrap();
        guarded(&service, "h", (8, 0), offsets(99), unchecked).unwrap();
        assert_eq!(committed(&service, "g"), 5, "not before the marker");
        // A snapshot in the middle keeps what the open transactions wrote.
        service.snapshot_all();
        rm.close_all();
    }
    let (rm, service) = open(dir.path());
    assert_eq!(committed(&service, "g"), 5);
    assert!(pending(&service, "g"), "still pending after the restart");
    assert!(pending(&service, "h"));
    marker(&service, &rm, 7, 0, true);
    marker(&service, &rm, 8, 0, false);
    assert_eq!(committed(&service, "g"), 10);
    assert!(!pending(&service, "g") && !pending(&service, "h"));
    assert!(
        service
            .read_group("h", |c| c.fetch_offsets("h", None).topics.is_empty())
            .unwrap(),
        "aborted: nothing committed"
    );
    rm.close_all();
    // And the markers replay the same way.
    let (rm, service) = open(dir.path());
    assert_eq!(committed(&service, "g"), 10);
    assert!(!pending(&service, "g") && !pending(&service, "h"));
    rm.close_all();
}

#[test]
fn a_stale_producer_epoch_is_refused_after_the_abort_that_fenced_it() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    guarded(&service, "g", (7, 3), offsets(5), unchecked).unwrap();
    // The transaction timed out: the coordinator aborted it under a bumped epoch.
    marker(&service, &rm, 7, 4, false);
    assert!(!pending(&service, "g"));
    // The producer's TxnOffsetCommit, checked before the abort, lands after it: refused.
    let late = guarded(&service, "g", (7, 3), offsets(6), unchecked);
    assert_eq!(late, Err(ResponseError::InvalidProducerEpoch.code()));
    assert!(
        !pending(&service, "g"),
        "nothing held for the aborted transaction"
    );
    assert_eq!(committed(&service, "g"), -1);
    // The producer at its new epoch goes on.
    guarded(&service, "g", (7, 4), offsets(7), unchecked).unwrap();
    assert!(pending(&service, "g"));
    rm.close_all();
}

#[test]
fn a_marker_between_the_transaction_check_and_the_append_refuses_the_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    // The guard is taken, then the producer's transaction is checked with its coordinator...
    let guard = service
        .start_txn_offsets_verification("g", (7, 0), false)
        .unwrap();
    assert!(
        guard.is_some(),
        "no transaction of the producer is open here"
    );
    // ...which answers, and then the producer's own EndTxn (transaction version 1: no epoch
    // bump) lands its marker first.
    marker(&service, &rm, 7, 0, false);
    let end = rm
        .partition(OFFSETS_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    let late = service.txn_offset_commit("g", (7, 0), guard, offsets(5), unchecked);
    assert_eq!(late, Err(ResponseError::InvalidTxnState.code()));
    assert!(!pending(&service, "g"), "nothing held");
    let after = rm
        .partition(OFFSETS_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    assert_eq!(
        after, end,
        "nothing appended: no transaction left open on the partition"
    );
    // The next transaction, checked under a fresh guard, goes through.
    let guard = service
        .start_txn_offsets_verification("g", (7, 0), false)
        .unwrap();
    service
        .txn_offset_commit("g", (7, 0), guard, offsets(6), unchecked)
        .unwrap();
    assert!(pending(&service, "g"));
    rm.close_all();
}

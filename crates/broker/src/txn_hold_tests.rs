//! TxnOffsetCommit's group check and the hold of its offsets are one step (KIP-447): a
//! rebalance comes before the check or after the hold, never in between.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use kafka_protocol::ResponseError;
use streamforge_coordinator::TxnOffset;
use streamforge_coordinator::txn::TxnConfig;

use crate::replica_manager::ReplicaManager;
use crate::txn_service::TxnService;

fn offsets() -> Vec<TxnOffset> {
    vec![TxnOffset {
        topic: "t".into(),
        partition: 0,
        offset: 11,
        leader_epoch: -1,
        metadata: String::new(),
    }]
}

/// The group's check as the group coordinator makes it: the consumer's generation must be the
/// group's (behind the group coordinator's lock, here a mutex of its own).
fn check_generation(
    group: &parking_lot::Mutex<i32>,
    consumer_generation: i32,
    hold: &mut dyn FnMut(),
    between: impl FnOnce(),
) -> Result<(), i16> {
    let generation = group.lock();
    if *generation != consumer_generation {
        return Err(ResponseError::IllegalGeneration.code());
    }
    between();
    hold();
    Ok(())
}

#[test]
fn a_rebalance_never_comes_between_the_group_check_and_the_hold() {
    let dir = tempfile::tempdir().unwrap();
    let rm = Arc::new(ReplicaManager::open(dir.path(), Default::default(), None).unwrap());
    let config = TxnConfig {
        state_partitions: 1,
        ..TxnConfig::default()
    };
    let service = Arc::new(TxnService::open(&rm, config).unwrap());
    let pending = service.pending_offsets();
    let group = Arc::new(parking_lot::Mutex::new(1));
    let (checked_tx, checked_rx) = mpsc::channel();
    // A producer whose consumer is of generation 1 commits offsets to its transaction.
    let commit = std::thread::spawn({
        let (rm, service, group) = (rm.clone(), service.clone(), group.clone());
        move || {
            service.add_pending_offsets(&rm, "tid", "g", 7, offsets(), |hold| {
                check_generation(&group, 1, hold, || {
                    // Checked: the rebalance starts now and waits for the group's lock.
                    checked_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                })
            })
        }
    });
    checked_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // The rebalance: generation 2, the committing consumer is no member any more.
    *group.lock() = 2;
    // Once it is done, the new member's OffsetFetch (`require_stable`) finds the offsets
    // pending: it waits for the transaction instead of reading the old committed offset.
    let seen = crate::txn_pending::pending_partitions(&pending.lock(), "g");
    assert_eq!(commit.join().unwrap(), Ok(()));
    assert!(
        seen.contains(&("t".to_string(), 0)),
        "the rebalance finished before the checked offsets were held"
    );
    // After the rebalance the zombie's commit is refused and nothing is held for it.
    let zombie = service.add_pending_offsets(&rm, "tid", "g", 8, offsets(), |hold| {
        check_generation(&group, 1, hold, || {})
    });
    assert_eq!(zombie, Err(ResponseError::IllegalGeneration.code()));
    assert!(!pending.lock().contains_key(&("g".to_string(), 8)));
    rm.close_all();
}

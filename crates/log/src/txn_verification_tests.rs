//! Verification guards: cleared by the producer's next transactional batch (data or marker),
//! kept by a transaction version 2 marker at the guard's epoch, shared by concurrent checks,
//! bounded.

use streamforge_protocol::batch::TRANSACTIONAL;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::control::{ControlType, build_marker};

use super::*;

fn data(pid: i64, epoch: i16, transactional: bool) -> Vec<u8> {
    build_simple(
        BatchSpec {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: 0,
            attributes: if transactional { TRANSACTIONAL } else { 0 },
            ..BatchSpec::default()
        },
        1,
        10,
    )
}

fn applied(v: &mut TxnVerifications, bytes: &[u8]) {
    v.on_append(&RecordBatch::parse(bytes).unwrap());
}

#[test]
fn a_marker_or_data_batch_of_the_producer_clears_its_guard() {
    let mut v = TxnVerifications::default();
    let guard = v.start(5, 0, false, 0);
    assert!(v.holds(5, guard));
    assert_eq!(
        v.start(5, 0, false, 1),
        guard,
        "a second check shares the guard"
    );
    // Other producers' batches and non-transactional ones leave it.
    applied(&mut v, &build_marker(6, 0, 0, ControlType::Abort, 0));
    applied(&mut v, &data(5, 0, false));
    assert!(v.holds(5, guard));
    // The producer's marker (its transaction ended): gone, and a new guard is another one.
    applied(&mut v, &build_marker(5, 0, 0, ControlType::Commit, 0));
    assert!(!v.holds(5, guard));
    let next = v.start(5, 0, false, 2);
    assert_ne!(next, guard);
    // Its first data batch (the transaction is open in the log now): gone too.
    applied(&mut v, &data(5, 0, true));
    assert!(!v.holds(5, next));
    assert_eq!(v.len(), 0);
}

#[test]
fn a_transaction_version_2_marker_at_the_guards_epoch_keeps_it() {
    let mut v = TxnVerifications::default();
    // The next transaction's epoch (3) is the previous one's markers' epoch.
    let guard = v.start(5, 3, true, 0);
    applied(&mut v, &build_marker(5, 3, 0, ControlType::Commit, 0));
    assert!(v.holds(5, guard));
    // A marker at another epoch (a fencing abort) clears it.
    applied(&mut v, &build_marker(5, 4, 0, ControlType::Abort, 0));
    assert!(!v.holds(5, guard));
    // Version 1 guards are cleared by any marker.
    let guard = v.start(7, 3, false, 0);
    applied(&mut v, &build_marker(7, 3, 0, ControlType::Commit, 0));
    assert!(!v.holds(7, guard));
}

#[test]
fn guards_are_bounded_and_expire() {
    let mut v = TxnVerifications::default();
    let first = v.start(0, 0, false, 0);
    for pid in 1..VERIFICATIONS_MAX as i64 {
        v.start(pid, 0, false, pid);
    }
    assert_eq!(v.len(), VERIFICATIONS_MAX);
    let newest = v.start(VERIFICATIONS_MAX as i64, 0, false, VERIFICATIONS_MAX as i64);
    assert_eq!(v.len(), VERIFICATIONS_MAX);
    assert!(!v.holds(0, first), "the oldest went");
    assert!(v.holds(VERIFICATIONS_MAX as i64, newest));
    v.expire(VERIFICATIONS_MAX as i64 + 10, 11);
    assert_eq!(v.len(), 1, "only the newest is younger than 11 ms");
}

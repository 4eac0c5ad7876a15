//! `transactional.id.expiration.ms` under a simulated clock: idle ids with nothing open are
//! removed by a tombstone at the cleanup interval; an open transaction never expires.

use super::*;

const EXPIRATION_MS: i64 = 10_000;
const INTERVAL_MS: i64 = 1_000;

fn coordinator() -> TxnCoordinator {
    TxnCoordinator::new(TxnConfig {
        transactional_id_expiration_ms: EXPIRATION_MS,
        remove_expired_interval_ms: INTERVAL_MS,
        ..TxnConfig::default()
    })
}

fn ids() -> impl FnMut() -> Option<i64> {
    let mut next = 1000;
    move || {
        next += 1;
        Some(next)
    }
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_string(), p)
}

/// The transactional ids tombstoned by `out`.
fn tombstones(out: &TxnEffects) -> Vec<String> {
    out.appends
        .iter()
        .filter(|a| a.record.value.is_none())
        .map(|a| records::decode_key(&a.record.key).unwrap())
        .collect()
}

/// Ticks every 100 ms from `from` to `to` (inclusive), collecting the effects.
fn run_clock(c: &mut TxnCoordinator, from: i64, to: i64) -> TxnEffects {
    let mut out = TxnEffects::default();
    let mut now = from;
    while now <= to {
        c.tick(now, &mut out);
        now += 100;
    }
    out
}

#[test]
fn idle_ids_expire_with_a_tombstone_and_come_back_with_a_new_producer_id() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    // "empty": initialised only. "committed" / "aborted": one transaction each.
    let (empty_pid, _) = c
        .init_producer_id(0, "empty", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    for (tid, commit) in [("committed", true), ("aborted", false)] {
        let (pid, epoch) = c
            .init_producer_id(0, tid, 60_000, None, &mut alloc, &mut out)
            .unwrap();
        c.add_partitions(100, tid, pid, epoch, &[tp("a", 0)], &mut out)
            .unwrap();
        c.end_txn(200, tid, pid, epoch, commit, &mut out).unwrap();
        c.markers_written(tid, 2_000, &mut out);
    }
    assert_eq!(c.get("committed").unwrap().state, TxnState::CompleteCommit);
    assert_eq!(c.get("aborted").unwrap().state, TxnState::CompleteAbort);

    // Not yet: "empty" was last updated at 0, so it may go from 10,000 on; the check runs
    // every second.
    let early = run_clock(&mut c, 100, EXPIRATION_MS - 100);
    assert!(tombstones(&early).is_empty());
    assert_eq!(c.all().count(), 3);
    let out = run_clock(&mut c, EXPIRATION_MS, EXPIRATION_MS + INTERVAL_MS);
    assert_eq!(tombstones(&out), vec!["empty".to_string()]);
    assert!(c.get("empty").is_none());
    // The completed ones were last updated at 2,000 (their Complete record).
    let out = run_clock(
        &mut c,
        EXPIRATION_MS + INTERVAL_MS + 100,
        EXPIRATION_MS + 2_000 + INTERVAL_MS,
    );
    let mut gone = tombstones(&out);
    gone.sort();
    assert_eq!(gone, vec!["aborted".to_string(), "committed".to_string()]);
    assert_eq!(c.all().count(), 0);
    for a in &out.appends {
        assert_eq!(
            a.partition,
            c.partition_for(&records::decode_key(&a.record.key).unwrap())
        );
    }

    // The id starts again: a fresh producer id at epoch 0.
    let mut out = TxnEffects::default();
    let (pid, epoch) = c
        .init_producer_id(20_000, "empty", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    assert_ne!(pid, empty_pid);
    assert_eq!(epoch, 0);
}

#[test]
fn an_open_transaction_never_expires() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    // A timeout far beyond the expiration: the transaction stays open all along.
    let (pid, epoch) = c
        .init_producer_id(0, "open", 900_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(0, "open", pid, epoch, &[tp("a", 0)], &mut out)
        .unwrap();
    let out = run_clock(&mut c, 100, 5 * EXPIRATION_MS);
    assert!(tombstones(&out).is_empty());
    assert_eq!(c.get("open").unwrap().state, TxnState::Ongoing);

    // Prepared, its markers not written: not expired either.
    let mut out = TxnEffects::default();
    c.end_txn(5 * EXPIRATION_MS, "open", pid, epoch, true, &mut out)
        .unwrap();
    let out = run_clock(&mut c, 5 * EXPIRATION_MS, 10 * EXPIRATION_MS);
    assert!(tombstones(&out).is_empty());
    assert_eq!(c.get("open").unwrap().state, TxnState::PrepareCommit);

    // Completed: the expiration counts from the Complete record.
    let mut out = TxnEffects::default();
    c.markers_written("open", 10 * EXPIRATION_MS, &mut out);
    let out = run_clock(&mut c, 10 * EXPIRATION_MS, 11 * EXPIRATION_MS - 100);
    assert!(tombstones(&out).is_empty());
    let out = run_clock(&mut c, 11 * EXPIRATION_MS, 11 * EXPIRATION_MS + INTERVAL_MS);
    assert_eq!(tombstones(&out), vec!["open".to_string()]);
}

#[test]
fn a_tombstone_replays_to_the_id_being_gone() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    c.init_producer_id(0, "gone", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.init_producer_id(5_000, "kept", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.tick(EXPIRATION_MS + INTERVAL_MS, &mut out);
    assert!(c.get("gone").is_none());
    assert!(c.get("kept").is_some());
    let mut replayed = coordinator();
    for a in &out.appends {
        replayed.replay(&a.record).unwrap();
    }
    assert!(replayed.get("gone").is_none());
    assert_eq!(replayed.get("kept"), c.get("kept"));
}

#[test]
fn the_check_runs_at_the_interval_and_sets_the_timers_deadline() {
    let mut c = coordinator();
    let mut out = TxnEffects::default();
    assert_eq!(c.next_deadline_ms(), None, "no tick yet");
    c.tick(500, &mut out);
    assert_eq!(c.next_deadline_ms(), Some(500 + INTERVAL_MS));
    c.tick(500 + INTERVAL_MS, &mut out);
    assert_eq!(c.next_deadline_ms(), Some(500 + 2 * INTERVAL_MS));
}

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
    out.expirations
        .iter()
        .flat_map(|b| &b.records)
        .inspect(|r| assert!(r.value.is_none()))
        .map(|r| records::decode_key(&r.key).unwrap())
        .collect()
}

/// One tick whose tombstones are all appended (the broker reports each batch written).
fn tick_written(c: &mut TxnCoordinator, now: i64, out: &mut TxnEffects) {
    let before = out.expirations.len();
    c.tick(now, out);
    for batch in &out.expirations[before..] {
        assert_eq!(c.tombstones_written(batch), batch.ids.len());
    }
}

/// Ticks every 100 ms from `from` to `to` (inclusive), collecting the effects; every
/// tombstone is appended.
fn run_clock(c: &mut TxnCoordinator, from: i64, to: i64) -> TxnEffects {
    let mut out = TxnEffects::default();
    let mut now = from;
    while now <= to {
        tick_written(c, now, &mut out);
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
    for b in &out.expirations {
        for r in &b.records {
            assert_eq!(
                b.partition,
                c.partition_for(&records::decode_key(&r.key).unwrap())
            );
        }
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
    tick_written(&mut c, EXPIRATION_MS + INTERVAL_MS, &mut out);
    assert!(c.get("gone").is_none());
    assert!(c.get("kept").is_some());
    let mut replayed = coordinator();
    let written = out.appends.iter().map(|a| &a.record);
    for r in written.chain(out.expirations.iter().flat_map(|b| &b.records)) {
        replayed.replay(r).unwrap();
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

#[test]
fn an_id_stays_until_its_tombstone_is_written_and_a_failed_write_is_tried_at_the_next_check() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    c.init_producer_id(0, "idle", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    // The append of the tombstone fails: nothing is reported written.
    let mut failed = TxnEffects::default();
    c.tick(EXPIRATION_MS + INTERVAL_MS, &mut failed);
    assert_eq!(tombstones(&failed), vec!["idle".to_string()]);
    assert!(
        c.get("idle").is_some(),
        "kept while its tombstone is not in the log"
    );
    assert_eq!(c.all().count(), 1, "still listed");
    // Not before the next check, then again.
    let mut early = TxnEffects::default();
    c.tick(EXPIRATION_MS + INTERVAL_MS + 500, &mut early);
    assert!(early.expirations.is_empty());
    let out = run_clock(
        &mut c,
        EXPIRATION_MS + 2 * INTERVAL_MS,
        EXPIRATION_MS + 2 * INTERVAL_MS,
    );
    assert_eq!(tombstones(&out), vec!["idle".to_string()]);
    assert!(c.get("idle").is_none(), "gone once written");
}

#[test]
fn an_id_that_changed_before_its_tombstone_was_written_is_kept() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    let (pid, _) = c
        .init_producer_id(0, "reused", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    let mut expiry = TxnEffects::default();
    c.tick(EXPIRATION_MS + INTERVAL_MS, &mut expiry);
    assert_eq!(expiry.expirations.len(), 1);
    // The producer comes back between the batch and its append: a new epoch.
    let (pid2, epoch) = c
        .init_producer_id(
            EXPIRATION_MS + INTERVAL_MS,
            "reused",
            60_000,
            None,
            &mut alloc,
            &mut out,
        )
        .unwrap();
    assert_eq!((pid2, epoch), (pid, 1));
    assert_eq!(c.tombstones_written(&expiry.expirations[0]), 0);
    assert_eq!(c.get("reused").unwrap().producer_epoch, 1);
}

#[test]
fn tombstones_are_batched_per_partition_within_the_state_logs_batch_size() {
    const BATCH_BYTES_MAX: usize = 8 << 10;
    let mut c = TxnCoordinator::new(TxnConfig {
        transactional_id_expiration_ms: EXPIRATION_MS,
        remove_expired_interval_ms: INTERVAL_MS,
        state_partitions: 3,
        state_batch_bytes_max: BATCH_BYTES_MAX,
        ..TxnConfig::default()
    });
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    c.tick(0, &mut out);
    // Long ids (up to 1,000 bytes) so that each partition takes several batches.
    let names: Vec<String> = (0..120)
        .map(|i| format!("{i:04}-{}", "x".repeat(i * 8)))
        .collect();
    for tid in &names {
        c.init_producer_id(0, tid, 60_000, None, &mut alloc, &mut out)
            .unwrap();
    }
    // One id on a partition of its own whose key alone is past the bound: a batch of one.
    let huge = "h".repeat(BATCH_BYTES_MAX);
    c.init_producer_id(0, &huge, 60_000, None, &mut alloc, &mut out)
        .unwrap();

    let mut expiry = TxnEffects::default();
    c.tick(EXPIRATION_MS + INTERVAL_MS, &mut expiry);
    let mut per_partition = std::collections::BTreeMap::<i32, usize>::new();
    let mut seen: Vec<String> = Vec::new();
    for b in &expiry.expirations {
        assert_eq!(b.ids.len(), b.records.len());
        assert!(!b.ids.is_empty());
        let encoded = crate::records::encode_one_batch(&b.records, 0).unwrap();
        assert!(
            encoded.len() <= b.bytes_max(),
            "the estimate bounds the batch"
        );
        // One batch: its length field covers the whole buffer; no producer, no sequence.
        let batch_len = i32::from_be_bytes(encoded[8..12].try_into().unwrap()) as usize;
        assert_eq!(batch_len + 12, encoded.len());
        assert_eq!(i64::from_be_bytes(encoded[43..51].try_into().unwrap()), -1);
        assert_eq!(i32::from_be_bytes(encoded[53..57].try_into().unwrap()), -1);
        let decoded = crate::records::decode_batches(encoded.freeze()).unwrap();
        assert_eq!(decoded, b.records);
        if b.records.len() > 1 {
            assert!(b.bytes_max() <= BATCH_BYTES_MAX, "{} bytes", b.bytes_max());
        }
        for (id, r) in b.ids.iter().zip(&b.records) {
            let key = records::decode_key(&r.key).unwrap();
            assert_eq!(key, id.transactional_id);
            assert_eq!(c.partition_for(&key), b.partition);
            seen.push(key);
        }
        *per_partition.entry(b.partition).or_default() += 1;
    }
    assert!(per_partition.values().all(|&n| n > 1), "{per_partition:?}");
    seen.sort();
    let mut all: Vec<String> = names.clone();
    all.push(huge);
    all.sort();
    assert_eq!(seen, all, "every id once");
    assert_eq!(
        c.all().count(),
        all.len(),
        "nothing removed before the appends"
    );
    for b in &expiry.expirations {
        c.tombstones_written(b);
    }
    assert_eq!(c.all().count(), 0);
}

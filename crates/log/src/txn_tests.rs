//! Transactions in the log: LSO, markers, the aborted-transaction index through roll, restart
//! (clean and unclean), truncation and retention, and a model-based property test.

use proptest::prelude::*;
use streamforge_protocol::batch::TRANSACTIONAL;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::control::ControlType;

use crate::txn_index::{AbortedTxn, txn_index_path};
use crate::{Log, LogConfig, LogError, TxnMarker};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// Append a transactional batch of `n` records for `pid` (its sequence `seq`).
fn txn_data(log: &mut Log, pid: i64, epoch: i16, seq: i32, n: usize) -> i64 {
    let mut b = build_simple(
        BatchSpec {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            attributes: TRANSACTIONAL,
            ..BatchSpec::default()
        },
        n,
        40,
    );
    let info = log.append_as_leader(&mut b, 0, 10).unwrap();
    let hw = log.log_end_offset();
    log.set_high_watermark(hw);
    info.first_offset
}

fn plain(log: &mut Log) -> i64 {
    let mut b = build_simple(BatchSpec::default(), 1, 40);
    let info = log.append_as_leader(&mut b, 0, 10).unwrap();
    let hw = log.log_end_offset();
    log.set_high_watermark(hw);
    info.first_offset
}

fn marker(log: &mut Log, pid: i64, epoch: i16, kind: ControlType) -> Result<i64, LogError> {
    let m = TxnMarker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch: 0,
        kind,
    };
    let info = log.append_txn_marker(m, 0, 10)?;
    let hw = log.log_end_offset();
    log.set_high_watermark(hw);
    Ok(info.first_offset)
}

#[test]
fn commit_holds_the_lso_until_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    plain(&mut log);
    let first = txn_data(&mut log, 7, 0, 0, 3);
    plain(&mut log);
    assert_eq!(log.last_stable_offset(), first);
    assert_eq!(log.high_watermark(), 5);
    assert_eq!(log.open_transactions(), vec![(first, 7)]);
    let m = marker(&mut log, 7, 0, ControlType::Commit).unwrap();
    assert_eq!(m, 5);
    assert_eq!(log.last_stable_offset(), 6);
    assert!(log.aborted_transactions(0, 6).is_empty());
    assert!(log.open_transactions().is_empty());
    // The producer state follows the marker: sequences continue after it.
    assert_eq!(txn_data(&mut log, 7, 0, 3, 1), 6);
}

#[test]
fn aborts_are_indexed_and_survive_clean_and_unclean_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    let a = txn_data(&mut log, 1, 0, 0, 2);
    let b = txn_data(&mut log, 2, 0, 0, 2);
    let ma = marker(&mut log, 1, 0, ControlType::Abort).unwrap();
    // Producer 2 still holds the LSO; the abort records it.
    assert_eq!(log.last_stable_offset(), b);
    let expected_a = AbortedTxn {
        producer_id: 1,
        first_offset: a,
        last_offset: ma,
        last_stable_offset: b,
    };
    assert_eq!(log.aborted_transactions(0, 100), vec![expected_a]);
    let active = *log.segment_base_offsets().last().unwrap();
    assert!(txn_index_path(dir.path(), active).exists());
    log.close().unwrap();

    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.aborted_transactions(0, 100), vec![expected_a]);
    assert_eq!(log.open_transactions(), vec![(b, 2)]);
    let mb = marker(&mut log, 2, 0, ControlType::Abort).unwrap();
    drop(log); // crash: recovery replays the markers

    // An unclean open after removing the index files and producer snapshots replays the whole
    // log and rebuilds the index from the markers.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext == "txnindex" || ext == "snapshot" {
            std::fs::remove_file(path).unwrap();
        }
    }
    let log = Log::open(dir.path(), config(), 0).unwrap();
    let all = log.aborted_transactions(0, 100);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1].first_offset, b);
    assert_eq!(all[1].last_offset, mb);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
    assert!(txn_index_path(dir.path(), active).exists());
    // Fetches of a range after an abort do not report it; a range it overlaps does.
    assert!(log.aborted_transactions(mb + 1, 100).is_empty());
    assert_eq!(log.aborted_transactions(mb, 100).len(), 1);
}

#[test]
fn open_transaction_survives_roll_crash_truncation_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    let first = txn_data(&mut log, 9, 0, 0, 1);
    for _ in 0..60 {
        plain(&mut log);
    }
    assert!(log.segment_count() > 2, "small segments roll");
    assert_eq!(log.last_stable_offset(), first);
    drop(log); // crash: the snapshot at the last roll holds the open transaction
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    log.set_high_watermark(i64::MAX);
    assert_eq!(log.last_stable_offset(), first);
    let m = marker(&mut log, 9, 0, ControlType::Abort).unwrap();
    assert_eq!(log.aborted_transactions(0, i64::MAX).len(), 1);
    // Truncating below the marker reopens the transaction and drops its index entry.
    log.truncate_to(m).unwrap();
    assert!(log.aborted_transactions(0, i64::MAX).is_empty());
    assert_eq!(log.open_transactions(), vec![(first, 9)]);
    let m = marker(&mut log, 9, 0, ControlType::Abort).unwrap();
    // Retention of every segment before the marker's drops nothing still readable...
    let before = log.segment_base_offsets();
    let marker_segment = *before.iter().rev().find(|&&b| b <= m).unwrap();
    log.delete_records_before(marker_segment).unwrap();
    assert_eq!(log.aborted_transactions(marker_segment, i64::MAX).len(), 1);
    // ...and deleting the marker's segment deletes its index file.
    plain(&mut log);
    for _ in 0..40 {
        plain(&mut log);
    }
    let end = log.high_watermark();
    let last_base = *log.segment_base_offsets().last().unwrap();
    log.delete_records_before(last_base.min(end)).unwrap();
    assert!(log.aborted_transactions(0, i64::MAX).is_empty());
    assert!(!txn_index_path(dir.path(), marker_segment).exists());
}

#[test]
fn a_marker_from_an_older_epoch_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    txn_data(&mut log, 3, 2, 0, 1);
    assert!(matches!(
        marker(&mut log, 3, 1, ControlType::Commit),
        Err(LogError::InvalidProducerEpoch(_))
    ));
    // A bumped epoch (the coordinator aborting for a fenced producer) is accepted.
    marker(&mut log, 3, 3, ControlType::Abort).unwrap();
    assert!(log.open_transactions().is_empty());
}

#[test]
fn a_marker_from_an_older_coordinator_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    let with_coordinator = |log: &mut Log, coordinator_epoch: i32| {
        let m = TxnMarker {
            producer_id: 5,
            producer_epoch: 0,
            coordinator_epoch,
            kind: ControlType::Commit,
        };
        log.append_txn_marker(m, 0, 10)
    };
    txn_data(&mut log, 5, 0, 0, 1);
    with_coordinator(&mut log, 4).unwrap();
    txn_data(&mut log, 5, 0, 1, 1);
    let fenced = with_coordinator(&mut log, 3).unwrap_err();
    assert!(matches!(
        fenced,
        LogError::CoordinatorFenced {
            marker: 3,
            current: 4
        }
    ));
    assert_eq!(fenced.kafka_code(), 52, "TRANSACTION_COORDINATOR_FENCED");
    assert_eq!(
        log.open_transactions().len(),
        1,
        "the fenced marker ended nothing"
    );
    with_coordinator(&mut log, 5).unwrap();
    assert!(log.open_transactions().is_empty());
}

/// A COMMIT marker of producer 5 (epoch 0) from coordinator epoch `coordinator_epoch`.
fn commit_from(log: &mut Log, coordinator_epoch: i32) -> Result<i64, LogError> {
    let m = TxnMarker {
        producer_id: 5,
        producer_epoch: 0,
        coordinator_epoch,
        kind: ControlType::Commit,
    };
    let info = log.append_txn_marker(m, 0, 10)?;
    let hw = log.log_end_offset();
    log.set_high_watermark(hw);
    Ok(info.first_offset)
}

fn coordinator_epoch(log: &Log) -> i32 {
    let producers = log.producers();
    producers
        .iter()
        .find(|e| e.producer_id == 5)
        .unwrap()
        .coordinator_epoch
}

fn remove_snapshots(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

#[test]
fn the_coordinator_epoch_survives_restarts_with_and_without_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    txn_data(&mut log, 5, 0, 0, 1);
    commit_from(&mut log, 4).unwrap();
    txn_data(&mut log, 5, 0, 1, 1);
    // Clean close: the snapshot at the log end holds the producer, nothing is replayed.
    log.close().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(coordinator_epoch(&log), 4);
    let fenced = commit_from(&mut log, 3).unwrap_err();
    assert!(
        matches!(
            fenced,
            LogError::CoordinatorFenced {
                marker: 3,
                current: 4
            }
        ),
        "{fenced:?}"
    );
    assert_eq!(
        log.open_transactions().len(),
        1,
        "the fenced marker ended nothing"
    );
    commit_from(&mut log, 6).unwrap();
    txn_data(&mut log, 5, 0, 2, 1);

    // No snapshot at all: recovery replays every batch and takes the epoch from the markers.
    drop(log);
    remove_snapshots(dir.path());
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(coordinator_epoch(&log), 6);
    assert!(matches!(
        commit_from(&mut log, 5).unwrap_err(),
        LogError::CoordinatorFenced {
            marker: 5,
            current: 6
        }
    ));
    commit_from(&mut log, 6).unwrap();
    assert!(log.open_transactions().is_empty());
}

#[test]
fn a_marker_between_the_verification_and_the_append_voids_the_guard() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    // Transaction 1 is open: no guard is needed.
    txn_data(&mut log, 5, 0, 0, 1);
    assert_eq!(log.start_txn_verification(5, 0, false, 0), None);
    assert!(log.txn_verified(5, 0, None, None));
    marker(&mut log, 5, 0, ControlType::Commit).unwrap();
    // The next batch is checked with the coordinator under a guard...
    let guard = log.start_txn_verification(5, 0, false, 0);
    assert!(guard.is_some());
    assert!(log.txn_verified(5, 0, None, guard));
    // ...and a marker of the producer lands before the append: the guard no longer holds.
    marker(&mut log, 5, 0, ControlType::Abort).unwrap();
    assert!(!log.txn_verified(5, 0, None, guard));
    assert!(!log.txn_verified(5, 0, Some((1, 1)), guard));
    // A retry of a batch already in the log goes on to be answered as a duplicate, as Kafka
    // looks for duplicates first.
    assert!(log.txn_verified(5, 0, Some((0, 0)), guard));
    assert!(
        !log.txn_verified(5, 0, None, None),
        "no open transaction, no guard"
    );
    // A stale epoch is left to the append's INVALID_PRODUCER_EPOCH.
    txn_data(&mut log, 5, 1, 0, 1);
    assert!(log.txn_verified(5, 0, None, None));
}

#[test]
fn a_follower_copies_the_leaders_markers() {
    let dir = tempfile::tempdir().unwrap();
    let mut follower = Log::open(dir.path(), config(), 0).unwrap();
    let data = build_simple(
        BatchSpec {
            producer_id: 9,
            attributes: TRANSACTIONAL,
            ..BatchSpec::default()
        },
        2,
        40,
    );
    follower.append_as_follower(&data).unwrap();
    assert_eq!(follower.open_transactions(), vec![(0, 9)]);
    let mut m = streamforge_protocol::control::build_marker(9, 0, 1, ControlType::Commit, 10);
    streamforge_protocol::batch::RecordBatchMut::parse(&mut m)
        .unwrap()
        .set_base_offset(2);
    follower.append_as_follower(&m).unwrap();
    assert!(
        follower.open_transactions().is_empty(),
        "the marker ended it"
    );
    assert_eq!(follower.log_end_offset(), 3);
}

#[derive(Debug, Clone)]
enum Op {
    Data(i64),
    Plain,
    End(i64, bool),
    Restart(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0i64..3).prop_map(Op::Data),
        1 => Just(Op::Plain),
        2 => ((0i64..3), any::<bool>()).prop_map(|(p, c)| Op::End(p, c)),
        1 => any::<bool>().prop_map(Op::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Against a model: the LSO is the first offset of the oldest open transaction (or the
    /// HW), and the aborted index holds exactly the aborted transactions, across restarts.
    #[test]
    fn lso_and_aborted_index_match_a_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Some(Log::open(dir.path(), config(), 0).unwrap());
        let mut open: std::collections::BTreeMap<i64, i64> = Default::default();
        let mut seqs = [0i32; 3];
        let mut aborted: Vec<(i64, i64, i64)> = Vec::new();
        for op in ops {
            let l = log.as_mut().unwrap();
            match op {
                Op::Data(p) => {
                    let at = txn_data(l, p, 0, seqs[p as usize], 2);
                    seqs[p as usize] += 2;
                    open.entry(p).or_insert(at);
                }
                Op::Plain => { plain(l); }
                Op::End(p, commit) => {
                    let kind = if commit { ControlType::Commit } else { ControlType::Abort };
                    let at = marker(l, p, 0, kind).unwrap();
                    if let Some(first) = open.remove(&p) && !commit {
                        aborted.push((p, first, at));
                    }
                }
                Op::Restart(clean) => {
                    let l = log.take().unwrap();
                    if clean { l.close().unwrap() } else { drop(l) }
                    let mut l = Log::open(dir.path(), config(), 0).unwrap();
                    let hw = l.log_end_offset();
                    l.set_high_watermark(hw);
                    log = Some(l);
                }
            }
            let l = log.as_ref().unwrap();
            let want_lso = open.values().min().copied().unwrap_or(l.high_watermark());
            prop_assert_eq!(l.last_stable_offset(), want_lso);
            let got: Vec<_> = l.aborted_transactions(0, i64::MAX).iter()
                .map(|e| (e.producer_id, e.first_offset, e.last_offset)).collect();
            prop_assert_eq!(&got, &aborted);
        }
    }
}

fn segment_bases(dir: &std::path::Path) -> Vec<i64> {
    let mut out: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Tiered storage uploads `<next base>.snapshot` with a segment: the state at its end. A
/// follower restarted empty at that offset loads it, so an ABORT of a transaction begun below
/// it ends the transaction there (indexed, LSO held meanwhile) and an idempotent producer's
/// retry of a batch below it is still a duplicate.
#[test]
fn a_follower_restarted_at_a_segment_end_takes_the_producer_state_from_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = Log::open(dir.path(), config(), 0).unwrap();
    let mut idem = build_simple(
        BatchSpec {
            producer_id: 5,
            base_sequence: 0,
            ..BatchSpec::default()
        },
        2,
        40,
    );
    let retry = idem.clone();
    leader.append_as_leader(&mut idem, 0, 10).unwrap();
    let txn_first = txn_data(&mut leader, 7, 0, 0, 3);
    while segment_bases(dir.path()).len() < 3 {
        plain(&mut leader);
    }
    let bases = segment_bases(dir.path());
    let end = bases[1]; // the end of the first segment
    assert!(end > txn_first);
    // Gone (snapshots are not fsynced): rebuilt from the state below it and the batches between.
    std::fs::remove_file(dir.path().join(format!("{end:020}.snapshot"))).unwrap();
    let path = leader.ensure_producer_snapshot(end).unwrap().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(leader.ensure_producer_snapshot(end).unwrap(), Some(path));
    assert_eq!(leader.ensure_producer_snapshot(-1).unwrap(), None);

    let fdir = tempfile::tempdir().unwrap();
    let mut follower = Log::open(fdir.path(), config(), 0).unwrap();
    follower.truncate_fully_and_start_at(end).unwrap();
    assert!(
        follower
            .load_producer_snapshot_at_start(end + 1, &bytes)
            .is_err()
    );
    assert!(
        follower
            .load_producer_snapshot_at_start(end, b"junk")
            .is_err()
    );
    assert_eq!(
        follower
            .load_producer_snapshot_at_start(end, &bytes)
            .unwrap(),
        2
    );
    assert_eq!(follower.open_transactions(), vec![(txn_first, 7)]);
    // The leader's ABORT marker, copied at the follower's end.
    let mut m = streamforge_protocol::control::build_marker(7, 0, 0, ControlType::Abort, 10);
    streamforge_protocol::batch::RecordBatchMut::parse(&mut m)
        .unwrap()
        .set_base_offset(end);
    follower.append_as_follower(&m).unwrap();
    assert!(follower.open_transactions().is_empty());
    let aborted = follower.aborted_transactions(0, end + 1);
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(
        (aborted[0].producer_id, aborted[0].first_offset),
        (7, txn_first)
    );
    // Idempotence: the retry is recognised.
    let mut retry = retry;
    let info = follower.append_as_leader(&mut retry, 0, 10).unwrap();
    assert!(info.duplicate);
    // And it survives a restart (the state was written to `<end>.snapshot` locally).
    drop(follower);
    let mut follower = Log::open(fdir.path(), config(), 0).unwrap();
    let mut retry = build_simple(
        BatchSpec {
            producer_id: 5,
            base_sequence: 0,
            ..BatchSpec::default()
        },
        2,
        40,
    );
    assert!(
        follower
            .append_as_leader(&mut retry, 0, 10)
            .unwrap()
            .duplicate
    );
    assert_eq!(follower.aborted_transactions(0, end + 1).len(), 1);
}

//! Crash safety of the cleaner's swap with transactions (docs/STORAGE.md, "Compaction"): the
//! merged group's `.txnindex` is written as `<base>.txnindex.swap` before the swap and
//! installed with it, so a crash at each step leaves, after recovery, every aborted
//! transaction whose marker stayed in the index (none lost with a deleted segment's file), no
//! aborted record readable, and no leftover swap index.

use std::path::Path;

use streamforge_log::cleaner::{OffsetMap, SwapStep, Throttle, clean_log};
use streamforge_log::{Log, LogConfig, TxnMarker};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::batch::{BatchIter, TRANSACTIONAL};
use streamforge_protocol::control::ControlType;
use streamforge_protocol::kafka_protocol::records::RecordBatchDecoder;

const NOW: i64 = 1_000_000_000;
const PID: i64 = 7;
const ROUNDS: usize = 24;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        segment_ms: 1_000_000,
        segment_index_bytes: 4096,
        index_interval_bytes: 512,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.0,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    }
}

fn batch(log: &mut Log, spec: BatchSpec, key: &str, value: &str) {
    let mut b = build_batch(spec, &[(Some(key.as_bytes()), Some(value.as_bytes()))]);
    log.append_as_leader(&mut b, 0, NOW).unwrap();
    log.set_high_watermark(log.log_end_offset());
}

/// Rounds of a plain record and a transaction of PID, every third one aborted.
fn fill(log: &mut Log) {
    for round in 0..ROUNDS {
        let plain = BatchSpec {
            base_timestamp: NOW,
            ..BatchSpec::default()
        };
        batch(
            log,
            plain,
            &format!("k{}", round % 5),
            &format!("plain-{round}"),
        );
        let txn = BatchSpec {
            base_timestamp: NOW,
            producer_id: PID,
            producer_epoch: 0,
            base_sequence: round as i32,
            attributes: TRANSACTIONAL,
            ..BatchSpec::default()
        };
        let abort = round % 3 == 1;
        let value = if abort { "aborted" } else { "committed" };
        batch(
            log,
            txn,
            &format!("k{}", round % 5),
            &format!("{value}-{round}"),
        );
        let kind = if abort {
            ControlType::Abort
        } else {
            ControlType::Commit
        };
        let m = TxnMarker {
            producer_id: PID,
            producer_epoch: 0,
            coordinator_epoch: 0,
            kind,
        };
        log.append_txn_marker(m, 0, NOW).unwrap();
        log.set_high_watermark(log.log_end_offset());
    }
    log.tick(NOW + 2_000_000).unwrap();
}

fn values(log: &Log) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let info = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        for slice in info.slices {
            let mut bytes = slice.clone();
            for set in RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
                for r in set.records {
                    if let Some(v) = r.value {
                        out.push((r.offset, String::from_utf8_lossy(&v).to_string()));
                    }
                }
            }
            for item in BatchIter::new(&slice) {
                next = item.unwrap().1.last_offset() + 1;
            }
        }
    }
    out
}

fn swap_indexes(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".txnindex.swap")
        })
        .count()
}

fn crash_at(stop: SwapStep) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), NOW).unwrap();
    fill(&mut log);
    let aborted_before = log.aborted_transactions(0, i64::MAX);
    assert!(aborted_before.len() >= 4, "aborts in several segments");
    // Larger segments from now on: the cleaner merges the small ones into one group.
    log.update_config(LogConfig {
        segment_bytes: 1 << 20,
        ..config()
    });
    let view = log.clean_view().unwrap();
    let plan = view.plan(None, NOW + 3_000_000, false).unwrap();
    let mut map = OffsetMap::with_memory(1 << 20);
    let outcome = clean_log(
        &view,
        &plan,
        &mut map,
        NOW + 3_000_000,
        &mut Throttle::unlimited(),
    )
    .unwrap();
    let group = outcome
        .groups
        .iter()
        .find(|g| g.replaced.len() > 1 && g.cleaned_path.is_some())
        .expect("a group merging segments");
    assert!(!group.aborted.is_empty(), "the group keeps abort markers");
    let last = group.replaced.last().unwrap().0;
    let group_end = log
        .segment_base_offsets()
        .into_iter()
        .find(|b| *b > last)
        .unwrap();
    log.install_cleaned_until(group, NOW, Some(stop)).unwrap();
    drop(log); // no close: as after SIGKILL
    let log = Log::open(dir.path(), config(), NOW + 4_000_000).unwrap();
    assert_eq!(
        swap_indexes(dir.path()),
        0,
        "recovery installs or removes the swap index"
    );
    assert!(log.verify().is_none());
    // The first pass keeps every abort marker (its transaction's data was there): no entry lost.
    assert_eq!(
        log.aborted_transactions(0, i64::MAX),
        aborted_before,
        "after a crash at {stop:?}"
    );
    // The merged group's aborted records are gone (the swap completed).
    for (offset, v) in values(&log) {
        let in_group = offset >= group.base_offset && offset < group_end;
        assert!(
            !(in_group && v.starts_with("aborted")),
            "aborted record at {offset} after {stop:?}"
        );
    }
}

#[test]
fn crash_after_the_swap_rename_keeps_the_aborted_index() {
    crash_at(SwapStep::AfterSwapRename);
}

#[test]
fn crash_after_deleting_the_old_segments_keeps_the_aborted_index() {
    crash_at(SwapStep::AfterDeletingOld);
}

#[test]
fn crash_after_deleting_the_old_indexes_keeps_the_aborted_index() {
    crash_at(SwapStep::AfterDeletingIndexes);
}

#[test]
fn a_swap_index_without_its_segment_swap_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), NOW).unwrap();
    fill(&mut log);
    let aborted_before = log.aborted_transactions(0, i64::MAX);
    drop(log);
    // A crash right after writing the swap index, before the segment swap began.
    let bogus = dir
        .path()
        .join(format!("{}.txnindex.swap", streamforge_log::file_stem(0)));
    std::fs::write(&bogus, b"").unwrap();
    let log = Log::open(dir.path(), config(), NOW).unwrap();
    assert!(!bogus.exists());
    assert_eq!(log.aborted_transactions(0, i64::MAX), aborted_before);
}

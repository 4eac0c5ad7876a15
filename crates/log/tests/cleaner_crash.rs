//! Crash safety of the cleaner's swap (docs/STORAGE.md, "Compaction"): a crash at each step
//! leaves files that recovery turns into a valid log holding every key's latest value at its
//! original offset — a leftover `.cleaned` file is deleted (the old segments are intact), a
//! leftover `.swap` file is completed.

use std::collections::BTreeMap;
use std::path::Path;

use streamforge_log::cleaner::{
    self, CLEANED_SUFFIX, OffsetMap, SWAP_SUFFIX, SwapStep, Throttle, clean_log,
};
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::kafka_protocol::records::RecordBatchDecoder;

const NOW: i64 = 1_000_000_000;
const KEYS: usize = 30;
const ROUNDS: usize = 12;

/// Key → (offset, value) of its latest record.
type Latest = BTreeMap<Vec<u8>, (i64, Vec<u8>)>;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
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

/// Every round writes every key; returns key → (offset, value) of the latest.
fn fill(log: &mut Log) -> Latest {
    let mut latest = BTreeMap::new();
    for round in 0..ROUNDS {
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(3) {
            let kv: Vec<(Vec<u8>, Vec<u8>)> = chunk
                .iter()
                .map(|k| {
                    (
                        format!("k{k:03}").into_bytes(),
                        format!("r{round}-{k}").into_bytes(),
                    )
                })
                .collect();
            let recs: Vec<_> = kv
                .iter()
                .map(|(k, v)| (Some(&k[..]), Some(&v[..])))
                .collect();
            let mut b = build_batch(
                BatchSpec {
                    base_timestamp: NOW,
                    ..BatchSpec::default()
                },
                &recs,
            );
            let info = log.append_as_leader(&mut b, 0, NOW).unwrap();
            for (i, (k, v)) in kv.into_iter().enumerate() {
                latest.insert(k, (info.first_offset + i as i64, v));
            }
        }
    }
    log.tick(NOW + 2_000_000).unwrap();
    latest
}

/// Key → its last (offset, value) read from offset 0, and how many records were read.
fn contents(log: &Log) -> (Latest, usize) {
    let mut out = BTreeMap::new();
    let mut count = 0;
    let mut next = log.log_start_offset();
    let mut last_offset = -1;
    while next < log.log_end_offset() {
        let info = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        assert!(!info.slices.is_empty());
        for slice in info.slices {
            let mut bytes = slice.clone();
            for set in RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
                for r in set.records {
                    assert!(r.offset > last_offset, "offsets ascend");
                    last_offset = r.offset;
                    count += 1;
                    out.insert(
                        r.key.unwrap().to_vec(),
                        (r.offset, r.value.unwrap().to_vec()),
                    );
                }
            }
            for item in streamforge_protocol::batch::BatchIter::new(&slice) {
                next = item.unwrap().1.last_offset() + 1;
            }
        }
    }
    (out, count)
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(CLEANED_SUFFIX) || n.ends_with(SWAP_SUFFIX))
        .collect()
}

/// Clean, install the first group up to `stop` (or only write the `.cleaned` files when
/// `stop` is `None`), drop the log as a crash would, reopen and check.
fn crash_at(stop: Option<SwapStep>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), NOW).unwrap();
    let latest = fill(&mut log);
    assert!(log.segment_count() > 3, "several segments to merge");
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
    if let Some(step) = stop {
        log.install_cleaned_until(group, NOW, Some(step)).unwrap();
    }
    assert!(
        !leftovers(dir.path()).is_empty(),
        "the crash leaves a cleaner file"
    );
    drop(log); // no close: as after SIGKILL
    let log = Log::open(dir.path(), config(), NOW + 4_000_000).unwrap();
    assert!(
        leftovers(dir.path()).is_empty(),
        "recovery removes or completes them"
    );
    assert!(log.verify().is_none());
    let (got, _) = contents(&log);
    for (k, v) in &latest {
        assert_eq!(
            got.get(k),
            Some(v),
            "latest value of {k:?} after a crash at {stop:?}"
        );
    }
    // And the recovered log cleans to exactly the latest values.
    let mut log = log;
    cleaner::clean_now(&mut log, None, 1 << 20, NOW + 5_000_000, false)
        .unwrap()
        .unwrap();
    assert_eq!(contents(&log), (latest, KEYS));
}

#[test]
fn crash_while_writing_cleaned_files_keeps_the_old_segments() {
    crash_at(None);
}

#[test]
fn crash_after_the_swap_rename_is_completed() {
    crash_at(Some(SwapStep::AfterSwapRename));
}

#[test]
fn crash_after_deleting_the_old_segments_is_completed() {
    crash_at(Some(SwapStep::AfterDeletingOld));
}

#[test]
fn crash_after_deleting_the_old_indexes_is_completed() {
    crash_at(Some(SwapStep::AfterDeletingIndexes));
}

#[test]
fn crash_after_a_whole_install_reopens_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), NOW).unwrap();
    let latest = fill(&mut log);
    let stats = cleaner::clean_now(&mut log, None, 1 << 20, NOW + 3_000_000, false)
        .unwrap()
        .unwrap();
    assert!(stats.complete && stats.records_removed > 0);
    drop(log);
    let log = Log::open(dir.path(), config(), NOW + 4_000_000).unwrap();
    assert!(log.verify().is_none());
    assert_eq!(contents(&log), (latest, KEYS));
}

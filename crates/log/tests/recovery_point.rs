//! Recovery-point tests: an unclean open changes nothing it does not have to (no checkpoint
//! rewrite, no fsync-worthy change), a torn tail is cut and stays consistent over a second crash,
//! and background flushing moves the checkpointed recovery point forward while appends go on.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use streamforge_log::{Log, LogConfig, file_stem};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

mod common;
use common::read_everything;

const RECORDS_PER_BATCH: i64 = 5;
const CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Bound on waiting for the background flusher thread.
const FLUSH_WAIT: Duration = Duration::from_secs(10);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

fn append(log: &mut Log, batches: i64, now_ms: i64) {
    for i in 0..batches {
        let mut b = build_simple(
            BatchSpec {
                base_timestamp: now_ms + i,
                ..BatchSpec::default()
            },
            RECORDS_PER_BATCH as usize,
            50,
        );
        log.append_as_leader(&mut b, 0, now_ms).unwrap();
    }
}

fn checkpoint_value(dir: &Path) -> Option<i64> {
    let text = fs::read_to_string(dir.join(CHECKPOINT)).ok()?;
    text.lines().nth(2)?.trim().parse().ok()
}

/// (inode, mtime ns, contents) of the checkpoint file: any rewrite changes the inode (rename).
fn checkpoint_identity(dir: &Path) -> (u64, i64, String) {
    let path = dir.join(CHECKPOINT);
    let meta = fs::metadata(&path).unwrap();
    (
        meta.ino(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        fs::read_to_string(&path).unwrap(),
    )
}

#[test]
fn unclean_open_leaves_the_recovery_checkpoint_alone_and_serves_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    append(&mut log, 100, 0);
    log.flush().unwrap();
    let flushed = log.log_end_offset();
    log.tick(1).unwrap(); // writes the checkpoint
    assert_eq!(checkpoint_value(dir.path()), Some(flushed));
    append(&mut log, 200, 2); // not flushed, several more segments
    let end = log.log_end_offset();
    drop(log); // crash: no close
    let before = checkpoint_identity(dir.path());

    let log = Log::open(dir.path(), config(), 3).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_everything(&log), end, "all data is served");
    // The scanned data came from the page cache: not trusted as flushed.
    assert_eq!(log.recovery_point(), flushed);
    assert_eq!(log.group_commit().durable_offset(), flushed);
    assert!(log.recovery_checked_bytes() > 0);
    assert!(log.recovery_checked_bytes() < log.size_bytes());
    assert_eq!(
        checkpoint_identity(dir.path()),
        before,
        "checkpoint untouched"
    );
    drop(log); // crash again: the same range is re-checked
    let log = Log::open(dir.path(), config(), 4).unwrap();
    assert_eq!(log.recovery_point(), flushed);
    assert_eq!(read_everything(&log), end);
    assert_eq!(checkpoint_identity(dir.path()), before);
}

#[test]
fn unclean_open_of_an_empty_log_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    drop(Log::open(dir.path(), config(), 0).unwrap());
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let before = names(dir.path());
    let log = Log::open(dir.path(), config(), 1).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.recovery_checked_bytes(), 0);
    assert_eq!(names(dir.path()), before);
    assert!(!dir.path().join(CHECKPOINT).exists());
}

#[test]
fn torn_tail_is_cut_and_a_second_crash_finds_the_log_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    append(&mut log, 50, 0);
    let end = log.log_end_offset();
    let active = *log.segment_base_offsets().last().unwrap();
    drop(log);
    // A torn write: the first half of another batch at the end of the active segment.
    let path = dir.path().join(format!("{}.log", file_stem(active)));
    let good_len = fs::metadata(&path).unwrap().len();
    let torn = build_simple(BatchSpec::default(), 5, 50);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&torn[..torn.len() / 2]);
    fs::write(&path, bytes).unwrap();

    let log = Log::open(dir.path(), config(), 1).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(fs::metadata(&path).unwrap().len(), good_len, "tail cut");
    assert_eq!(read_everything(&log), end);
    drop(log); // crash right after recovery

    let mut log = Log::open(dir.path(), config(), 2).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_everything(&log), end);
    assert!(log.verify().is_none());
    append(&mut log, 10, 3);
    let end2 = log.log_end_offset();
    assert_eq!(end2, end + 10 * RECORDS_PER_BATCH);
    drop(log); // and once more, after new appends
    let log = Log::open(dir.path(), config(), 4).unwrap();
    assert_eq!(read_everything(&log), end2);
    assert!(log.verify().is_none());
}

#[test]
fn background_flush_advances_the_checkpoint_while_appends_continue() {
    const INTERVAL_MS: i64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let one_segment = LogConfig {
        segment_bytes: 1 << 20, // one segment: only the periodic flush can help
        ..config()
    };
    let mut log = Log::open(dir.path(), one_segment.clone(), 0).unwrap();
    let mut now_ms = 0;
    let mut advanced_to = None;
    let deadline = Instant::now() + FLUSH_WAIT;
    while Instant::now() < deadline {
        append(&mut log, 5, now_ms);
        now_ms += 20;
        log.tick(now_ms).unwrap();
        log.request_background_flush(now_ms, INTERVAL_MS);
        if let Some(v) = checkpoint_value(dir.path())
            && v > 0
        {
            advanced_to = Some(v);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let advanced_to = advanced_to.expect("recovery point checkpoint advanced");
    // Appends went on after the flushed offset, and nothing was flushed inline.
    assert!(log.log_end_offset() > advanced_to);
    assert!(log.recovery_point() >= advanced_to);
    // Crash: only the tail past the checkpoint is re-checked.
    let end = log.log_end_offset();
    let total = log.size_bytes();
    drop(log);
    let log = Log::open(dir.path(), one_segment, now_ms).unwrap();
    assert_eq!(read_everything(&log), end);
    assert!(log.recovery_point() >= advanced_to);
    assert!(
        log.recovery_checked_bytes() < total,
        "re-checked {} of {total} bytes",
        log.recovery_checked_bytes()
    );
}

#[test]
fn a_roll_flushes_the_sealed_segment_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    append(&mut log, 100, 0); // several rolls
    let sealed_end = *log.segment_base_offsets().last().unwrap();
    assert!(sealed_end > 0);
    let deadline = Instant::now() + FLUSH_WAIT;
    while log.group_commit().durable_offset() < sealed_end && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(log.group_commit().durable_offset() >= sealed_end);
    log.tick(1).unwrap();
    assert!(log.recovery_point() >= sealed_end);
    assert!(checkpoint_value(dir.path()).unwrap() >= sealed_end);
}

#[test]
fn deferred_checkpoint_advance_is_written_outside_and_dropped_after_a_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    append(&mut log, 20, 0);
    log.flush().unwrap();
    let end = log.log_end_offset();
    let advance = log.tick_deferred(1).unwrap().expect("recovery point moved");
    assert_eq!(advance.value(), end);
    // Nothing written while the caller still holds the log (the lock, in the broker).
    assert_eq!(checkpoint_value(dir.path()), None);
    assert!(log.tick_deferred(2).unwrap().is_none(), "handed out once");
    advance.write().unwrap();
    assert_eq!(checkpoint_value(dir.path()), Some(end));

    // An advance issued before a truncation must not overwrite the lowered checkpoint.
    append(&mut log, 20, 3);
    log.flush().unwrap();
    let stale = log.tick_deferred(4).unwrap().expect("recovery point moved");
    assert!(stale.value() > end);
    let cut = end - 10 * RECORDS_PER_BATCH;
    log.truncate_to(cut).unwrap();
    assert_eq!(checkpoint_value(dir.path()), Some(cut));
    stale.write().unwrap();
    assert_eq!(checkpoint_value(dir.path()), Some(cut));
    assert_eq!(log.log_end_offset(), cut);
}

/// A new leadership's epoch entry is not written (or fsynced) when it is assigned; it reaches
/// the file before the recovery point checkpoint passes it, and a crash before that re-derives
/// the epochs of the unflushed tail from its batches.
#[test]
fn a_new_epoch_is_written_with_the_recovery_point_and_recovered_from_batches_after_a_crash() {
    const EPOCHS: &str = "leader-epoch-checkpoint";
    let dir = tempfile::tempdir().unwrap();
    let now = 1_700_000_000_000;
    let mut log = Log::open(dir.path(), config(), now).unwrap();
    append(&mut log, 2, now);
    log.flush().unwrap();
    log.tick(now).unwrap();
    let before = fs::read_to_string(dir.path().join(EPOCHS)).unwrap();
    assert_eq!(log.latest_epoch(), Some(0));

    log.assign_epoch_start_offset(3).unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join(EPOCHS)).unwrap(),
        before,
        "not written when assigned"
    );
    assert_eq!(
        log.end_offset_for_epoch(0),
        Some((0, 2 * RECORDS_PER_BATCH))
    );
    let mut b = build_simple(BatchSpec::default(), RECORDS_PER_BATCH as usize, 50);
    log.append_as_leader(&mut b, 3, now).unwrap();
    // Crash: no close, no flush; the batch is in the page cache, the entry nowhere on disk.
    drop(log);
    let log = Log::open(dir.path(), config(), now).unwrap();
    assert_eq!(log.latest_epoch(), Some(3), "re-derived from the batch");
    assert_eq!(
        log.end_offset_for_epoch(0),
        Some((0, 2 * RECORDS_PER_BATCH))
    );

    // Once the recovery point moves past the new epoch's data, the file names it.
    let mut log = log;
    log.flush().unwrap();
    log.tick(now).unwrap();
    let after = fs::read_to_string(dir.path().join(EPOCHS)).unwrap();
    assert!(
        after.contains(&format!("3 {}", 2 * RECORDS_PER_BATCH)),
        "{after}"
    );
    log.close().unwrap();
}

//! Damaged checkpoint files (garbage bytes where `recovery-point-offset-checkpoint`,
//! `leader-epoch-checkpoint` or `log-start-offset-checkpoint` was): the log opens, logs a
//! warning naming the file, and recovers what the file said from the segments, as
//! docs/STORAGE.md describes. Before, `open` failed with "stream did not contain valid UTF-8".

use std::fs;
use std::path::Path;

use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

mod common;
use common::read_everything;

const BATCHES: i64 = 60;
const RECORDS_PER_BATCH: i64 = 5;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// `BATCHES` batches of 5 records over several segments: the first half in epoch 3, the rest
/// in epoch 7.
fn fill(dir: &Path) -> Log {
    let mut log = Log::open(dir, config(), 0).unwrap();
    for i in 0..BATCHES {
        let mut b = build_simple(BatchSpec::default(), RECORDS_PER_BATCH as usize, 50);
        let epoch = if i < BATCHES / 2 { 3 } else { 7 };
        log.append_as_leader(&mut b, epoch, 0).unwrap();
    }
    assert!(log.segment_count() >= 3);
    log
}

fn garbage(path: &Path) {
    let bytes: Vec<u8> = (0..64u32).map(|i| (i * 151 + 7) as u8 | 0x80).collect();
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_garbage_recovery_point_rechecks_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = fill(dir.path());
    log.flush().unwrap();
    log.tick(0).unwrap();
    let size = log.size_bytes();
    drop(log); // unclean: no marker
    garbage(&dir.path().join("recovery-point-offset-checkpoint"));
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), BATCHES * RECORDS_PER_BATCH);
    assert_eq!(
        log.recovery_checked_bytes(),
        size,
        "recovery did not start at 0"
    );
    assert_eq!(read_everything(&log), BATCHES * RECORDS_PER_BATCH);
}

#[test]
fn a_garbage_leader_epoch_checkpoint_is_rebuilt_from_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    let epochs = log.leader_epochs().to_vec();
    assert_eq!(epochs, vec![(3, 0), (7, BATCHES / 2 * RECORDS_PER_BATCH)]);
    for clean in [true, false] {
        let log = Log::open(dir.path(), config(), 0).unwrap();
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        let file = dir.path().join("leader-epoch-checkpoint");
        garbage(&file);
        let log = Log::open(dir.path(), config(), 0).unwrap();
        assert_eq!(log.leader_epochs(), &epochs[..], "clean={clean}");
        assert_eq!(log.end_offset_for_epoch(3), Some((3, 150)));
        drop(log);
        // The rebuilt cache was written back.
        let text = fs::read_to_string(&file).unwrap();
        assert_eq!(text, "0\n2\n3 0\n7 150\n");
    }
}

#[test]
fn a_garbage_log_start_checkpoint_falls_back_to_the_epoch_cache_or_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = fill(dir.path());
    // DeleteRecords inside the first segment: the epoch cache's first entry moves with it.
    log.set_high_watermark(log.log_end_offset());
    log.delete_records_before(7).unwrap();
    log.close().unwrap();
    garbage(&dir.path().join("log-start-offset-checkpoint"));
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_start_offset(), 7);
    log.close().unwrap();
    // Both damaged: the first segment's base offset (records below 7 reappear).
    garbage(&dir.path().join("log-start-offset-checkpoint"));
    garbage(&dir.path().join("leader-epoch-checkpoint"));
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(read_everything(&log), BATCHES * RECORDS_PER_BATCH);
}

#[test]
fn an_unreadable_checkpoint_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    drop(fill(dir.path()));
    let file = dir.path().join("leader-epoch-checkpoint");
    fs::remove_file(&file).unwrap();
    fs::create_dir(&file).unwrap(); // reading it fails with EISDIR, not InvalidData
    let err = Log::open(dir.path(), config(), 0)
        .err()
        .expect("open fails");
    assert!(err.to_string().contains("leader-epoch-checkpoint"), "{err}");
}

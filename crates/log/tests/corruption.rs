//! Corruption tests: damage files on disk the way crashes and bad disks do, and check that each
//! case is detected, reported and handled as docs/STORAGE.md describes.

use std::fs;
use std::path::{Path, PathBuf};

use streamforge_log::{Log, LogConfig, LogError, file_stem};
use streamforge_protocol::batch::BatchIter;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

mod common;
use common::read_everything;

const BATCHES: i64 = 120;
const RECORDS_PER_BATCH: i64 = 5;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// A log of `BATCHES` batches of 5 records over several segments.
fn fill(dir: &Path) -> Log {
    let mut log = Log::open(dir, config(), 0).unwrap();
    for i in 0..BATCHES {
        let mut b = build_simple(
            BatchSpec {
                base_timestamp: i * 10,
                ..BatchSpec::default()
            },
            RECORDS_PER_BATCH as usize,
            50,
        );
        log.append_as_leader(&mut b, 0, 0).unwrap();
    }
    log
}

fn segment_file(dir: &Path, base: i64, ext: &str) -> PathBuf {
    dir.join(format!("{}.{ext}", file_stem(base)))
}

/// Byte positions and base offsets of the batches in a `.log` file.
fn batches_in(path: &Path) -> Vec<(usize, i64, usize)> {
    let bytes = fs::read(path).unwrap();
    BatchIter::new(&bytes)
        .map(|r| {
            let (pos, b) = r.unwrap();
            (pos, b.base_offset(), b.size_bytes())
        })
        .collect()
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

#[test]
fn flipped_byte_in_the_unflushed_tail_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    let bases = log.segment_base_offsets();
    drop(log); // unclean: nothing flushed since open
    let active = segment_file(dir.path(), *bases.last().unwrap(), "log");
    let batches = batches_in(&active);
    let (pos, base, size) = batches[batches.len() - 2];
    flip_byte(&active, pos + size - 3); // inside the records: CRC mismatch
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), base, "cut at the corrupt batch");
    assert_eq!(read_everything(&log), base);
    assert_eq!(fs::metadata(&active).unwrap().len() as usize, pos);
}

#[test]
fn file_truncated_mid_batch_is_cut_to_the_last_whole_batch() {
    for clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = fill(dir.path());
        let bases = log.segment_base_offsets();
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        let active = segment_file(dir.path(), *bases.last().unwrap(), "log");
        let batches = batches_in(&active);
        let (pos, base, size) = *batches.last().unwrap();
        let f = fs::OpenOptions::new().write(true).open(&active).unwrap();
        f.set_len((pos + size / 2) as u64).unwrap();
        drop(f);
        let log = Log::open(dir.path(), config(), 0).unwrap();
        assert_eq!(log.log_end_offset(), base, "clean={clean}");
        assert_eq!(read_everything(&log), base);
        // And the log keeps working.
        let mut log = log;
        let mut b = build_simple(BatchSpec::default(), 2, 10);
        assert_eq!(
            log.append_as_leader(&mut b, 0, 0).unwrap().first_offset,
            base
        );
    }
}

#[test]
fn corruption_in_a_flushed_middle_segment_is_reported_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = fill(dir.path());
    log.flush().unwrap();
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3);
    log.close().unwrap();
    let middle = segment_file(dir.path(), bases[1], "log");
    let batches = batches_in(&middle);
    let (pos, base, size) = batches[batches.len() / 2];
    flip_byte(&middle, pos + size - 5);

    // Flushed segments are not rescanned at open (that is what the recovery point is for) ...
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), BATCHES * RECORDS_PER_BATCH);
    // ... but a scrub finds and reports the exact batch, and nothing was cut off.
    let (segment, bad) = log.verify().expect("corruption detected");
    assert_eq!(segment, bases[1]);
    assert_eq!(bad.position, pos as u64);
    assert_eq!(bad.offset, base);
    assert!(bad.error.contains("CRC"), "{}", bad.error);
    drop(log);

    // A damaged header in flushed data makes the segment unloadable: open reports it.
    let mut bytes = fs::read(&middle).unwrap();
    bytes[pos + 8..pos + 12].copy_from_slice(&7i32.to_be_bytes()); // batchLength < header
    fs::write(&middle, bytes).unwrap();
    fs::remove_file(segment_file(dir.path(), bases[1], "index")).unwrap();
    match Log::open(dir.path(), config(), 0) {
        Err(LogError::Corrupted(msg)) => {
            assert!(msg.contains(&format!("byte {pos}")), "{msg}");
            assert!(msg.contains(&format!("offset {base}")), "{msg}");
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("corrupt flushed segment was not reported"),
    }
}

#[test]
fn corruption_in_an_unflushed_middle_segment_truncates_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    let bases = log.segment_base_offsets();
    drop(log); // unclean, recovery point 0: all segments are unflushed
    let middle = segment_file(dir.path(), bases[1], "log");
    let batches = batches_in(&middle);
    let (pos, base, size) = batches[2];
    flip_byte(&middle, pos + size - 5);
    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), base);
    assert_eq!(log.segment_base_offsets(), &bases[..2]);
    assert_eq!(read_everything(&log), base);
    for later in &bases[2..] {
        assert!(!segment_file(dir.path(), *later, "log").exists());
    }
}

#[test]
fn deleted_or_garbage_index_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    let bases = log.segment_base_offsets();
    let before: Vec<_> = (0..BATCHES * RECORDS_PER_BATCH)
        .step_by(7)
        .map(|o| log.read(o, 1, i64::MAX, true).unwrap().slices[0].clone())
        .collect();
    let by_time = log.offset_for_timestamp(555).unwrap();
    log.close().unwrap();
    fs::remove_file(segment_file(dir.path(), bases[0], "index")).unwrap();
    fs::remove_file(segment_file(dir.path(), bases[1], "timeindex")).unwrap();
    // Garbage (out-of-order entries) in another segment's offset index.
    let idx = segment_file(dir.path(), bases[2], "index");
    let mut bytes = fs::read(&idx).unwrap();
    assert!(bytes.len() >= 16);
    bytes[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
    fs::write(&idx, bytes).unwrap();

    let log = Log::open(dir.path(), config(), 0).unwrap();
    assert!(segment_file(dir.path(), bases[0], "index").exists());
    assert!(segment_file(dir.path(), bases[1], "timeindex").exists());
    let after: Vec<_> = (0..BATCHES * RECORDS_PER_BATCH)
        .step_by(7)
        .map(|o| log.read(o, 1, i64::MAX, true).unwrap().slices[0].clone())
        .collect();
    assert_eq!(before, after);
    assert_eq!(log.offset_for_timestamp(555).unwrap(), by_time);
    assert!(log.verify().is_none());
}

/// A batch whose offsets lie past what its segment's index can address (relative offsets are
/// u32) is damage, even with a valid CRC: an unclean open cuts the segment before it and a clean
/// open reports it, so no index entry is written with a truncated offset. (Found by the
/// `log_recover` fuzz target: the rebuilt index pointed offset 0 at a batch ending at 2^44.)
#[test]
fn a_batch_past_the_segments_offset_range_is_cut_or_reported() {
    for clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = build_simple(BatchSpec::default(), 3, 20);
        bytes.extend(build_simple(
            BatchSpec {
                base_offset: 1 << 44,
                ..BatchSpec::default()
            },
            2,
            20,
        ));
        fs::write(dir.path().join(format!("{}.log", file_stem(0))), &bytes).unwrap();
        if clean {
            fs::write(dir.path().join(".kafka_cleanshutdown"), b"").unwrap();
        }
        let Ok(log) = Log::open(dir.path(), config(), 0) else {
            assert!(clean, "an unclean open recovers by cutting the damage");
            continue;
        };
        if clean {
            match log.read(0, 1 << 20, log.log_end_offset(), true) {
                Ok(info) => assert!(log.log_end_offset() <= 3 || info.bytes > 0),
                Err(e) => assert!(matches!(e, LogError::DamagedBatch { .. }), "{e:?}"),
            }
        } else {
            assert_eq!(
                log.log_end_offset(),
                3,
                "the batch past the range is cut off"
            );
            assert!(log.verify().is_none());
            let info = log.read(0, 1 << 20, 3, true).unwrap();
            assert_eq!(
                info.bytes,
                bytes.len() - build_simple(BatchSpec::default(), 2, 20).len()
            );
        }
    }
}

//! A damaged batch in a sealed segment (a flipped byte in its length field, its header or its
//! records) is an error for the reads that reach it, never an empty success: before the fix a
//! bad length made every later batch of the segment silently invisible to all clients.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use streamforge_log::{Log, LogConfig, LogError, file_stem};
use streamforge_protocol::batch::BatchIter;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

const BATCHES: i64 = 60;
const RECORDS_PER_BATCH: i64 = 5;
/// Bytes of a batch's `batchLength` field (after the 8-byte base offset).
const LENGTH_FIELD: std::ops::Range<usize> = 8..12;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 4096,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    }
}

fn fill(dir: &Path) -> Log {
    let mut log = Log::open(dir, config(), 0).unwrap();
    for _ in 0..BATCHES {
        let mut b = build_simple(BatchSpec::default(), RECORDS_PER_BATCH as usize, 50);
        log.append_as_leader(&mut b, 0, 0).unwrap();
    }
    log.set_high_watermark(log.log_end_offset());
    log
}

fn first_segment(dir: &Path) -> PathBuf {
    dir.join(format!("{}.log", file_stem(0)))
}

/// `(position, base offset)` of each batch in a `.log` file.
fn batches_in(path: &Path) -> Vec<(usize, i64)> {
    let bytes = fs::read(path).unwrap();
    BatchIter::new(&bytes)
        .map(|r| {
            let (pos, b) = r.unwrap();
            (pos, b.base_offset())
        })
        .collect()
}

/// Flip one byte in place (no truncation: the file may be mapped by a live log).
fn flip_byte(path: &Path, at: usize, mask: u8) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at as u64).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at as u64).unwrap();
}

/// Consume from 0 with `budget`-byte reads: the offsets served in order up to the first error,
/// and that error. Panics on an empty success below the high watermark.
fn consume(log: &Log, budget: usize) -> (i64, Option<LogError>) {
    let mut at = 0;
    for _ in 0..10_000 {
        if at >= log.high_watermark() {
            return (at, None);
        }
        match log.read(at, budget, log.high_watermark(), true) {
            Ok(info) => {
                assert!(
                    !info.slices.is_empty(),
                    "empty success at {at}, below the end"
                );
                for slice in &info.slices {
                    for item in BatchIter::new(slice) {
                        let (_, b) = item.unwrap();
                        b.verify_crc().unwrap();
                        assert_eq!(b.base_offset(), at, "skipped offsets before {at}");
                        at = b.last_offset() + 1;
                    }
                }
            }
            Err(e) => return (at, Some(e)),
        }
    }
    panic!("no end");
}

/// Every length byte of every batch of a sealed segment, each flipped in turn: the consumer gets
/// exactly the batches before the damaged one and then CORRUPT_MESSAGE, under any budget.
#[test]
fn a_flipped_length_byte_is_an_error_not_a_silent_end_of_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    assert!(log.segment_count() > 2);
    let seg = first_segment(dir.path());
    let batches = batches_in(&seg);
    let seg_end = log.segment_base_offsets()[1];
    for &(pos, base) in &batches {
        for field_byte in LENGTH_FIELD {
            for mask in [0x01u8, 0x5a, 0x80] {
                // While the log is open (the segment is mapped and sealed).
                flip_byte(&seg, pos + field_byte, mask);
                for budget in [1, 700, 4096, 1 << 20] {
                    let (reached, err) = consume(&log, budget);
                    let e = err.unwrap_or_else(|| {
                        panic!(
                            "no error with byte {field_byte} of batch {base} flipped by {mask:#x}"
                        )
                    });
                    assert_eq!(reached, base, "served up to the damaged batch, not past it");
                    assert_eq!(e.kafka_code(), 2, "{e}");
                    assert!(matches!(e, LogError::DamagedBatch { offset, .. } if offset == base));
                }
                // Offsets past the damage in later segments still read.
                assert!(log.read(seg_end, 1 << 20, i64::MAX, true).is_ok());
                flip_byte(&seg, pos + field_byte, mask);
            }
        }
    }
    let (reached, err) = consume(&log, 4096);
    assert!(err.is_none(), "restored: {err:?}");
    assert_eq!(reached, log.log_end_offset());
}

/// The same after a clean restart (the damage is on disk when the log opens: a clean open does
/// not re-check sealed segments, so the read path is what must report it); the full scrub
/// (`verify`) names the same batch.
#[test]
fn damage_found_after_a_clean_restart_is_reported_by_reads_and_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = fill(dir.path());
    let seg = first_segment(dir.path());
    log.close().unwrap();
    let batches = batches_in(&seg);
    let (pos, base) = batches[batches.len() / 2];
    flip_byte(&seg, pos + 11, 0x04);
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    log.set_high_watermark(log.log_end_offset());
    let (reached, err) = consume(&log, 1 << 20);
    assert_eq!(reached, base);
    assert_eq!(err.unwrap().kafka_code(), 2);
    let (bad_segment, bad) = log.verify().expect("verify finds the damage");
    assert_eq!((bad_segment, bad.position as usize), (0, pos));
}

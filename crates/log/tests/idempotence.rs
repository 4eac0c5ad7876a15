//! Idempotent-producer state in the log: duplicates answered with original offsets, sequence
//! and epoch errors with Kafka's codes, wrap at i32::MAX, and the state surviving clean and
//! unclean restarts (snapshots + replay), truncation, retention and expiry.

use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::BatchIter;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

fn batch(pid: i64, epoch: i16, seq: i32, records: usize) -> Vec<u8> {
    build_simple(
        BatchSpec {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            base_timestamp: 1_000,
            ..BatchSpec::default()
        },
        records,
        30,
    )
}

fn count_batches(log: &Log) -> usize {
    let mut n = 0;
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let info = log.read(at, usize::MAX, i64::MAX, true).unwrap();
        for slice in &info.slices {
            for item in BatchIter::new(slice) {
                let (_, b) = item.unwrap();
                at = b.last_offset() + 1;
                n += 1;
            }
        }
    }
    n
}

#[test]
fn duplicate_is_answered_with_original_offsets_and_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    let first = log.append_as_leader(&mut batch(1, 0, 0, 3), 0, 0).unwrap();
    assert!(!first.duplicate);
    log.append_as_leader(&mut batch(1, 0, 3, 2), 0, 0).unwrap();
    let again = log.append_as_leader(&mut batch(1, 0, 0, 3), 0, 0).unwrap();
    assert!(again.duplicate);
    assert_eq!((again.first_offset, again.last_offset), (0, 2));
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(count_batches(&log), 2);
}

#[test]
fn sequence_gaps_and_stale_epochs_get_kafka_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    log.append_as_leader(&mut batch(1, 3, 0, 2), 0, 0).unwrap();
    let gap = log
        .append_as_leader(&mut batch(1, 3, 5, 1), 0, 0)
        .unwrap_err();
    assert_eq!(gap.kafka_code(), 45);
    let stale = log
        .append_as_leader(&mut batch(1, 2, 2, 1), 0, 0)
        .unwrap_err();
    assert_eq!(stale.kafka_code(), 47);
    let new_epoch_not_zero = log
        .append_as_leader(&mut batch(1, 4, 7, 1), 0, 0)
        .unwrap_err();
    assert_eq!(new_epoch_not_zero.kafka_code(), 45);
    log.append_as_leader(&mut batch(1, 4, 0, 1), 0, 0).unwrap();
    // Unknown producers start at any sequence (Kafka 4.x).
    log.append_as_leader(&mut batch(2, 0, 1234, 1), 0, 0)
        .unwrap();
    assert_eq!(log.log_end_offset(), 4);
    // Two batches of one producer in one request are checked against each other.
    let mut two = batch(1, 4, 1, 2);
    two.extend(batch(1, 4, 3, 1));
    assert_eq!(log.append_as_leader(&mut two, 0, 0).unwrap().last_offset, 6);
    let mut bad_pair = batch(1, 4, 4, 1);
    bad_pair.extend(batch(1, 4, 9, 1));
    assert_eq!(
        log.append_as_leader(&mut bad_pair, 0, 0)
            .unwrap_err()
            .kafka_code(),
        45
    );
    assert_eq!(log.log_end_offset(), 7);
}

#[test]
fn sequence_wraps_at_i32_max() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    log.append_as_leader(&mut batch(1, 0, i32::MAX - 2, 2), 0, 0)
        .unwrap();
    // Spans the wrap: MAX, 0, 1.
    log.append_as_leader(&mut batch(1, 0, i32::MAX, 3), 0, 0)
        .unwrap();
    assert_eq!(log.producers()[0].last_seq(), 1);
    log.append_as_leader(&mut batch(1, 0, 2, 1), 0, 0).unwrap();
    let dup = log
        .append_as_leader(&mut batch(1, 0, i32::MAX, 3), 0, 0)
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.first_offset, 2);
    assert_eq!(
        log.append_as_leader(&mut batch(1, 0, 4, 1), 0, 0)
            .unwrap_err()
            .kafka_code(),
        45
    );
}

#[test]
fn state_survives_clean_and_unclean_restarts_with_rolls_and_retention() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0).unwrap();
        let mut seq = 0;
        for _ in 0..40 {
            log.append_as_leader(&mut batch(9, 1, seq, 4), 0, 0)
                .unwrap();
            seq += 4;
            // Another, non-idempotent producer in between.
            log.append_as_leader(&mut build_simple(BatchSpec::default(), 2, 30), 0, 0)
                .unwrap();
        }
        assert!(log.segment_count() > 3, "rolled, so snapshots exist");
        let last_info = log
            .append_as_leader(&mut batch(9, 1, seq, 4), 0, 0)
            .unwrap();
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        // Retention removes old segments; the producer's state stays.
        log.update_config(LogConfig {
            retention_bytes: 4096,
            retention_check_interval_ms: 0,
            ..config()
        });
        log.tick(0).unwrap();
        assert!(log.log_start_offset() > 0);
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        let mut log = Log::open(dir.path(), config(), 0).unwrap();
        let producers = log.producers();
        assert_eq!(producers.len(), 1, "clean={clean}");
        assert_eq!(producers[0].last_seq(), seq + 3);
        let retry = log
            .append_as_leader(&mut batch(9, 1, seq, 4), 0, 0)
            .unwrap();
        assert!(retry.duplicate, "clean={clean}");
        assert_eq!(retry.first_offset, last_info.first_offset);
        // An older retained batch is a duplicate too (5 are kept across restarts).
        let older = log
            .append_as_leader(&mut batch(9, 1, seq - 8, 4), 0, 0)
            .unwrap();
        assert!(older.duplicate);
        assert_eq!(log.log_end_offset(), end);
        log.append_as_leader(&mut batch(9, 1, seq + 4, 1), 0, 0)
            .unwrap();
    }
}

#[test]
fn truncation_rebuilds_state_and_expiry_forgets_idle_producers() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), 0).unwrap();
    for i in 0..20 {
        log.append_as_leader(&mut batch(5, 0, i * 2, 2), 0, 0)
            .unwrap();
    }
    // Cut the last three batches (offsets 34..40).
    log.truncate_to(34).unwrap();
    assert_eq!(log.producers()[0].last_seq(), 33);
    // The truncated batch is no longer a duplicate: it is appended again.
    let again = log.append_as_leader(&mut batch(5, 0, 34, 2), 0, 0).unwrap();
    assert!(!again.duplicate);
    assert_eq!(again.first_offset, 34);
    // Expiry: producer idle past producer.id.expiration.ms (batch timestamps are 1000..).
    log.update_config(LogConfig {
        producer_id_expiration_ms: 60_000,
        ..config()
    });
    log.tick(30_000).unwrap();
    assert_eq!(log.producers().len(), 1);
    log.tick(100_000).unwrap();
    assert!(log.producers().is_empty());
    // Unknown again: any sequence is accepted.
    log.append_as_leader(&mut batch(5, 0, 999, 1), 0, 0)
        .unwrap();
}

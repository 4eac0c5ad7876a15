//! Unit tests of the whole `Log` (model-based property tests live in `tests/`).

use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::batch::{BatchIter, RecordBatch};

use crate::{Log, LogConfig, LogError, TimestampType};

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

fn batch(n: usize, ts: i64) -> Vec<u8> {
    build_simple(
        BatchSpec {
            base_timestamp: ts,
            ..BatchSpec::default()
        },
        n,
        20,
    )
}

/// All batches in a read, as (base offset, last offset).
fn offsets_of(info: &crate::ReadInfo) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for slice in &info.slices {
        for item in BatchIter::new(slice) {
            let (_, b) = item.unwrap();
            b.verify_crc().unwrap();
            out.push((b.base_offset(), b.last_offset()));
        }
    }
    out
}

#[test]
fn append_read_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..100 {
        let mut b = batch(3, 1000 + i * 10);
        let info = log.append_as_leader(&mut b, 1, 5).unwrap();
        assert_eq!(info.first_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
        assert_eq!(info.record_count, 3);
    }
    assert_eq!(log.log_end_offset(), 300);
    assert!(log.segment_count() > 1, "small segments roll");
    let all = log.read(0, usize::MAX, i64::MAX, true).unwrap();
    let offs = offsets_of(&all);
    assert_eq!(offs.len(), 100);
    for (i, (b, l)) in offs.iter().enumerate() {
        assert_eq!((*b, *l), (i as i64 * 3, i as i64 * 3 + 2));
    }
    // Read from the middle of a batch returns that whole batch first.
    let mid = log.read(151, 1, i64::MAX, true).unwrap();
    assert_eq!(offsets_of(&mid), vec![(150, 152)]);
    // max_offset bounds the read.
    let hw = log.read(0, usize::MAX, 9, true).unwrap();
    assert_eq!(offsets_of(&hw).last().unwrap().1, 8);
    // Offsets out of range.
    assert!(matches!(
        log.read(301, 10, i64::MAX, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(log.read(300, 10, i64::MAX, true).unwrap().slices.is_empty());
    // Timestamps: record i of batch k has ts 1000 + 10k + i.
    assert_eq!(log.offset_for_timestamp(1001).unwrap(), Some((1, 1001)));
    assert_eq!(log.offset_for_timestamp(1003).unwrap(), Some((3, 1010)));
    assert_eq!(log.offset_for_timestamp(5000).unwrap(), None);
    assert_eq!(log.max_timestamp_and_offset(), Some((299, 1992)));
    assert_eq!(log.latest_epoch(), Some(1));
    log.close().unwrap();

    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 300);
    assert_eq!(
        offsets_of(&log.read(0, usize::MAX, i64::MAX, true).unwrap()).len(),
        100
    );
    assert_eq!(log.offset_for_timestamp(1003).unwrap(), Some((3, 1010)));
    assert_eq!(log.max_timestamp_and_offset(), Some((299, 1992)));
    assert_eq!(log.end_offset_for_epoch(1), Some((1, 300)));
}

/// Index files of the sealed segments under `dir`, with their lengths (the active one excluded).
fn sealed_index_lengths(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".index") || n.ends_with(".timeindex"))
        .collect();
    names.sort();
    let last_base = names
        .iter()
        .map(|n| n.split('.').next().unwrap())
        .max()
        .unwrap()
        .to_string();
    names
        .into_iter()
        .filter(|n| !n.starts_with(&last_base))
        .map(|n| {
            let len = std::fs::metadata(dir.join(&n)).unwrap().len();
            (n, len)
        })
        .collect()
}

#[test]
fn unclean_recovery_trims_the_rebuilt_indexes_of_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..200 {
        log.append_as_leader(&mut batch(2, i), 0, 0).unwrap();
    }
    assert!(log.segment_count() > 2);
    drop(log); // unclean: every segment is past the recovery point and rebuilt
    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    let sealed = sealed_index_lengths(dir.path());
    assert!(!sealed.is_empty());
    for (name, len) in &sealed {
        // Preallocated would be `segment_index_bytes` (4096); trimmed is a few entries.
        assert!(*len < 4096 - 12, "{name} left preallocated: {len} bytes");
        let entry = if name.ends_with(".timeindex") { 12 } else { 8 };
        assert_eq!(len % entry, 0, "{name}: {len} is not whole entries");
    }
    log.close().unwrap();
    // A clean open trusts those trimmed indexes and reads everything back.
    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 400);
    assert_eq!(
        offsets_of(&log.read(0, usize::MAX, i64::MAX, true).unwrap()).len(),
        200
    );
    assert_eq!(sealed_index_lengths(dir.path()), sealed);
}

#[test]
fn unclean_reopen_recovers_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..50 {
        log.append_as_leader(&mut batch(2, i), 0, 0).unwrap();
    }
    drop(log); // no close: no clean-shutdown marker
    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(
        offsets_of(&log.read(0, usize::MAX, i64::MAX, true).unwrap()).len(),
        50
    );
}

#[test]
fn rejects_bad_batches_with_kafka_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    let mut b = batch(2, 0);
    let last = b.len() - 1;
    b[last] ^= 0xff;
    assert_eq!(
        log.append_as_leader(&mut b, 0, 0).unwrap_err().kafka_code(),
        2
    );
    let mut big = build_simple(BatchSpec::default(), 10, 200_000);
    assert_eq!(
        log.append_as_leader(&mut big, 0, 0)
            .unwrap_err()
            .kafka_code(),
        10
    );
    let mut short = batch(2, 0);
    short.truncate(30);
    assert_eq!(
        log.append_as_leader(&mut short, 0, 0)
            .unwrap_err()
            .kafka_code(),
        2
    );
    let mut magic = batch(1, 0);
    magic[16] = 1;
    assert_eq!(
        log.append_as_leader(&mut magic, 0, 0)
            .unwrap_err()
            .kafka_code(),
        2
    );
    let compact = LogConfig {
        compact: true,
        ..small_config()
    };
    log.update_config(compact);
    assert_eq!(
        log.append_as_leader(&mut batch(1, 0), 0, 0)
            .unwrap_err()
            .kafka_code(),
        87
    );
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn log_append_time_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        timestamp_type: TimestampType::LogAppendTime,
        ..small_config()
    };
    let mut log = Log::open(dir.path(), config, 0).unwrap();
    let info = log.append_as_leader(&mut batch(3, 5), 0, 777).unwrap();
    assert_eq!(info.log_append_time_ms, 777);
    assert_eq!(info.max_timestamp, 777);
    let read = log.read(0, 1000, i64::MAX, true).unwrap();
    let b = RecordBatch::parse(&read.slices[0]).unwrap();
    assert!(b.is_log_append_time());
    b.verify_crc().unwrap();
    assert_eq!(log.offset_for_timestamp(700).unwrap(), Some((0, 777)));
}

#[test]
fn truncate_delete_records_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..60 {
        log.append_as_leader(&mut batch(2, i * 100), (i / 20) as i32, 0)
            .unwrap();
    }
    let held = log.read(0, usize::MAX, i64::MAX, true).unwrap();
    log.truncate_to(71).unwrap();
    assert_eq!(log.log_end_offset(), 70);
    assert_eq!(log.latest_epoch(), Some(1));
    // Slices read before the truncation are still intact.
    assert_eq!(offsets_of(&held).len(), 60);
    log.append_as_leader(&mut batch(2, 0), 4, 0).unwrap();
    assert_eq!(log.log_end_offset(), 72);
    log.set_high_watermark(72);
    assert_eq!(log.delete_records_before(33).unwrap(), 33);
    assert!(matches!(
        log.read(10, 100, i64::MAX, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(log.delete_records_before(100).is_err());
    // Retention by time: every record is older than 1s at t = 10_000.
    log.update_config(LogConfig {
        retention_ms: 1000,
        retention_check_interval_ms: 0,
        ..small_config()
    });
    log.tick(10_000).unwrap();
    assert_eq!(log.log_start_offset(), 72);
    assert_eq!(log.log_end_offset(), 72);
    log.append_as_leader(&mut batch(2, 20_000), 4, 0).unwrap();
    assert_eq!(
        offsets_of(&log.read(72, 1000, i64::MAX, true).unwrap()),
        vec![(72, 73)]
    );
    log.truncate_fully_and_start_at(500).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
}

#[test]
fn group_commit_shares_fsyncs() {
    use std::sync::{Arc, Mutex};
    const THREADS: usize = 8;
    const APPENDS_PER_THREAD: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(
        Log::open(dir.path(), small_config(), 0).unwrap(),
    ));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for _ in 0..APPENDS_PER_THREAD {
                    let ticket = {
                        let mut log = log.lock().unwrap();
                        log.append_as_leader(&mut batch(2, 0), 0, 0).unwrap();
                        log.flush_ticket()
                    };
                    ticket.wait().unwrap();
                    assert!(ticket.is_durable());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let log = log.lock().unwrap();
    let group = log.group_commit();
    assert_eq!(
        group.durable_offset(),
        (THREADS * APPENDS_PER_THREAD * 2) as i64
    );
    // Every wait is covered, with fewer fsyncs than waiters.
    assert!(group.sync_count() <= (THREADS * APPENDS_PER_THREAD) as u64);
}

#[test]
fn flush_messages_policy_advances_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_messages: 4,
        ..small_config()
    };
    let mut log = Log::open(dir.path(), config, 0).unwrap();
    log.append_as_leader(&mut batch(2, 0), 0, 0).unwrap();
    assert_eq!(log.recovery_point(), 0);
    log.append_as_leader(&mut batch(2, 0), 0, 0).unwrap();
    assert_eq!(log.recovery_point(), 4);
    let config = LogConfig {
        flush_ms: 100,
        ..small_config()
    };
    log.update_config(config);
    log.append_as_leader(&mut batch(2, 0), 0, 0).unwrap();
    log.tick(50).unwrap();
    assert_eq!(log.recovery_point(), 4);
    log.tick(1000).unwrap();
    assert_eq!(log.recovery_point(), 6);
}

#[test]
fn clean_marker_survives_an_untouched_open_and_goes_on_first_append() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join(crate::checkpoint::CLEAN_SHUTDOWN_FILE);
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..20 {
        log.append_as_leader(&mut batch(3, i), 0, 0).unwrap();
    }
    log.close().unwrap();
    assert!(marker.exists());
    // Open and drop without changes: still clean (nothing changed on disk).
    drop(Log::open(dir.path(), small_config(), 0).unwrap());
    assert!(marker.exists());
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    log.append_as_leader(&mut batch(3, 99), 0, 0).unwrap();
    assert!(!marker.exists(), "the first append removes the marker");
    let end = log.log_end_offset();
    drop(log); // crash
    // Unclean now: the tail is scanned, and more appends work.
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(
        offsets_of(&log.read(0, usize::MAX, i64::MAX, true).unwrap()).len(),
        21
    );
    log.append_as_leader(&mut batch(1, 0), 0, 0).unwrap();
}

#[test]
fn sealed_segments_without_index_entries_reopen_without_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    // Tiny batches far below index.interval.bytes, one segment per batch (segment.ms = 0).
    let config = LogConfig {
        segment_ms: 0,
        ..small_config()
    };
    let mut log = Log::open(dir.path(), config.clone(), 0).unwrap();
    for i in 0..5 {
        log.append_as_leader(&mut batch(1, i), 0, 1_000_000)
            .unwrap();
    }
    assert_eq!(log.segment_count(), 5);
    log.close().unwrap();
    for _ in 0..2 {
        let log = Log::open(dir.path(), config.clone(), 0).unwrap();
        assert_eq!(log.log_end_offset(), 5);
        log.close().unwrap();
    }
    // Sealed segments' index files stay trimmed (empty), not preallocated.
    let first = dir.path().join(format!("{}.index", crate::file_stem(0)));
    assert_eq!(std::fs::metadata(first).unwrap().len(), 0);
}

/// Counts WARN and ERROR events emitted on the current thread (a scoped `tracing` subscriber).
#[derive(Default)]
struct WarnCounter(std::sync::atomic::AtomicUsize);

impl tracing::Subscriber for WarnCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() <= tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn clean_close_and_reopen_neither_rebuilds_nor_warns() {
    // Multi-record batches: the first batch's last offset differs from the segment's base
    // offset (a clean reopen used to mistake that for a bad index entry when the segment had
    // no offset-index entry yet, and rebuild it with a warning).
    let counter = std::sync::Arc::new(WarnCounter::default());
    let dispatch = tracing::Dispatch::from(std::sync::Arc::clone(&counter));
    tracing::dispatcher::with_default(&dispatch, || {
        for (records, batches) in [(245, 1), (10, 3), (50, 40)] {
            let dir = tempfile::tempdir().unwrap();
            let config = LogConfig {
                index_interval_bytes: 4096,
                ..LogConfig::default()
            };
            let mut log = Log::open(dir.path(), config.clone(), 0).unwrap();
            for i in 0..batches {
                log.append_as_leader(&mut batch(records, 1000 + i), 0, 0)
                    .unwrap();
            }
            let mut end = log.log_end_offset();
            log.close().unwrap();
            for round in 0..2 {
                let mut log = Log::open(dir.path(), config.clone(), 0).unwrap();
                assert_eq!(log.segments_rebuilt_at_open(), 0, "round {round}");
                assert_eq!(log.log_end_offset(), end);
                assert!(log.max_timestamp_and_offset().is_some());
                let mut more = batch(records, 5000);
                let info = log.append_as_leader(&mut more, 0, 0).unwrap();
                assert_eq!(info.first_offset, end);
                end = log.log_end_offset();
                log.close().unwrap();
            }
        }
    });
    assert_eq!(
        counter.0.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no warning on a clean reopen"
    );
}

#[test]
fn preallocation_keeps_the_logical_size_and_is_released_on_roll_and_close() {
    use std::os::unix::fs::MetadataExt;
    const WINDOW_BYTES: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 64 << 10,
        preallocate_window_bytes: WINDOW_BYTES,
        ..LogConfig::default()
    };
    let first = dir.path().join(format!("{}.log", crate::file_stem(0)));
    let allocated = |p: &std::path::Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let mut log = Log::open(dir.path(), config.clone(), 0).unwrap();
    log.append_as_leader(&mut batch(10, 1), 0, 0).unwrap();
    let size = log.size_bytes();
    // The file's size is the logical end (readers, recovery and uploads see no tail) ...
    assert_eq!(std::fs::metadata(&first).unwrap().len(), size);
    // ... while blocks past it are reserved (capped at segment.bytes) where the file system
    // supports fallocate.
    let reserved = allocated(&first);
    eprintln!("segment of {size} bytes has {reserved} bytes allocated");
    assert!(reserved <= config.segment_bytes + 4096, "{reserved}");
    // Roll: the sealed segment gives its reservation back.
    while log.segment_count() == 1 {
        log.append_as_leader(&mut batch(100, 2), 0, 0).unwrap();
    }
    let sealed_size = std::fs::metadata(&first).unwrap().len();
    assert!(allocated(&first) <= sealed_size.next_multiple_of(4096));
    // Crash with a reservation on the active segment: recovery sees exactly what was written.
    let end = log.log_end_offset();
    drop(log);
    let log = Log::open(dir.path(), config.clone(), 0).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(
        offsets_of(&log.read(0, usize::MAX, i64::MAX, true).unwrap())
            .last()
            .unwrap()
            .1,
        end - 1
    );
    let active = dir.path().join(format!(
        "{}.log",
        crate::file_stem(*log.segment_base_offsets().last().unwrap())
    ));
    log.close().unwrap();
    // Clean close releases the active segment's reservation too.
    let active_size = std::fs::metadata(&active).unwrap().len();
    assert!(allocated(&active) <= active_size.next_multiple_of(4096));
}

#[test]
fn epoch_start_assigned_on_becoming_leader_is_not_rewritten_by_appends() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join(crate::checkpoint::LEADER_EPOCH_FILE);
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    let mut b = batch(2, 1000);
    log.append_as_leader(&mut b, 0, 5).unwrap();
    // A new leader epoch starts at the log end offset, written when leadership begins.
    log.assign_epoch_start_offset(3).unwrap();
    assert_eq!(log.leader_epochs(), &[(0, 0), (3, 2)]);
    let written = std::fs::metadata(&ckpt).unwrap().modified().unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&ckpt).unwrap());
    // The epoch's appends find it assigned: the checkpoint file is not replaced.
    for i in 0..5 {
        let mut b = batch(2, 2000 + i);
        log.append_as_leader(&mut b, 3, 5).unwrap();
    }
    let after = std::fs::metadata(&ckpt).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&after), inode);
    assert_eq!(after.modified().unwrap(), written);
    // Assigning the same epoch again, or an older one, changes nothing.
    log.assign_epoch_start_offset(3).unwrap();
    log.assign_epoch_start_offset(1).unwrap();
    assert_eq!(log.leader_epochs(), &[(0, 0), (3, 2)]);
    drop(log);
    let log = Log::open(dir.path(), small_config(), 0).unwrap();
    assert_eq!(log.leader_epochs(), &[(0, 0), (3, 2)]);
}

/// The wire codes of `LogError` are Kafka's (and did not change when they moved to
/// `ResponseError`).
#[test]
fn log_errors_carry_kafkas_wire_codes() {
    let s = || String::from("x");
    let cases: [(LogError, i16); 10] = [
        (LogError::CorruptMessage(s()), 2),
        (LogError::InvalidRecord(s()), 87),
        (LogError::MessageTooLarge { size: 2, max: 1 }, 10),
        (
            LogError::OffsetOutOfRange {
                offset: 9,
                log_start: 0,
                log_end: 1,
            },
            1,
        ),
        (LogError::InvalidTimestamp(s()), 32),
        (LogError::UnsupportedMagic(1), 2),
        (LogError::Corrupted(s()), 56),
        (LogError::Io(std::io::Error::other("x")), 56),
        (LogError::OutOfOrderSequence(s()), 45),
        (LogError::InvalidProducerEpoch(s()), 47),
    ];
    for (e, code) in cases {
        assert_eq!(e.kafka_code(), code, "{e}");
    }
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_that_holds_no_record() {
    // A replica led epoch 1 from its log end (360) and lost leadership before any append; the
    // new leader's log has no epoch 1. Its diverging-epoch answer is "epoch 0 ends at 360":
    // the follower truncates to 360, its log end. Epoch 1 must go, or the follower would send
    // it as its last fetched epoch, get the same answer, and never fetch again.
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(), 0).unwrap();
    for i in 0..3 {
        log.append_as_leader(&mut batch(120, i * 100), 0, 0)
            .unwrap();
    }
    assert_eq!(log.log_end_offset(), 360);
    log.assign_epoch_start_offset(1).unwrap();
    assert_eq!(log.latest_epoch(), Some(1));
    log.truncate_to(360).unwrap();
    assert_eq!(log.log_end_offset(), 360);
    assert_eq!(log.latest_epoch(), Some(0));
    assert_eq!(log.leader_epochs(), &[(0, 0)]);
    // An epoch with records stays: truncating at the log end removes no record.
    log.append_as_leader(&mut batch(2, 0), 2, 0).unwrap();
    log.truncate_to(362).unwrap();
    assert_eq!((log.log_end_offset(), log.latest_epoch()), (362, Some(2)));
}

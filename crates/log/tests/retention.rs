//! Time retention as Kafka does it: a segment's age is measured from its largest record
//! timestamp, or from its file's modification time when no record carries one (timestamp -1),
//! and retention is checked every `retention_check_interval_ms`, not at every tick. Before the
//! fix, records without timestamps counted as infinitely old and were deleted within a second
//! of their write.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use streamforge_log::{Log, LogConfig, file_stem};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

fn wall_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn config(retention_ms: i64, check_interval_ms: i64) -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        segment_index_bytes: 4096,
        retention_ms,
        retention_check_interval_ms: check_interval_ms,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    }
}

/// `batches` batches of one record each with timestamp `ts` (-1 = NO_TIMESTAMP: a one-record
/// batch's max timestamp is its base timestamp).
fn fill(log: &mut Log, batches: usize, ts: i64, now_ms: i64) {
    for _ in 0..batches {
        let mut b = build_simple(
            BatchSpec {
                base_timestamp: ts,
                ..BatchSpec::default()
            },
            1,
            200,
        );
        log.append_as_leader(&mut b, 0, now_ms).unwrap();
    }
    let end = log.log_end_offset();
    log.set_high_watermark(end);
}

fn set_mtime(dir: &Path, base: i64, ms_ago: u64) {
    let f = File::options()
        .write(true)
        .open(dir.join(format!("{}.log", file_stem(base))))
        .unwrap();
    f.set_modified(SystemTime::now() - Duration::from_millis(ms_ago))
        .unwrap();
}

#[test]
fn records_without_timestamps_age_from_the_file_modification_time() {
    let dir = tempfile::tempdir().unwrap();
    let now = wall_now_ms();
    let mut log = Log::open(dir.path(), config(60_000, 0), now).unwrap();
    fill(&mut log, 40, -1, now);
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 4);
    // Just written: nothing is old, however often retention runs.
    for t in [now, now + 1_000, now + 30_000] {
        log.tick(t).unwrap();
        assert_eq!(log.log_start_offset(), 0, "deleted at {t}");
    }
    // The two oldest segments were last modified 2 minutes ago: they go, the rest stays.
    set_mtime(dir.path(), bases[0], 120_000);
    set_mtime(dir.path(), bases[1], 120_000);
    log.tick(now + 30_000).unwrap();
    assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
    assert_eq!(log.log_start_offset(), bases[2]);
    // The active segment is written to right now: never deleted by time while recent.
    log.tick(now + 59_000).unwrap();
    assert_eq!(log.log_start_offset(), bases[2]);
}

#[test]
fn retention_runs_at_the_check_interval_and_deletes_1970_records_then() {
    let dir = tempfile::tempdir().unwrap();
    let opened = 1_000_000_000i64;
    let interval = 300_000;
    let mut log = Log::open(dir.path(), config(1_000, interval), opened).unwrap();
    // 1970-dated records (timestamps 0): as old as it gets, as Kafka sees them too.
    fill(&mut log, 30, 0, opened);
    let end = log.log_end_offset();
    for t in [
        opened,
        opened + 1_000,
        opened + 10_000,
        opened + interval - 1,
    ] {
        log.tick(t).unwrap();
        assert_eq!(
            log.log_start_offset(),
            0,
            "retention ran before the interval, at {t}"
        );
    }
    // At the interval: every segment is past retention, so the log rolls and all go (Kafka).
    log.tick(opened + interval).unwrap();
    assert_eq!(log.log_start_offset(), end);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.segment_count(), 1);
    // The next check is one interval later: new old records wait for it.
    fill(&mut log, 10, 0, opened + interval);
    log.tick(opened + 2 * interval - 1).unwrap();
    assert_eq!(log.log_start_offset(), end);
    log.tick(opened + 2 * interval).unwrap();
    assert_eq!(log.log_start_offset(), log.log_end_offset());
}

#[test]
fn recent_active_segment_stays_while_old_sealed_ones_go() {
    let dir = tempfile::tempdir().unwrap();
    let now = 5_000_000i64;
    let mut log = Log::open(dir.path(), config(10_000, 0), now).unwrap();
    fill(&mut log, 20, now - 60_000, now);
    fill(&mut log, 1, now, now);
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 2);
    log.tick(now + 1).unwrap();
    let active = *bases.last().unwrap();
    assert_eq!(
        log.log_start_offset(),
        active,
        "old segments go, the recent active one stays"
    );
    assert_eq!(log.segment_base_offsets(), vec![active]);
}

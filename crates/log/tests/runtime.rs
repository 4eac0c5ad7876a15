//! The injected runtime: logs of different `LogRuntime`s share no threads, dropping a runtime
//! stops its threads only, and a manual clock drives `segment.ms` and `retention.ms` without
//! sleeping.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use streamforge_log::{Log, LogConfig, LogRuntime};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::clock::{Clock, ManualClock};

const START_MS: i64 = 1_700_000_000_000;
/// Bound on waiting for a background thread to do its work.
const WAIT_MAX: Duration = Duration::from_secs(20);

fn batch(timestamp_ms: i64) -> Vec<u8> {
    build_simple(
        BatchSpec {
            base_timestamp: timestamp_ms,
            ..BatchSpec::default()
        },
        10,
        100,
    )
}

fn open(dir: &Path, runtime: &Arc<LogRuntime>, config: LogConfig) -> Log {
    let config = LogConfig {
        runtime: Arc::clone(runtime),
        ..config
    };
    Log::open(dir, config, runtime.now_ms()).unwrap()
}

/// Append one batch stamped with the runtime's clock.
fn append(log: &mut Log, runtime: &LogRuntime) {
    let now = runtime.now_ms();
    let info = log.append_as_leader(&mut batch(now), 0, now).unwrap();
    log.set_high_watermark(info.last_offset + 1);
}

/// Ask for a background flush and wait (bounded) until the runtime's flusher made it durable.
/// `clock` is the runtime's; it moves one simulated second first (the flush interval).
fn flush_in_background(log: &mut Log, runtime: &LogRuntime, clock: &ManualClock) {
    clock.advance(Duration::from_secs(1));
    assert!(log.request_background_flush(runtime.now_ms(), 1_000));
    let end = log.log_end_offset();
    let t0 = Instant::now();
    while log.recovery_point() < end {
        assert!(t0.elapsed() < WAIT_MAX, "background flush did not happen");
        std::thread::sleep(Duration::from_millis(5));
        log.tick(runtime.now_ms()).unwrap();
    }
}

#[test]
fn two_runtimes_have_their_own_threads_and_clocks() {
    let dir = tempfile::tempdir().unwrap();
    let clock_a = ManualClock::new(START_MS);
    let clock_b = ManualClock::new(START_MS + 3_600_000);
    let rt_a = LogRuntime::new(clock_a.clone());
    let rt_b = LogRuntime::new(clock_b.clone());
    let (threads_a, threads_b) = (rt_a.threads_running(), rt_b.threads_running());
    assert_eq!(threads_a.load(Ordering::SeqCst), 2, "flusher + reaper");
    assert_eq!(threads_b.load(Ordering::SeqCst), 2, "flusher + reaper");

    let mut log_a = open(&dir.path().join("a-0"), &rt_a, LogConfig::default());
    let mut log_b = open(&dir.path().join("b-0"), &rt_b, LogConfig::default());
    append(&mut log_a, &rt_a);
    append(&mut log_b, &rt_b);
    // Each log reads its own runtime's clock (record i is stamped base + i).
    assert_eq!(log_a.max_timestamp_and_offset().unwrap().1, START_MS + 9);
    assert_eq!(
        log_b.max_timestamp_and_offset().unwrap().1,
        clock_b.now_ms() + 9
    );
    flush_in_background(&mut log_a, &rt_a, &clock_a);
    flush_in_background(&mut log_b, &rt_b, &clock_b);

    // Dropping runtime A (its last handle goes with its log) joins A's threads only.
    drop(log_a);
    drop(rt_a);
    assert_eq!(threads_a.load(Ordering::SeqCst), 0);
    assert_eq!(threads_b.load(Ordering::SeqCst), 2);
    append(&mut log_b, &rt_b);
    flush_in_background(&mut log_b, &rt_b, &clock_b);
    drop(log_b);
    drop(rt_b);
    assert_eq!(threads_b.load(Ordering::SeqCst), 0);
}

#[test]
fn manual_clock_rolls_by_segment_ms_and_deletes_by_retention_ms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let rt = LogRuntime::new(clock.clone());
    let config = LogConfig {
        segment_ms: 60_000,
        retention_ms: 600_000,
        retention_check_interval_ms: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), &rt, config);
    append(&mut log, &rt);
    clock.advance(Duration::from_secs(30));
    append(&mut log, &rt);
    assert_eq!(log.segment_count(), 1, "younger than segment.ms: no roll");
    clock.advance(Duration::from_secs(31));
    append(&mut log, &rt);
    assert_eq!(log.segment_count(), 2, "segment.ms passed: rolled");
    let end = log.log_end_offset();

    // Over eleven simulated minutes later the active segment is past segment.ms (the tick
    // rolls it) and every sealed one past retention.ms: all data is gone, the offsets stay.
    clock.advance(Duration::from_secs(700));
    log.tick(rt.now_ms()).unwrap();
    assert_eq!(log.segment_count(), 1, "only the new, empty active segment");
    assert_eq!(log.log_start_offset(), end);
    assert_eq!(log.log_end_offset(), end);
}

//! Log cleaner benchmarks (docs/BENCHMARKS.md, "Log compaction"):
//!
//! 1. `throughput`: one cleaner pass on one thread over a sealed log of `RECORDS` records
//!    (`VALUE_BYTES`-byte values, `KEYS` keys overwritten round-robin, batches of
//!    `RECORDS_PER_BATCH`, uncompressed): MB/s of log read (the input), records removed.
//! 2. `append_p99`: append latency (taking the log's lock + `append_as_leader`) of one producer
//!    thread appending `APPEND_RECORDS_PER_BATCH`-record batches every `APPEND_INTERVAL`,
//!    first with no cleaner, then with the `LogCleaner` thread cleaning the same log (backoff
//!    0, dirty ratio 0: it cleans whenever a segment was sealed), in the same run.
//!
//! Run: `cargo bench -p streamforge-log --bench cleaner`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use streamforge_log::cleaner::{self, CleanerConfig, CleanerLogs, LockedLog, LogCleaner};
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};

const RECORDS: usize = 400_000;
const KEYS: usize = 20_000;
const VALUE_BYTES: usize = 100;
const RECORDS_PER_BATCH: usize = 200;
const APPEND_RECORDS_PER_BATCH: usize = 100;
const APPEND_INTERVAL: Duration = Duration::from_micros(500);
const PHASE: Duration = Duration::from_secs(8);
const NOW: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 << 20,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.0,
        ..LogConfig::default()
    }
}

/// An uncompressed batch of `n` records with keys `first_key..` (mod KEYS).
fn batch(first_key: usize, n: usize, value: &[u8]) -> Vec<u8> {
    let keys: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("key-{:08}", (first_key + i) % KEYS).into_bytes())
        .collect();
    let recs: Vec<_> = keys.iter().map(|k| (Some(&k[..]), Some(value))).collect();
    build_batch(
        BatchSpec {
            base_timestamp: NOW,
            ..BatchSpec::default()
        },
        &recs,
    )
}

fn fill(log: &mut Log, records: usize) -> u64 {
    let value = vec![b'v'; VALUE_BYTES];
    let mut bytes = 0u64;
    for i in (0..records).step_by(RECORDS_PER_BATCH) {
        let mut b = batch(i, RECORDS_PER_BATCH, &value);
        bytes += b.len() as u64;
        log.append_as_leader(&mut b, 0, NOW).unwrap();
    }
    bytes
}

fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(), NOW).unwrap();
    let bytes = fill(&mut log, RECORDS);
    log.tick(NOW + 2 * config().segment_ms).unwrap();
    let started = Instant::now();
    let cpu = cpu_time::ThreadTime::now();
    let stats = cleaner::clean_now(
        &mut log,
        None,
        128 << 20,
        NOW + 2 * config().segment_ms + 1,
        false,
    )
    .unwrap()
    .expect("a pass");
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu.elapsed().as_secs_f64();
    println!(
        "throughput: {:.1} MB read, {:.1} MB written, {} records removed, {} kept; \
         {:.3} s wall, {:.3} s CPU: {:.0} MB/s per core ({:.0} MB/s wall)",
        stats.bytes_read as f64 / 1e6,
        stats.bytes_written as f64 / 1e6,
        stats.records_removed,
        stats.records_kept,
        wall,
        cpu,
        stats.bytes_read as f64 / cpu / 1e6,
        stats.bytes_read as f64 / wall / 1e6,
    );
    assert_eq!(stats.records_kept as usize, KEYS);
    assert!(stats.bytes_read >= bytes * 9 / 10);
}

/// The log, and the longest time the cleaner held its lock (µs).
struct Shared(Arc<Mutex<Log>>, Arc<AtomicU64>);

impl LockedLog for Shared {
    fn with_log_locked(&self, f: &mut dyn FnMut(&mut Log)) -> bool {
        let mut log = self.0.lock();
        let held = Instant::now();
        f(&mut log);
        self.1
            .fetch_max(held.elapsed().as_micros() as u64, Ordering::Relaxed);
        true
    }
}

struct OneLog(Arc<Mutex<Log>>, Arc<AtomicU64>);

impl CleanerLogs for OneLog {
    fn logs(&self) -> Vec<Arc<dyn LockedLog>> {
        vec![Arc::new(Shared(Arc::clone(&self.0), Arc::clone(&self.1)))]
    }
}

/// Append for `PHASE`, returning each append's latency (lock + append) in microseconds.
fn append_phase(log: &Mutex<Log>, clock: &Arc<dyn Fn() -> i64 + Send + Sync>) -> Vec<u64> {
    let value = vec![b'v'; VALUE_BYTES];
    let mut latencies = Vec::new();
    let end = Instant::now() + PHASE;
    let mut key = 0usize;
    while Instant::now() < end {
        let mut b = batch(key, APPEND_RECORDS_PER_BATCH, &value);
        key += APPEND_RECORDS_PER_BATCH;
        let started = Instant::now();
        log.lock().append_as_leader(&mut b, 0, clock()).unwrap();
        latencies.push(started.elapsed().as_micros() as u64);
        std::thread::sleep(APPEND_INTERVAL);
    }
    latencies.sort_unstable();
    latencies
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn append_p99() {
    let dir = tempfile::tempdir().unwrap();
    let small = LogConfig {
        segment_bytes: 1 << 20,
        ..config()
    };
    let log = Arc::new(Mutex::new(Log::open(dir.path(), small, NOW).unwrap()));
    let base = Instant::now();
    let clock: Arc<dyn Fn() -> i64 + Send + Sync> =
        Arc::new(move || NOW + base.elapsed().as_millis() as i64);
    let without = append_phase(&log, &clock);
    let held_max_us = Arc::new(AtomicU64::new(0));
    let cleaner = LogCleaner::start(
        CleanerConfig {
            backoff_ms: 1,
            ..CleanerConfig::default()
        },
        Arc::new(OneLog(Arc::clone(&log), Arc::clone(&held_max_us))),
        Arc::clone(&clock),
    )
    .unwrap();
    let with = append_phase(&log, &clock);
    let totals = cleaner.totals();
    let (passes, read) = (
        totals.passes.load(Ordering::Relaxed),
        totals.bytes_read.load(Ordering::Relaxed),
    );
    drop(cleaner);
    for (name, l) in [("no cleaner", &without), ("cleaner running", &with)] {
        println!(
            "append_p99 {name:>15}: {} appends, p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs",
            l.len(),
            percentile(l, 0.5),
            percentile(l, 0.99),
            percentile(l, 0.999),
            l.last().copied().unwrap_or(0)
        );
    }
    println!(
        "append_p99: the cleaner made {passes} passes reading {:.1} MB meanwhile; it held the \
         log's lock at most {} µs at a time",
        read as f64 / 1e6,
        held_max_us.load(Ordering::Relaxed)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would too: run once either way.
    throughput();
    append_p99();
}

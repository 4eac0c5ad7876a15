//! Log benchmarks with the reference workload: batches of 2,000 records of 100 bytes, 10
//! partitions.
//!
//! - `append/…`: in-process `append_as_leader` (validate + CRC + offset patch + write + index),
//!   with and without the preallocation window, on disk and tmpfs.
//! - `read/…`: zero-copy reads of up to 1 MiB from random offsets.
//! - `recovery/…`: reopening a log of 1,000,000 100-byte messages after a clean shutdown and
//!   after an unclean one with nothing flushed (every batch CRC-checked, indexes rebuilt) or
//!   with everything flushed (the recovery point at the end: headers walked, nothing checked).
//!
//! Before criterion runs, a counting global allocator measures heap allocations per append on
//! the hot path (no roll in the window) and prints them.
//!
//! Run: `cargo bench -p streamforge-log --bench log`

use std::alloc::System;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const RECORDS_PER_BATCH: usize = 2_000;
const VALUE_BYTES: usize = 100;
const PARTITIONS: usize = 10;
const RECOVERY_MESSAGES: usize = 1_000_000;
/// Appends between retention passes in the append benchmark (keeps disk use bounded).
const RETENTION_EVERY_APPENDS: u64 = 256;

fn reference_batch() -> Vec<u8> {
    build_simple(
        BatchSpec {
            base_timestamp: 1_700_000_000_000,
            ..BatchSpec::default()
        },
        RECORDS_PER_BATCH,
        VALUE_BYTES,
    )
}

/// The append variants compared side by side in one run: (name, preallocation window).
const PREALLOCATE_VARIANTS: [(&str, u64); 2] = [("no_prealloc", 0), ("prealloc_16MiB", 16 << 20)];

fn bench_config(preallocate_window_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 20,
        retention_bytes: 256 << 20,
        preallocate_window_bytes,
        ..LogConfig::default()
    }
}

fn open_partitions(root: &Path, preallocate_window_bytes: u64) -> Vec<Log> {
    (0..PARTITIONS)
        .map(|p| {
            Log::open(
                &root.join(format!("bench-{p}")),
                bench_config(preallocate_window_bytes),
                0,
            )
            .unwrap()
        })
        .collect()
}

/// Where the benchmark logs live: the system temp dir (disk), and tmpfs when available (the
/// append path without the disk's writeback throttling).
fn bench_dirs() -> Vec<(&'static str, tempfile::TempDir)> {
    let mut dirs = vec![("disk", tempfile::tempdir().unwrap())];
    if Path::new("/dev/shm").is_dir()
        && let Ok(d) = tempfile::tempdir_in("/dev/shm")
    {
        dirs.push(("tmpfs", d));
    }
    dirs
}

/// This thread's scheduler figures from `/proc/thread-self/schedstat`: (ns on a CPU, ns
/// waiting for one). Linux only; zeros elsewhere.
fn schedstat_ns() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// The benchmark's append loop body: round-robin over the partitions, retention every
/// `RETENTION_EVERY_APPENDS` (so the disk footprint stays bounded, as in a broker).
struct AppendLoop {
    logs: Vec<Log>,
    bufs: Vec<Vec<u8>>,
    i: u64,
}

impl AppendLoop {
    fn new(root: &Path, preallocate_window_bytes: u64) -> AppendLoop {
        AppendLoop {
            logs: open_partitions(root, preallocate_window_bytes),
            bufs: (0..PARTITIONS).map(|_| reference_batch()).collect(),
            i: 0,
        }
    }

    fn batch_bytes(&self) -> u64 {
        self.bufs[0].len() as u64
    }

    fn step(&mut self) -> i64 {
        let p = (self.i % PARTITIONS as u64) as usize;
        let info = self.logs[p]
            .append_as_leader(&mut self.bufs[p], 0, 0)
            .unwrap();
        self.logs[p].set_high_watermark(info.last_offset + 1);
        self.i += 1;
        if self.i.is_multiple_of(RETENTION_EVERY_APPENDS) {
            for log in self.logs.iter_mut() {
                log.tick(0).unwrap();
            }
        }
        info.last_offset
    }
}

/// Heap allocations per append on the hot path (no roll in the window), printed.
fn count_allocations() {
    const APPENDS: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let mut logs = open_partitions(dir.path(), PREALLOCATE_VARIANTS[1].1);
    let mut bufs: Vec<Vec<u8>> = (0..PARTITIONS).map(|_| reference_batch()).collect();
    // Warm up: first appends may create index entries etc.
    for i in 0..(PARTITIONS * 4) {
        let p = i % PARTITIONS;
        logs[p].append_as_leader(&mut bufs[p], 0, 0).unwrap();
    }
    let segments_before: usize = logs.iter().map(Log::segment_count).sum();
    let region = Region::new(GLOBAL);
    for i in 0..APPENDS as usize {
        let p = i % PARTITIONS;
        let info = logs[p].append_as_leader(&mut bufs[p], 0, 0).unwrap();
        let hw = info.last_offset + 1;
        logs[p].set_high_watermark(hw);
    }
    let stats = region.change();
    let segments_after: usize = logs.iter().map(Log::segment_count).sum();
    eprintln!(
        "log/append allocations: {} allocations, {} bytes over {APPENDS} appends = {:.3} allocations per append (segments rolled in window: {})",
        stats.allocations,
        stats.bytes_allocated,
        stats.allocations as f64 / APPENDS as f64,
        segments_after - segments_before
    );
}

/// CPU cost of the criterion loop (rolls and retention included), per variant, printed: the
/// append thread's CPU time (user + system), the whole process's CPU time (the same when no
/// helper thread runs; it would include one), wall clock, and how long the thread waited for
/// a CPU (other jobs on the machine) — so wall-clock figures can be read against the load.
/// Kernel writeback threads are not part of either CPU figure.
fn measure_cpu(name: &str, root: &Path, preallocate_window_bytes: u64) {
    const FRESH_APPENDS: u64 = 1_000; // as the earlier "log/append cost" line: no retention yet
    const STEADY_APPENDS: u64 = 6_000; // ~1.3 GB with rolls and retention deletes
    let mut lp = AppendLoop::new(root, preallocate_window_bytes);
    for _ in 0..PARTITIONS * 4 {
        lp.step();
    }
    measure_phase(&format!("{name} fresh"), &mut lp, FRESH_APPENDS);
    // Steady state: fill every partition past `retention.bytes` so the measured appends also
    // pay for rolls and for retention deleting old segments.
    let steady =
        (bench_config(0).retention_bytes as u64 / lp.batch_bytes() + 20) * PARTITIONS as u64;
    while lp.i < steady {
        lp.step();
    }
    measure_phase(&format!("{name} steady"), &mut lp, STEADY_APPENDS);
}

fn measure_phase(name: &str, lp: &mut AppendLoop, appends: u64) {
    let thread = cpu_time::ThreadTime::now();
    let process = cpu_time::ProcessTime::now();
    let (_, wait_before) = schedstat_ns();
    let wall = Instant::now();
    for _ in 0..appends {
        black_box(lp.step());
    }
    let wall = wall.elapsed().as_secs_f64();
    let thread = thread.elapsed().as_secs_f64();
    let process = process.elapsed().as_secs_f64();
    let waited = (schedstat_ns().1.saturating_sub(wait_before)) as f64 / 1e9;
    let gb = (lp.batch_bytes() * appends) as f64 / 1e9;
    eprintln!(
        "log/append cpu {name}: {:.1} us append-thread CPU per batch = {:.2} GB/s per core; process CPU {:.3} s/GB; wall {:.2} GB/s; of wall: {:.0}% waiting for a CPU, {:.0}% blocked",
        thread * 1e6 / appends as f64,
        gb / thread,
        process / gb,
        gb / wall,
        100.0 * waited / wall,
        100.0 * (wall - thread - waited).max(0.0) / wall,
    );
}

fn bench_append(c: &mut Criterion) {
    count_allocations();
    for (name, dir) in bench_dirs() {
        for (variant, window) in PREALLOCATE_VARIANTS {
            let sub = tempfile::tempdir_in(dir.path()).unwrap();
            measure_cpu(&format!("{name}/{variant}"), sub.path(), window);
        }
    }
    let mut group = c.benchmark_group("append");
    group.measurement_time(Duration::from_secs(8));
    for (name, dir) in bench_dirs() {
        for (variant, window) in PREALLOCATE_VARIANTS {
            // A fresh directory per variant, removed after it (tmpfs data lives in memory).
            let sub = tempfile::tempdir_in(dir.path()).unwrap();
            let mut lp = AppendLoop::new(sub.path(), window);
            group.throughput(Throughput::Bytes(lp.batch_bytes()));
            group.bench_function(
                format!("{name}/{variant}/2000x100B_batch_10_partitions"),
                |b| b.iter(|| black_box(lp.step())),
            );
            drop(lp);
            drop(sub);
        }
    }
    group.finish();
}

fn fill_log(dir: &Path, messages: usize) -> Log {
    let config = LogConfig::default();
    let mut log = Log::open(dir, config, 0).unwrap();
    let mut buf = reference_batch();
    for _ in 0..messages / RECORDS_PER_BATCH {
        log.append_as_leader(&mut buf, 0, 0).unwrap();
    }
    log
}

fn bench_read(c: &mut Criterion) {
    const READ_MAX_BYTES: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let log = fill_log(dir.path(), RECOVERY_MESSAGES);
    let end = log.log_end_offset();
    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Bytes(READ_MAX_BYTES as u64));
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    group.bench_function("1MiB_from_random_offset", |b| {
        b.iter(|| {
            // xorshift: cheap, deterministic offsets spread over the whole log
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let offset = (state % end.max(1) as u64) as i64;
            let info = log.read(offset, READ_MAX_BYTES, i64::MAX, true).unwrap();
            black_box(info.bytes)
        })
    });
    group.finish();
}

fn bench_recovery(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recovery-0");
    let log = fill_log(&path, RECOVERY_MESSAGES);
    let size = log.size_bytes();
    log.close().unwrap();
    eprintln!("recovery log: {RECOVERY_MESSAGES} messages, {size} bytes");
    let mut group = c.benchmark_group("recovery");
    group.sample_size(20);
    group.throughput(Throughput::Elements(RECOVERY_MESSAGES as u64));
    group.bench_function("clean_1M_messages", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let log = Log::open(&path, LogConfig::default(), 0).unwrap();
                total += start.elapsed();
                assert_eq!(log.log_end_offset(), RECOVERY_MESSAGES as i64);
                log.close().unwrap();
            }
            total
        })
    });
    group.bench_function("unclean_1M_messages_all_unflushed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Untimed: make the log look crashed with nothing flushed.
                let _ = std::fs::remove_file(path.join(".kafka_cleanshutdown"));
                std::fs::write(path.join("recovery-point-offset-checkpoint"), "0\n1\n0\n").unwrap();
                let start = Instant::now();
                let log = Log::open(&path, LogConfig::default(), 0).unwrap();
                total += start.elapsed();
                assert_eq!(log.log_end_offset(), RECOVERY_MESSAGES as i64);
                drop(log);
            }
            total
        })
    });
    group.bench_function("unclean_1M_messages_flushed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Untimed: crashed after a background flush reached the end (the usual state).
                let _ = std::fs::remove_file(path.join(".kafka_cleanshutdown"));
                let checkpoint = format!("0\n1\n{RECOVERY_MESSAGES}\n");
                std::fs::write(path.join("recovery-point-offset-checkpoint"), checkpoint).unwrap();
                let start = Instant::now();
                let log = Log::open(&path, LogConfig::default(), 0).unwrap();
                total += start.elapsed();
                assert_eq!(log.log_end_offset(), RECOVERY_MESSAGES as i64);
                assert_eq!(log.recovery_checked_bytes(), 0);
                drop(log);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, bench_append, bench_read, bench_recovery);
criterion_main!(benches);

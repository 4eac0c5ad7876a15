//! Log benchmarks with the reference workload: batches of 2,000 records of 100 bytes, 10
//! partitions.
//!
//! - `append/…`: in-process `append_as_leader` (validate + CRC + offset patch + write + index).
//! - `read/…`: zero-copy reads of up to 1 MiB from random offsets.
//! - `recovery/…`: reopening a log of 1,000,000 100-byte messages after a clean shutdown and
//!   after an unclean one with nothing flushed (every batch CRC-checked, indexes rebuilt).
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

fn bench_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 20,
        retention_bytes: 256 << 20,
        ..LogConfig::default()
    }
}

fn open_partitions(root: &Path) -> Vec<Log> {
    (0..PARTITIONS)
        .map(|p| Log::open(&root.join(format!("bench-{p}")), bench_config(), 0).unwrap())
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

/// Heap allocations per append on the hot path, and the CPU time an append costs (thread CPU
/// time, user + system: independent of how busy the machine is), printed (not timed by
/// criterion).
fn count_allocations() {
    const APPENDS: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let mut logs = open_partitions(dir.path());
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
    let cpu = cpu_time::ThreadTime::now();
    let wall = Instant::now();
    for i in 0..APPENDS as usize {
        let p = i % PARTITIONS;
        let info = logs[p].append_as_leader(&mut bufs[p], 0, 0).unwrap();
        logs[p].set_high_watermark(info.last_offset + 1);
    }
    let cpu = cpu.elapsed();
    let wall = wall.elapsed();
    let bytes = bufs[0].len() as f64 * APPENDS as f64;
    eprintln!(
        "log/append cost: {:.1} us CPU per {}-byte batch = {:.2} GB/s per CPU core ({:.2} GB/s wall clock, {} appends)",
        cpu.as_secs_f64() * 1e6 / APPENDS as f64,
        bufs[0].len(),
        bytes / cpu.as_secs_f64() / 1e9,
        bytes / wall.as_secs_f64() / 1e9,
        APPENDS
    );
    let segments_after: usize = logs.iter().map(Log::segment_count).sum();
    eprintln!(
        "log/append allocations: {} allocations, {} bytes over {APPENDS} appends = {:.3} allocations per append (segments rolled in window: {})",
        stats.allocations,
        stats.bytes_allocated,
        stats.allocations as f64 / APPENDS as f64,
        segments_after - segments_before
    );
}

fn bench_append(c: &mut Criterion) {
    count_allocations();
    let mut group = c.benchmark_group("append");
    group.measurement_time(Duration::from_secs(8));
    for (name, dir) in bench_dirs() {
        let mut logs = open_partitions(dir.path());
        let mut bufs: Vec<Vec<u8>> = (0..PARTITIONS).map(|_| reference_batch()).collect();
        group.throughput(Throughput::Bytes(bufs[0].len() as u64));
        let mut i = 0u64;
        group.bench_function(format!("{name}/2000x100B_batch_10_partitions"), |b| {
            b.iter(|| {
                let p = (i % PARTITIONS as u64) as usize;
                let info = logs[p].append_as_leader(&mut bufs[p], 0, 0).unwrap();
                logs[p].set_high_watermark(info.last_offset + 1);
                i += 1;
                if i.is_multiple_of(RETENTION_EVERY_APPENDS) {
                    for log in logs.iter_mut() {
                        log.tick(0).unwrap();
                    }
                }
                black_box(info)
            })
        });
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
    group.finish();
}

criterion_group!(benches, bench_append, bench_read, bench_recovery);
criterion_main!(benches);

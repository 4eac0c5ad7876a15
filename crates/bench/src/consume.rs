//! The consuming side of the throughput and recovery phases: whole batches from
//! `Consumer::poll_batches`, each CRC-verified, counted from the batch header (records count,
//! last offset), and checked for exactly-once delivery: per partition the batches must follow
//! each other without gap or overlap from the start offset to the end offset.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamforge_client::offsets::{self, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use streamforge_client::{Admin, Consumer, ConsumerConfig, OffsetReset};

use crate::phases::{DRAIN_TIMEOUT, client_config, spawn_reporter};
use crate::{BenchError, BenchParams, Phase, ProgressFn};

/// Largest partition fetch: bigger than the default 1 MiB so throughput is not request-bound.
const BENCH_PARTITION_FETCH_BYTES: i32 = 8 * 1024 * 1024;

pub fn consumer_config(bootstrap: &str) -> ConsumerConfig {
    ConsumerConfig {
        client: client_config(bootstrap),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        max_partition_fetch_bytes: BENCH_PARTITION_FETCH_BYTES,
        fetch_max_wait_ms: 100,
        // Verify every batch's CRC-32C.
        check_crcs: true,
        ..Default::default()
    }
}

/// One partition to read: topic, partition, first and end offset.
type Range = (String, i32, i64, i64);

/// Reads every partition from its start to its current end with `params.consumers` consumers.
/// Returns records, the time taken and the process CPU seconds used meanwhile. Every record is
/// counted exactly once or the phase fails.
pub async fn consume_all(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    phase: Phase,
    progress: &ProgressFn,
) -> Result<(u64, Duration, Option<f64>), BenchError> {
    let admin = Admin::new(client_config(bootstrap));
    let info = admin.describe_topics(&[topic.to_string()]).await?.remove(0);
    let query = |ts| -> Vec<_> {
        info.partitions
            .iter()
            .map(|p| ((topic.to_string(), p.partition), ts))
            .collect()
    };
    let ends = offsets::list_offsets(admin.cluster(), &query(LATEST_TIMESTAMP)).await?;
    let starts = offsets::list_offsets(admin.cluster(), &query(EARLIEST_TIMESTAMP)).await?;
    let ranges: Vec<Range> = info
        .partitions
        .iter()
        .map(|p| {
            let tp = (topic.to_string(), p.partition);
            let end = ends.get(&tp).map_or(0, |o| o.offset);
            let start = starts.get(&tp).map_or(0, |o| o.offset).min(end);
            (topic.to_string(), p.partition, start, end)
        })
        .collect();
    let total: u64 = ranges.iter().map(|r| (r.3 - r.2) as u64).sum();
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = spawn_reporter(
        phase,
        total,
        params.message_size as u64,
        counter.clone(),
        stop.clone(),
        progress.clone(),
    );
    let consumers = params.consumers.min(ranges.len()).max(1);
    let cpu_start = crate::cpu::process_cpu_seconds();
    let start = Instant::now();
    let mut handles = Vec::new();
    for c in 0..consumers {
        let mine: Vec<Range> = ranges
            .iter()
            .filter(|r| r.1 as usize % consumers == c)
            .cloned()
            .collect();
        let cfg = consumer_config(bootstrap);
        let counter = counter.clone();
        handles.push(tokio::spawn(async move {
            consume_ranges(cfg, mine, counter).await
        }));
    }
    let mut n = 0;
    for h in handles {
        n += h
            .await
            .map_err(|e| BenchError::Failed(format!("consumer task: {e}")))??;
    }
    let elapsed = start.elapsed();
    let cpu = crate::cpu::process_cpu_seconds()
        .zip(cpu_start)
        .map(|(b, a)| b - a);
    stop.store(true, Ordering::Release);
    let _ = reporter.await;
    if n != total {
        return Err(BenchError::Failed(format!(
            "consumed {n} records, the partitions hold {total}"
        )));
    }
    Ok((n, elapsed, cpu))
}

/// Consumes the given partitions from their start to their end offset, batch by batch.
async fn consume_ranges(
    cfg: ConsumerConfig,
    ranges: Vec<Range>,
    counter: Arc<AtomicU64>,
) -> Result<u64, BenchError> {
    let mut c = Consumer::new(cfg);
    c.assign(
        &ranges
            .iter()
            .map(|(t, p, _, _)| (t.clone(), *p))
            .collect::<Vec<_>>(),
    );
    // Next expected offset and end per partition.
    let mut expected: HashMap<i32, (i64, i64)> = HashMap::new();
    for (t, p, start, end) in &ranges {
        c.seek(t, *p, *start)?;
        expected.insert(*p, (*start, *end));
    }
    let mut n = 0u64;
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while expected.values().any(|(next, end)| next < end) {
        if Instant::now() > deadline {
            return Err(BenchError::Failed(format!(
                "consumer did not reach the end within {DRAIN_TIMEOUT:?}"
            )));
        }
        let batches = c.poll_batches(Duration::from_millis(500)).await?;
        let mut got = 0u64;
        for b in &batches {
            let Some((next, end)) = expected.get_mut(&b.partition) else {
                continue;
            };
            if b.first_offset >= *end {
                continue; // appended after the end was read
            }
            if b.first_offset != *next || b.last_offset >= *end {
                return Err(BenchError::Failed(format!(
                    "partition {}: batch {}..={} does not continue at offset {} (end {})",
                    b.partition, b.first_offset, b.last_offset, next, end
                )));
            }
            if i64::from(b.record_count) != b.last_offset - b.first_offset + 1 {
                return Err(BenchError::Failed(format!(
                    "partition {}: batch {}..={} holds {} records",
                    b.partition, b.first_offset, b.last_offset, b.record_count
                )));
            }
            *next = b.last_offset + 1;
            got += u64::from(b.record_count);
        }
        n += got;
        counter.fetch_add(got, Ordering::Relaxed);
    }
    Ok(n)
}

//! Adapts the bench library to the dashboard's benchmark hook: the dashboard's few knobs become
//! a `streamforge_bench::BenchParams` on the topic the dashboard created for the run, progress
//! is forwarded, and the result becomes the results table and latency chart.

use std::sync::Arc;

use streamforge_bench::{BenchResult, LatencySummary, Progress};
use streamforge_http::{
    BenchFuture, BenchParams, BenchProgress, BenchProgressSink, BenchReport, BenchRow, BenchRunner,
    BenchTarget, LatencyPoint,
};

/// The full-speed latency phase measures at most this many messages (it re-sends them).
const LATENCY_FULL_SPEED_MESSAGES_MAX: u64 = 100_000;
/// The rate-limited latency phase: short, so a dashboard run stays quick.
const LATENCY_AT_RATE_SECONDS: u64 = 2;

/// Runs `streamforge_bench::run` against the broker the dashboard lives in.
pub struct DashboardBench;

impl BenchRunner for DashboardBench {
    fn run(
        &self,
        target: BenchTarget,
        params: BenchParams,
        progress: BenchProgressSink,
    ) -> BenchFuture {
        Box::pin(async move {
            let bench_params = streamforge_bench::BenchParams {
                messages: params.messages,
                partitions: params.partitions as i32,
                batch_size: params.batch_size as usize,
                message_size: params.message_size as usize,
                acks: params.acks,
                topic: Some(target.topic.clone()),
                latency_full_speed_messages: params.messages.min(LATENCY_FULL_SPEED_MESSAGES_MAX),
                latency_seconds: LATENCY_AT_RATE_SECONDS,
                ..streamforge_bench::BenchParams::default()
            };
            let forward: streamforge_bench::ProgressFn = Arc::new(move |p: Progress| {
                progress(BenchProgress {
                    phase: p.phase.name().to_string(),
                    messages_done: p.done,
                    messages_total: p.total,
                    bytes_done: p.bytes_done,
                    elapsed_ms: p.elapsed_ms,
                })
            });
            let result = streamforge_bench::run(&target.bootstrap, &bench_params, forward, None)
                .await
                .map_err(|e| e.to_string())?;
            Ok(report(&result))
        })
    }
}

fn report(r: &BenchResult) -> BenchReport {
    let row = |metric: &str, value: f64, unit: &str| BenchRow {
        metric: metric.to_string(),
        value,
        unit: unit.to_string(),
    };
    let mut rows = vec![
        row("produce throughput", r.producer.msgs_per_sec, "msg/s"),
        row("produce throughput", r.producer.mb_per_sec, "MB/s"),
        row("consume throughput", r.consumer.msgs_per_sec, "msg/s"),
        row("consume throughput", r.consumer.mb_per_sec, "MB/s"),
    ];
    let mut latency = |label: &str, l: &LatencySummary| {
        rows.push(row(&format!("{label} p50"), l.p50, "ms"));
        rows.push(row(&format!("{label} p99"), l.p99, "ms"));
        rows.push(row(&format!("{label} p99.9"), l.p999, "ms"));
        rows.push(row(&format!("{label} max"), l.max, "ms"));
    };
    if let Some(l) = &r.latency_ms {
        latency("end-to-end latency (full speed)", l);
    }
    if let Some(l) = &r.latency_at_rate_ms {
        latency(
            &format!("end-to-end latency at {} msg/s", r.latency_rate),
            l,
        );
    }
    if let Some(l) = &r.ack_latency_ms {
        latency("ack latency (full speed)", l);
    }
    if let Some(l) = &r.ack_latency_at_rate_ms {
        latency(&format!("ack latency at {} msg/s", r.latency_rate), l);
    }
    rows.push(row("produce time", r.producer.seconds, "s"));
    rows.push(row("consume time", r.consumer.seconds, "s"));
    let chart = r.latency_ms.as_ref().or(r.latency_at_rate_ms.as_ref());
    let latency_percentiles = chart
        .map(|l| {
            [
                (50.0, l.p50),
                (95.0, l.p95),
                (99.0, l.p99),
                (99.9, l.p999),
                (100.0, l.max),
            ]
            .into_iter()
            .map(|(percentile, latency_ms)| LatencyPoint {
                percentile,
                latency_ms,
            })
            .collect()
        })
        .unwrap_or_default();
    BenchReport {
        rows,
        latency_percentiles,
        details: serde_json::to_value(r).unwrap_or_default(),
    }
}

/// The runner the broker command hands to the dashboard.
pub fn runner() -> Arc<dyn BenchRunner> {
    Arc::new(DashboardBench)
}

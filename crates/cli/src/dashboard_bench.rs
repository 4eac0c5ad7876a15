//! The benchmark the dashboard starts: produce `messages` records of `message_size` bytes into
//! the run's topic with the project's Kafka client (batches of `batch_size` records, the chosen
//! acks), then read them all back, measuring throughput both ways and the produce
//! acknowledgement latency (every record's send-to-ack time, from a sample of records).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use streamforge_client::{
    Acks, ClientConfig, Consumer, ConsumerConfig, DeliveryFuture, OffsetReset, Producer,
    ProducerConfig, ProducerRecord,
};
use streamforge_http::{
    BenchFuture, BenchParams, BenchProgress, BenchProgressSink, BenchReport, BenchRow, BenchRunner,
    BenchTarget, LatencyPoint,
};

/// Progress is reported at most this often.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);
/// One record in this many has its acknowledgement latency measured.
const LATENCY_SAMPLE_EVERY: u64 = 16;
/// Sampled deliveries waiting to be timed (bounds memory on huge runs).
const LATENCY_PENDING_MAX: usize = 100_000;
/// The consume phase gives up when no record arrived for this long.
const CONSUME_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Record overhead counted when sizing producer batches (varints, attributes, offsets).
const RECORD_OVERHEAD_BYTES: usize = 16;
const PERCENTILES: &[f64] = &[50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0];

/// Benchmarks through `streamforge-client`, against the broker the dashboard runs in.
pub struct ClientBench;

impl BenchRunner for ClientBench {
    fn run(
        &self,
        target: BenchTarget,
        params: BenchParams,
        progress: BenchProgressSink,
    ) -> BenchFuture {
        Box::pin(async move {
            run(target, params, progress)
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }
}

struct Reporter {
    sink: BenchProgressSink,
    started: Instant,
    last: Option<Instant>,
    total: u64,
}

impl Reporter {
    fn report(&mut self, phase: &str, done: u64, bytes: u64, force: bool) {
        let now = Instant::now();
        if !force
            && self
                .last
                .is_some_and(|t| now.duration_since(t) < PROGRESS_INTERVAL)
        {
            return;
        }
        self.last = Some(now);
        (self.sink)(BenchProgress {
            phase: phase.to_string(),
            messages_done: done,
            messages_total: self.total,
            bytes_done: bytes,
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        });
    }
}

async fn run(
    target: BenchTarget,
    params: BenchParams,
    sink: BenchProgressSink,
) -> anyhow::Result<BenchReport> {
    let mut reporter = Reporter {
        sink,
        started: Instant::now(),
        last: None,
        total: params.messages,
    };
    let message_size = params.message_size as usize;
    let acks = match params.acks {
        0 => Acks::None,
        1 => Acks::Leader,
        _ => Acks::All,
    };
    let producer = Producer::new(ProducerConfig {
        client: ClientConfig::new(&target.bootstrap),
        acks,
        batch_size_bytes: params.batch_size as usize * (message_size + RECORD_OVERHEAD_BYTES),
        linger_ms: 5,
        max_request_size_bytes: 64 * 1024 * 1024,
        allow_auto_create_topics: false,
        ..ProducerConfig::default()
    })
    .await?;

    // Produce, timing a sample of acknowledgements on a separate task.
    let (sampled_tx, mut sampled_rx) =
        tokio::sync::mpsc::channel::<(Instant, DeliveryFuture)>(LATENCY_PENDING_MAX);
    let timer = tokio::spawn(async move {
        let mut latency_us =
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        let mut failures = 0u64;
        while let Some((sent, delivery)) = sampled_rx.recv().await {
            match delivery.wait().await {
                Ok(_) => latency_us.saturating_record(sent.elapsed().as_micros().max(1) as u64),
                Err(_) => failures += 1,
            }
        }
        (latency_us, failures)
    });
    let value = vec![b'x'; message_size];
    let produce_started = Instant::now();
    let mut last_delivery = None;
    for i in 0..params.messages {
        let partition = (i % u64::from(params.partitions)) as i32;
        let record = ProducerRecord::new(&target.topic, &value).partition(partition);
        let sent = Instant::now();
        let delivery = producer.send(record).await?;
        if i % LATENCY_SAMPLE_EVERY == 0 {
            // A full channel only loses samples, never blocks the producer.
            let _ = sampled_tx.try_send((sent, delivery.clone()));
        }
        last_delivery = Some(delivery);
        reporter.report("produce", i + 1, (i + 1) * message_size as u64, false);
    }
    producer.flush().await?;
    if let Some(last) = last_delivery {
        last.wait().await?;
    }
    let produce_s = produce_started.elapsed().as_secs_f64();
    drop(sampled_tx);
    let (latency_us, failures) = timer.await?;
    producer.close().await?;
    if failures > 0 {
        anyhow::bail!("{failures} sampled records were not acknowledged");
    }
    reporter.report(
        "produce",
        params.messages,
        params.messages * message_size as u64,
        true,
    );

    // Consume everything back from the beginning.
    let mut consumer = Consumer::new(ConsumerConfig {
        client: ClientConfig::new(&target.bootstrap),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        ..ConsumerConfig::default()
    });
    let partitions: Vec<(String, i32)> = (0..params.partitions as i32)
        .map(|p| (target.topic.clone(), p))
        .collect();
    consumer.assign(&partitions);
    let consume_started = Instant::now();
    let mut consumed = 0u64;
    let mut consumed_bytes = 0u64;
    let mut last_record = Instant::now();
    // With acks=0 records may be lost; then the run ends after the idle timeout.
    while consumed < params.messages && last_record.elapsed() < CONSUME_IDLE_TIMEOUT {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if !records.is_empty() {
            last_record = Instant::now();
        }
        consumed += records.len() as u64;
        consumed_bytes += records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, |v| v.len()) as u64)
            .sum::<u64>();
        reporter.report("consume", consumed, consumed_bytes, false);
    }
    let consume_s = consume_started.elapsed().as_secs_f64();
    consumer.close().await?;
    reporter.report("consume", consumed, consumed_bytes, true);
    if consumed < params.messages && params.acks != 0 {
        anyhow::bail!(
            "consumed only {consumed} of {} acknowledged messages",
            params.messages
        );
    }

    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let produced_bytes = params.messages * message_size as u64;
    let ms = |us: u64| us as f64 / 1000.0;
    let mut rows = vec![
        row(
            "produce throughput",
            params.messages as f64 / produce_s,
            "msg/s",
        ),
        row(
            "produce throughput",
            mib(produced_bytes) / produce_s,
            "MiB/s",
        ),
        row("consume throughput", consumed as f64 / consume_s, "msg/s"),
        row(
            "consume throughput",
            mib(consumed_bytes) / consume_s,
            "MiB/s",
        ),
    ];
    if !latency_us.is_empty() {
        rows.push(row(
            "produce ack latency p50",
            ms(latency_us.value_at_quantile(0.5)),
            "ms",
        ));
        rows.push(row(
            "produce ack latency p99",
            ms(latency_us.value_at_quantile(0.99)),
            "ms",
        ));
        rows.push(row(
            "produce ack latency p99.9",
            ms(latency_us.value_at_quantile(0.999)),
            "ms",
        ));
        rows.push(row("produce ack latency max", ms(latency_us.max()), "ms"));
    }
    rows.push(row("produce time", produce_s, "s"));
    rows.push(row("consume time", consume_s, "s"));
    let latency_percentiles = if latency_us.is_empty() {
        Vec::new()
    } else {
        PERCENTILES
            .iter()
            .map(|&p| LatencyPoint {
                percentile: p,
                latency_ms: ms(latency_us.value_at_percentile(p)),
            })
            .collect()
    };
    Ok(BenchReport {
        rows,
        latency_percentiles,
        details: serde_json::json!({
            "topic": target.topic,
            "messages_produced": params.messages,
            "messages_consumed": consumed,
            "bytes_produced": produced_bytes,
            "latency_samples": latency_us.len(),
            "latency_sample_every": LATENCY_SAMPLE_EVERY,
        }),
    })
}

fn row(metric: &str, value: f64, unit: &str) -> BenchRow {
    BenchRow {
        metric: metric.to_string(),
        value,
        unit: unit.to_string(),
    }
}

/// The runner the broker command hands to the dashboard.
pub fn runner() -> Arc<dyn BenchRunner> {
    Arc::new(ClientBench)
}

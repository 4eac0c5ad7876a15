//! The benchmark phases.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamforge_client::offsets::{self, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use streamforge_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerConfig,
    ProducerRecord,
};
use tracing::info;

use crate::latency::{self, LatencySummary};
use crate::{
    BenchError, BenchParams, BenchResult, CrashControl, Phase, Progress, ProgressFn, Recovery,
    Throughput, Workload,
};

/// How often progress is reported.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// Upper bound on waiting for a phase to see all its messages after the last one was sent.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound on waiting for a restarted broker to serve.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(300);
/// Per-record overhead in a batch (length, attributes, deltas, key/value lengths, headers).
const RECORD_OVERHEAD_BYTES: usize = 12;
/// Largest partition fetch: bigger than the default 1 MiB so throughput is not request-bound.
const BENCH_PARTITION_FETCH_BYTES: i32 = 8 * 1024 * 1024;

fn client_config(bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
}

pub async fn run(
    bootstrap: &str,
    params: &BenchParams,
    progress: ProgressFn,
    crash: Option<&mut dyn CrashControl>,
) -> Result<BenchResult, BenchError> {
    let topic = params
        .topic
        .clone()
        .unwrap_or_else(|| format!("streamforge-bench-{}", latency_free_unique()));
    let admin = Admin::new(client_config(bootstrap));
    match admin
        .create_topics(
            &[NewTopic {
                name: topic.clone(),
                partitions: params.partitions,
                replication_factor: -1,
                configs: vec![],
            }],
            false,
        )
        .await
    {
        Ok(()) => {}
        Err(e) if e.kafka_code() == Some(36) && params.topic.is_some() => {}
        Err(e) => return Err(e.into()),
    }
    let brokers = admin.describe_cluster().await?.brokers.len();
    let mut acknowledged = 0u64;

    info!(topic, messages = params.messages, "produce phase");
    let (produced, elapsed) = produce(
        bootstrap,
        params,
        &topic,
        params.messages,
        None,
        Phase::Produce,
        &progress,
    )
    .await?;
    acknowledged += produced;
    let producer = Throughput::new(produced, produced * params.message_size as u64, elapsed);

    info!(topic, "consume phase");
    let (consumed, bytes, elapsed) =
        consume_all(bootstrap, params, &topic, Phase::Consume, &progress, false).await?;
    if consumed < produced {
        return Err(BenchError::Failed(format!(
            "consumed {consumed} of {produced} produced messages"
        )));
    }
    let consumer = Throughput::new(consumed, bytes, elapsed);

    let latency_ms = if params.latency_full_speed_messages > 0 {
        info!(topic, "latency phase at full speed");
        let (lat, acked) = latency_phase(
            bootstrap,
            params,
            &topic,
            params.latency_full_speed_messages,
            None,
            Phase::LatencyFullSpeed,
            &progress,
        )
        .await?;
        acknowledged += acked;
        lat
    } else {
        None
    };
    let latency_at_rate_ms = if params.latency_rate > 0 && params.latency_seconds > 0 {
        info!(
            topic,
            rate = params.latency_rate,
            "latency phase at a fixed rate"
        );
        let n = params.latency_rate * params.latency_seconds;
        let (lat, acked) = latency_phase(
            bootstrap,
            params,
            &topic,
            n,
            Some(params.latency_rate),
            Phase::LatencyAtRate,
            &progress,
        )
        .await?;
        acknowledged += acked;
        lat
    } else {
        None
    };

    let recovery = match crash {
        Some(c) => Some(recovery_phase(params, &topic, acknowledged, c, &progress).await?),
        None => None,
    };
    Ok(BenchResult {
        workload: Workload {
            brokers,
            partitions: params.partitions,
            messages: params.messages,
            message_size: params.message_size,
            batch_size: params.batch_size,
            acks: params.acks,
            producers: params.producers,
            consumers: params.consumers,
            compression: params.compression.clone(),
            idempotence: params.idempotence,
            topic,
            bootstrap: bootstrap.to_string(),
        },
        producer,
        consumer,
        latency_ms,
        latency_at_rate_ms,
        latency_rate: params.latency_rate,
        recovery,
    })
}

fn latency_free_unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn producer_config(
    bootstrap: &str,
    params: &BenchParams,
    linger_ms: u64,
) -> Result<ProducerConfig, BenchError> {
    let batch_bytes = params.batch_size * (params.message_size + RECORD_OVERHEAD_BYTES) + 128;
    Ok(ProducerConfig {
        client: client_config(bootstrap),
        acks: params.acks()?,
        batch_size_bytes: batch_bytes,
        linger_ms,
        compression: params.compression()?,
        enable_idempotence: params.idempotence,
        // Room for several batches per partition in flight.
        buffer_memory_bytes: (batch_bytes * params.partitions.max(1) as usize * 4)
            .clamp(32 << 20, 512 << 20),
        max_request_size_bytes: (batch_bytes * 2).max(1 << 20),
        allow_auto_create_topics: false,
        ..Default::default()
    })
}

/// Spawns a task that reports `counter` as progress until `stop` is set.
fn spawn_reporter(
    phase: Phase,
    total: u64,
    message_size: u64,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    progress: ProgressFn,
) -> tokio::task::JoinHandle<()> {
    let start = Instant::now();
    tokio::spawn(async move {
        loop {
            let done = counter.load(Ordering::Relaxed);
            progress(Progress {
                phase,
                done,
                total,
                bytes_done: done * message_size,
                elapsed_ms: start.elapsed().as_millis() as u64,
            });
            if stop.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(PROGRESS_INTERVAL).await;
        }
    })
}

/// Produces `messages` messages split over the producers, optionally at a fixed total rate.
/// Returns the acknowledged count and the time until the last acknowledgement.
async fn produce(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    messages: u64,
    rate: Option<u64>,
    phase: Phase,
    progress: &ProgressFn,
) -> Result<(u64, Duration), BenchError> {
    let linger = if rate.is_some() { 0 } else { params.linger_ms };
    let producers = params.producers as u64;
    let mut handles = Vec::new();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..producers {
        clients.push(Arc::new(
            Producer::new(producer_config(bootstrap, params, linger)?).await?,
        ));
    }
    // Progress counts acknowledged records across producers.
    let stats_clients = clients.clone();
    let acked_reporter = acked.clone();
    let stop_poll = stop.clone();
    let poller = tokio::spawn(async move {
        while !stop_poll.load(Ordering::Acquire) {
            let n: u64 = stats_clients.iter().map(|p| p.stats().records_acked).sum();
            acked_reporter.store(n, Ordering::Relaxed);
            tokio::time::sleep(PROGRESS_INTERVAL / 2).await;
        }
    });
    let reporter = spawn_reporter(
        phase,
        messages,
        params.message_size as u64,
        acked.clone(),
        stop.clone(),
        progress.clone(),
    );
    let start = Instant::now();
    for (i, p) in clients.iter().enumerate() {
        let share = messages / producers + u64::from((i as u64) < messages % producers);
        let p = p.clone();
        let topic = topic.to_string();
        let size = params.message_size;
        let per_producer_rate = rate.map(|r| (r / producers).max(1));
        handles.push(tokio::spawn(async move {
            produce_share(&p, &topic, share, size, per_producer_rate).await
        }));
    }
    for h in handles {
        h.await
            .map_err(|e| BenchError::Failed(format!("producer task: {e}")))??;
    }
    let elapsed = start.elapsed();
    let mut total_acked = 0;
    let mut failed = 0;
    for p in &clients {
        let s = p.stats();
        total_acked += s.records_acked;
        failed += s.records_failed;
    }
    acked.store(total_acked, Ordering::Relaxed);
    stop.store(true, Ordering::Release);
    let _ = poller.await;
    let _ = reporter.await;
    for p in clients {
        if let Ok(p) = Arc::try_unwrap(p) {
            p.close().await?;
        }
    }
    if failed > 0 {
        return Err(BenchError::Failed(format!(
            "{failed} messages were not acknowledged"
        )));
    }
    Ok((total_acked, elapsed))
}

async fn produce_share(
    p: &Producer,
    topic: &str,
    n: u64,
    size: usize,
    rate: Option<u64>,
) -> Result<(), BenchError> {
    let mut value = vec![b'x'; size];
    let start = Instant::now();
    for i in 0..n {
        if let Some(r) = rate {
            // Pace against the schedule so the average rate is exact.
            let due = start + Duration::from_secs_f64(i as f64 / r as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now())
                && wait > Duration::from_micros(200)
            {
                tokio::time::sleep(wait).await;
            }
        }
        latency::stamp(&mut value);
        p.send(ProducerRecord::new(topic, &value)).await?;
    }
    p.flush().await?;
    Ok(())
}

fn consumer_config(bootstrap: &str) -> ConsumerConfig {
    ConsumerConfig {
        client: client_config(bootstrap),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        max_partition_fetch_bytes: BENCH_PARTITION_FETCH_BYTES,
        fetch_max_wait_ms: 100,
        ..Default::default()
    }
}

/// Reads every partition from its start to its current end with `params.consumers` consumers.
/// Returns messages, value bytes and elapsed time.
async fn consume_all(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    phase: Phase,
    progress: &ProgressFn,
    check_crcs_only: bool,
) -> Result<(u64, u64, Duration), BenchError> {
    let admin = Admin::new(client_config(bootstrap));
    let info = admin.describe_topics(&[topic.to_string()]).await?.remove(0);
    let q_end: Vec<_> = info
        .partitions
        .iter()
        .map(|p| ((topic.to_string(), p.partition), LATEST_TIMESTAMP))
        .collect();
    let q_start: Vec<_> = info
        .partitions
        .iter()
        .map(|p| ((topic.to_string(), p.partition), EARLIEST_TIMESTAMP))
        .collect();
    let ends = offsets::list_offsets(admin.cluster(), &q_end).await?;
    let starts = offsets::list_offsets(admin.cluster(), &q_start).await?;
    let total: u64 = ends
        .iter()
        .map(|(tp, e)| (e.offset - starts.get(tp).map_or(0, |s| s.offset)).max(0) as u64)
        .sum();
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
    let consumers = params.consumers.min(info.partitions.len()).max(1);
    let start = Instant::now();
    let mut handles = Vec::new();
    for c in 0..consumers {
        let mine: Vec<(String, i32, i64)> = info
            .partitions
            .iter()
            .filter(|p| p.partition as usize % consumers == c)
            .map(|p| {
                (
                    topic.to_string(),
                    p.partition,
                    ends[&(topic.to_string(), p.partition)].offset,
                )
            })
            .collect();
        let cfg = consumer_config(bootstrap);
        let counter = counter.clone();
        handles.push(tokio::spawn(async move {
            consume_until(cfg, mine, counter).await
        }));
    }
    let (mut n, mut bytes) = (0, 0);
    for h in handles {
        let (a, b) = h
            .await
            .map_err(|e| BenchError::Failed(format!("consumer task: {e}")))??;
        n += a;
        bytes += b;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    let _ = reporter.await;
    let _ = check_crcs_only;
    Ok((n, bytes, elapsed))
}

/// Consumes the given partitions until each reaches its end offset.
async fn consume_until(
    cfg: ConsumerConfig,
    parts: Vec<(String, i32, i64)>,
    counter: Arc<AtomicU64>,
) -> Result<(u64, u64), BenchError> {
    let mut c = Consumer::new(cfg);
    c.assign(
        &parts
            .iter()
            .map(|(t, p, _)| (t.clone(), *p))
            .collect::<Vec<_>>(),
    );
    c.seek_to_beginning().await?;
    let (mut n, mut bytes) = (0u64, 0u64);
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        if parts
            .iter()
            .all(|(t, p, end)| c.position(t, *p).is_some_and(|pos| pos >= *end))
        {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Failed(format!(
                "consumer did not reach the end within {DRAIN_TIMEOUT:?}"
            )));
        }
        let recs = c.poll(Duration::from_millis(500)).await?;
        n += recs.len() as u64;
        bytes += recs
            .iter()
            .map(|r| r.value.as_ref().map_or(0, |v| v.len() as u64))
            .sum::<u64>();
        counter.fetch_add(recs.len() as u64, Ordering::Relaxed);
    }
    Ok((n, bytes))
}

/// Produces `n` messages (at `rate` per second, or full speed) while a consumer tails the
/// topic and records end-to-end latency. Returns the summary and the acknowledged count.
async fn latency_phase(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    n: u64,
    rate: Option<u64>,
    phase: Phase,
    progress: &ProgressFn,
) -> Result<(Option<LatencySummary>, u64), BenchError> {
    let admin = Admin::new(client_config(bootstrap));
    let info = admin.describe_topics(&[topic.to_string()]).await?.remove(0);
    let mut c = Consumer::new(ConsumerConfig {
        fetch_max_wait_ms: 500,
        ..consumer_config(bootstrap)
    });
    c.assign(
        &info
            .partitions
            .iter()
            .map(|p| (topic.to_string(), p.partition))
            .collect::<Vec<_>>(),
    );
    c.seek_to_end().await?;
    let seen = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let seen_c = seen.clone();
    let done_c = done.clone();
    let tail = tokio::spawn(async move {
        let mut h = latency::new_histogram();
        let deadline_after_done = DRAIN_TIMEOUT;
        let mut done_at: Option<Instant> = None;
        while seen_c.load(Ordering::Relaxed) < n {
            if done_c.load(Ordering::Acquire) {
                let t = *done_at.get_or_insert_with(Instant::now);
                if t.elapsed() > deadline_after_done {
                    break;
                }
            }
            let recs = c.poll(Duration::from_millis(100)).await?;
            for r in &recs {
                if let Some(sent) = r.value.as_deref().and_then(latency::read_stamp) {
                    latency::record(&mut h, sent);
                }
            }
            seen_c.fetch_add(recs.len() as u64, Ordering::Relaxed);
        }
        Ok::<_, BenchError>(h)
    });
    // Let the tailing consumer's first fetch reach the broker before producing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = spawn_reporter(
        phase,
        n,
        params.message_size as u64,
        seen.clone(),
        stop.clone(),
        progress.clone(),
    );
    let silent: ProgressFn = Arc::new(|_| {});
    let produced = produce(bootstrap, params, topic, n, rate, phase, &silent).await;
    done.store(true, Ordering::Release);
    let h = tail
        .await
        .map_err(|e| BenchError::Failed(format!("latency consumer: {e}")))??;
    stop.store(true, Ordering::Release);
    let _ = reporter.await;
    let (acked, _) = produced?;
    Ok((LatencySummary::from_histogram(&h), acked))
}

/// Crashes the broker, times the restart until it serves, and reads every acknowledged
/// message back with CRC checks.
async fn recovery_phase(
    params: &BenchParams,
    topic: &str,
    acknowledged: u64,
    crash: &mut dyn CrashControl,
    progress: &ProgressFn,
) -> Result<Recovery, BenchError> {
    progress(Progress {
        phase: Phase::Recovery,
        done: 0,
        total: acknowledged,
        bytes_done: 0,
        elapsed_ms: 0,
    });
    let start = Instant::now();
    let bootstrap = crash
        .crash_and_restart()
        .await
        .map_err(BenchError::Failed)?;
    // Serving = Metadata and ListOffsets answer for the topic.
    loop {
        let admin = Admin::new(client_config(&bootstrap));
        let ok = async {
            let info = admin.describe_topics(&[topic.to_string()]).await?.remove(0);
            let q: Vec<_> = info
                .partitions
                .iter()
                .map(|p| ((topic.to_string(), p.partition), LATEST_TIMESTAMP))
                .collect();
            offsets::list_offsets(admin.cluster(), &q).await
        }
        .await;
        if ok.is_ok() {
            break;
        }
        if start.elapsed() > RECOVERY_TIMEOUT {
            return Err(BenchError::Failed(format!(
                "broker did not serve within {RECOVERY_TIMEOUT:?} after restart"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    // Consumers verify every batch's CRC (check_crcs is on by default).
    let (validated, _, _) =
        consume_all(&bootstrap, params, topic, Phase::Recovery, progress, true).await?;
    if validated < acknowledged {
        return Err(BenchError::Failed(format!(
            "only {validated} of {acknowledged} acknowledged messages survived the crash"
        )));
    }
    Ok(Recovery {
        ms,
        validated_messages: validated,
        acknowledged_messages: acknowledged,
    })
}

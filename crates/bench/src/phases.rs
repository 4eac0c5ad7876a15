//! The benchmark phases.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamforge_client::offsets::{self, LATEST_TIMESTAMP};
use streamforge_client::{Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic};
use tokio::sync::Notify;
use tracing::info;

use crate::consume::{consume_all, consumer_config};
use crate::produce::{Pace, produce};

use crate::latency::{self, LatencySummary};
use crate::{
    BenchError, BenchParams, BenchResult, CrashControl, Phase, Progress, ProgressFn, Recovery,
    Throughput, Workload,
};

/// How often progress is reported.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// Upper bound on waiting for a phase to see all its messages after the last one was sent.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound on waiting for a restarted broker to serve.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(300);
/// Full-speed latency phase: records produced but not yet consumed, in batches
/// (`batch_size` records each). Bounds the queue so the latency measured is service time.
pub const LATENCY_WINDOW_BATCHES: u64 = 2;
/// Long-poll wait of the tailing consumer (it is answered as soon as data arrives).
const TAIL_FETCH_MAX_WAIT_MS: i32 = 100;
/// Longest a created topic may take to reach every broker's metadata.
const TOPIC_PROPAGATION_WAIT: Duration = Duration::from_secs(10);
/// Pause between two looks for a created topic.
const TOPIC_PROPAGATION_RETRY: Duration = Duration::from_millis(20);

pub(crate) fn client_config(bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap)
}

/// Describes a topic just created. Another broker of a cluster can answer before the new topic
/// reached its metadata (the creating broker answered once it had it; the others follow within
/// milliseconds), so UNKNOWN_TOPIC_OR_PARTITION is asked again, as Kafka's clients do, for at
/// most [`TOPIC_PROPAGATION_WAIT`].
async fn describe_created(
    admin: &Admin,
    topic: &str,
) -> Result<Vec<streamforge_client::TopicInfo>, BenchError> {
    let unknown = kafka_protocol::ResponseError::UnknownTopicOrPartition.code();
    let started = Instant::now();
    loop {
        match admin.describe_topics(&[topic.to_string()]).await {
            Err(e)
                if (e.kafka_code() == Some(unknown)
                    || matches!(
                        e,
                        streamforge_client::ClientError::UnknownTopicOrPartition(_)
                    ))
                    && started.elapsed() < TOPIC_PROPAGATION_WAIT =>
            {
                tokio::time::sleep(TOPIC_PROPAGATION_RETRY).await;
            }
            other => return Ok(other?),
        }
    }
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
    let topic_created = match admin
        .create_topics(
            &[NewTopic {
                name: topic.clone(),
                partitions: params.partitions,
                replication_factor: params.replication_factor,
                configs: vec![],
            }],
            false,
        )
        .await
    {
        Ok(()) => true,
        Err(e) if e.kafka_code() == Some(36) && params.topic.is_some() => false,
        Err(e) => return Err(e.into()),
    };
    let brokers = admin.describe_cluster().await?.brokers.len();
    // What the topic really got (a `-1` request takes the broker's default).
    let replication_factor = describe_created(&admin, &topic)
        .await?
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(0, |p| p.replicas.len());
    let mut acknowledged = 0u64;

    info!(topic, messages = params.messages, "produce phase");
    let run = produce(
        bootstrap,
        params,
        &topic,
        params.messages,
        Pace::FullSpeed,
        Phase::Produce,
        &progress,
    )
    .await?;
    let produced = run.acked;
    acknowledged += produced;
    let producer = Throughput::new(
        produced,
        produced * params.message_size as u64,
        run.elapsed,
        run.cpu_seconds,
    );
    let produce_ack_latency_ms = LatencySummary::from_histogram(&run.ack_latency);

    info!(topic, "consume phase");
    let (consumed, elapsed, cpu) =
        consume_all(bootstrap, params, &topic, Phase::Consume, &progress).await?;
    if consumed < produced {
        return Err(BenchError::Failed(format!(
            "consumed {consumed} of {produced} produced messages"
        )));
    }
    let consumer = Throughput::new(
        consumed,
        consumed * params.message_size as u64,
        elapsed,
        cpu,
    );

    let (latency_ms, ack_latency_ms) = if params.latency_full_speed_messages > 0 {
        info!(topic, "latency phase at full speed");
        let measured = latency_phase(
            bootstrap,
            params,
            &topic,
            params.latency_full_speed_messages,
            None,
            Phase::LatencyFullSpeed,
            &progress,
        )
        .await?;
        acknowledged += measured.acked;
        (measured.end_to_end, measured.ack)
    } else {
        (None, None)
    };
    let (latency_at_rate_ms, ack_latency_at_rate_ms) =
        if params.latency_rate > 0 && params.latency_seconds > 0 {
            info!(
                topic,
                rate = params.latency_rate,
                "latency phase at a fixed rate"
            );
            let n = params.latency_rate * params.latency_seconds;
            let measured = latency_phase(
                bootstrap,
                params,
                &topic,
                n,
                Some(params.latency_rate),
                Phase::LatencyAtRate,
                &progress,
            )
            .await?;
            acknowledged += measured.acked;
            (measured.end_to_end, measured.ack)
        } else {
            (None, None)
        };

    let recovery = match crash {
        Some(c) => Some(recovery_phase(params, &topic, acknowledged, c, &progress).await?),
        None => None,
    };
    Ok(BenchResult {
        workload: Workload {
            brokers,
            replication_factor,
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
            topic_created,
            embedded: false,
        },
        producer,
        consumer,
        latency_ms,
        latency_at_rate_ms,
        latency_rate: params.latency_rate,
        produce_ack_latency_ms,
        ack_latency_ms,
        ack_latency_at_rate_ms,
        recovery,
    })
}

fn latency_free_unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Spawns a task that reports `counter` as progress until `stop` is set.
pub(crate) fn spawn_reporter(
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

/// What a latency phase measured.
struct LatencyMeasured {
    /// Produce to the tailing consumer.
    end_to_end: Option<LatencySummary>,
    /// Send to the producer's acknowledgement.
    ack: Option<LatencySummary>,
    acked: u64,
}

/// Produces `n` messages (at `rate` per second, or full speed) while a consumer tails the
/// topic and records end-to-end latency; the producer times each acknowledgement.
async fn latency_phase(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    n: u64,
    rate: Option<u64>,
    phase: Phase,
    progress: &ProgressFn,
) -> Result<LatencyMeasured, BenchError> {
    let admin = Admin::new(client_config(bootstrap));
    let info = admin.describe_topics(&[topic.to_string()]).await?.remove(0);
    // fetch.min.bytes=1: the broker answers a tail fetch as soon as any record arrives.
    let mut c = Consumer::new(ConsumerConfig {
        fetch_max_wait_ms: TAIL_FETCH_MAX_WAIT_MS,
        fetch_min_bytes: 1,
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
    let progressed = Arc::new(Notify::new());
    let done = Arc::new(AtomicBool::new(false));
    let seen_c = seen.clone();
    let progressed_c = progressed.clone();
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
            progressed_c.notify_waiters();
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
    let pace = match rate {
        Some(r) => Pace::Rate(r),
        None => Pace::ClosedLoop {
            seen: seen.clone(),
            progressed,
            window: LATENCY_WINDOW_BATCHES * params.batch_size.max(1) as u64,
        },
    };
    let produced = produce(bootstrap, params, topic, n, pace, phase, &silent).await;
    done.store(true, Ordering::Release);
    let h = tail
        .await
        .map_err(|e| BenchError::Failed(format!("latency consumer: {e}")))??;
    stop.store(true, Ordering::Release);
    let _ = reporter.await;
    let produced = produced?;
    Ok(LatencyMeasured {
        end_to_end: LatencySummary::from_histogram(&h),
        ack: LatencySummary::from_histogram(&produced.ack_latency),
        acked: produced.acked,
    })
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
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    // Consumers verify every batch's CRC (check_crcs is on by default).
    let (validated, _, _) =
        consume_all(&bootstrap, params, topic, Phase::Recovery, progress).await?;
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

//! The producing side of the benchmark: whole chunks of records appended with
//! `Producer::send_batch` (one accumulator lock and one buffer-memory reservation per chunk),
//! optionally rate-limited, optionally closed-loop against a tailing consumer.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use streamforge_client::records::BatchBuilder;
use streamforge_client::{BatchRecord, Compression, Producer, ProducerConfig};

use crate::ack::{AckSender, AckTracker, Tracked};
use crate::latency;
use crate::phases::{PROGRESS_INTERVAL, client_config, spawn_reporter};
use crate::{BenchError, BenchParams, Phase, ProgressFn};

/// Produce requests in flight per broker (`max.in.flight.requests.per.connection`).
pub const MAX_IN_FLIGHT_REQUESTS: usize = 5;
/// Re-check interval of a producer waiting for the tailing consumer.
const CLOSED_LOOP_RECHECK: Duration = Duration::from_millis(5);
/// Smallest `max.request.size` (Kafka's default).
const MIN_REQUEST_SIZE_BYTES: usize = 1 << 20;

/// How the produce loop is driven.
#[derive(Clone)]
pub enum Pace {
    /// As fast as the producer accepts records (bounded by its buffer memory).
    FullSpeed,
    /// At most `window` records produced but not yet seen by the tailing consumer whose
    /// count is `seen` (it signals `progressed` after each poll): a closed loop, so latency
    /// is not a growing queue.
    ClosedLoop {
        seen: Arc<AtomicU64>,
        progressed: Arc<Notify>,
        window: u64,
    },
    /// This many records per second in total, one record at a time.
    Rate(u64),
}

/// Bytes of a batch holding `batch_size` values of `message_size` bytes (timestamp deltas 0),
/// so a batch closes on its record count rather than by linger.
pub fn batch_bytes(params: &BenchParams) -> usize {
    let value = vec![0u8; params.message_size];
    let mut b = BatchBuilder::new(Compression::None, 0);
    for _ in 0..params.batch_size {
        b.append(0, None, Some(&value), &[]);
    }
    b.size_bytes()
}

pub fn producer_config(
    bootstrap: &str,
    params: &BenchParams,
    linger_ms: u64,
    buffer_memory_bytes: Option<usize>,
) -> Result<ProducerConfig, BenchError> {
    let batch_bytes = batch_bytes(params);
    Ok(ProducerConfig {
        client: client_config(bootstrap),
        acks: params.acks()?,
        batch_size_bytes: batch_bytes,
        linger_ms,
        compression: params.compression()?,
        enable_idempotence: params.idempotence,
        max_in_flight_requests: MAX_IN_FLIGHT_REQUESTS,
        // Room for several batches per partition in flight.
        buffer_memory_bytes: buffer_memory_bytes.unwrap_or(
            (batch_bytes * params.partitions.max(1) as usize * 4).clamp(32 << 20, 512 << 20),
        ),
        max_request_size_bytes: (batch_bytes * 2).max(MIN_REQUEST_SIZE_BYTES),
        allow_auto_create_topics: false,
        ..Default::default()
    })
}

/// What a produce run did.
pub struct Produced {
    pub acked: u64,
    /// Until the last acknowledgement.
    pub elapsed: Duration,
    /// Process CPU seconds used meanwhile.
    pub cpu_seconds: Option<f64>,
    /// Per acknowledged record, send to acknowledgement, in microseconds.
    pub ack_latency: Histogram<u64>,
}

/// Produces `messages` messages split over the producers, timing each record's
/// acknowledgement.
pub async fn produce(
    bootstrap: &str,
    params: &BenchParams,
    topic: &str,
    messages: u64,
    pace: Pace,
    phase: Phase,
    progress: &ProgressFn,
) -> Result<Produced, BenchError> {
    let linger = match pace {
        Pace::Rate(_) => 0,
        _ => params.linger_ms,
    };
    // Closed loop: the producer holds at most max-in-flight batches per partition.
    let memory = match pace {
        Pace::ClosedLoop { .. } => {
            Some(batch_bytes(params) * MAX_IN_FLIGHT_REQUESTS * params.partitions.max(1) as usize)
        }
        _ => None,
    };
    let producers = params.producers as u64;
    let mut handles = Vec::new();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..producers {
        clients.push(Arc::new(
            Producer::new(producer_config(bootstrap, params, linger, memory)?).await?,
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
    let produced_total = Arc::new(AtomicU64::new(0));
    let acks = AckTracker::start();
    let cpu_start = crate::cpu::process_cpu_seconds();
    let start = Instant::now();
    for (i, p) in clients.iter().enumerate() {
        let share = messages / producers + u64::from((i as u64) < messages % producers);
        let p = p.clone();
        let topic = topic.to_string();
        let pace = match &pace {
            Pace::Rate(r) => Pace::Rate((r / producers).max(1)),
            other => other.clone(),
        };
        let job = ShareJob {
            share,
            size: params.message_size,
            chunk: params.batch_size.max(1),
            pace,
            produced_total: produced_total.clone(),
            acks: acks.sender(),
        };
        handles.push(tokio::spawn(
            async move { produce_share(&p, &topic, job).await },
        ));
    }
    for h in handles {
        h.await
            .map_err(|e| BenchError::Failed(format!("producer task: {e}")))??;
    }
    let elapsed = start.elapsed();
    let cpu = crate::cpu::process_cpu_seconds()
        .zip(cpu_start)
        .map(|(b, a)| b - a);
    // Every share flushed: the collector has seen (or is about to see) every completion.
    let ack_latency = acks.finish().await;
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
    Ok(Produced {
        acked: total_acked,
        elapsed,
        cpu_seconds: cpu,
        ack_latency,
    })
}

struct ShareJob {
    share: u64,
    size: usize,
    /// Records per `send_batch` call at full speed.
    chunk: usize,
    pace: Pace,
    /// Records appended by all producers (for the closed loop).
    produced_total: Arc<AtomicU64>,
    /// Where each send's delivery goes to be timed.
    acks: AckSender,
}

async fn produce_share(p: &Producer, topic: &str, job: ShareJob) -> Result<(), BenchError> {
    let chunk = match job.pace {
        Pace::Rate(_) => 1,
        _ => job.chunk,
    };
    let mut values = vec![vec![b'x'; job.size]; chunk];
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < job.share {
        let k = (chunk as u64).min(job.share - sent) as usize;
        match &job.pace {
            Pace::FullSpeed => {}
            Pace::Rate(r) => {
                // Pace against the schedule so the average rate is exact.
                let due = start + Duration::from_secs_f64(sent as f64 / *r as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now())
                    && wait > Duration::from_micros(200)
                {
                    tokio::time::sleep(wait).await;
                }
            }
            Pace::ClosedLoop {
                seen,
                progressed,
                window,
            } => {
                let limit = Instant::now() + crate::phases::DRAIN_TIMEOUT;
                loop {
                    let notified = progressed.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    if job.produced_total.load(Ordering::Relaxed) + k as u64
                        <= seen.load(Ordering::Relaxed) + window
                    {
                        break;
                    }
                    if Instant::now() > limit {
                        return Err(BenchError::Failed(
                            "the tailing consumer stopped making progress".into(),
                        ));
                    }
                    // Bounded wait: the consumer may signal between the check and here.
                    let _ = tokio::time::timeout(CLOSED_LOOP_RECHECK, notified).await;
                }
            }
        }
        // Stamped right before the append: latency counts from the moment a record is
        // handed to the producer.
        let now = latency::now_us();
        let records: Vec<BatchRecord<'_>> = values[..k]
            .iter_mut()
            .map(|v| {
                latency::stamp_at(v, now);
                BatchRecord::value(v)
            })
            .collect();
        let delivery = p.send_batch(topic, None, &records).await?;
        for t in Tracked::of(now, delivery) {
            job.acks
                .send(t)
                .await
                .map_err(|_| BenchError::Failed("the ack-latency collector stopped".into()))?;
        }
        job.produced_total.fetch_add(k as u64, Ordering::Relaxed);
        sent += k as u64;
    }
    p.flush().await?;
    Ok(())
}

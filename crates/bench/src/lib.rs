//! The benchmark harness as a library: produce, consume, end-to-end and producer ack latency
//! (at full speed and rate-limited) and crash recovery, against any Kafka-compatible bootstrap address.
//!
//! Used by `streamforge bench` (which may also start an embedded broker and hand in a
//! [`CrashControl`] so the recovery phase can run) and by the dashboard (through the CLI's
//! adapter). Progress is reported through a callback; the result is serializable.
#![forbid(unsafe_code)]

mod ack;
mod consume;
pub mod cpu;
mod latency;
mod phases;
mod produce;
pub mod report;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use streamforge_client::{Acks, Compression};

pub use latency::LatencySummary;

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchParams {
    pub messages: u64,
    pub partitions: i32,
    /// Replication factor of the benchmark topic (-1: the broker's default).
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i16,
    /// Messages per produce batch (sets the producer's batch size in bytes).
    pub batch_size: usize,
    /// Value size in bytes.
    pub message_size: usize,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    pub producers: usize,
    pub consumers: usize,
    /// none, gzip, snappy, lz4, zstd.
    pub compression: String,
    pub idempotence: bool,
    /// Messages per second in the rate-limited latency phase.
    pub latency_rate: u64,
    /// Length of the rate-limited latency phase.
    pub latency_seconds: u64,
    /// Messages in the full-speed latency phase (0 skips it).
    pub latency_full_speed_messages: u64,
    /// Topic to use (a fresh unique one when `None`).
    pub topic: Option<String>,
    /// Producer linger.
    pub linger_ms: u64,
}

impl Default for BenchParams {
    fn default() -> Self {
        Self {
            messages: 1_000_000,
            partitions: 10,
            replication_factor: -1,
            batch_size: 2000,
            message_size: 100,
            acks: 1,
            producers: 1,
            consumers: 1,
            compression: "none".into(),
            idempotence: false,
            latency_rate: 10_000,
            latency_seconds: 3,
            latency_full_speed_messages: 200_000,
            topic: None,
            linger_ms: 2,
        }
    }
}

fn default_replication_factor() -> i16 {
    -1
}

impl BenchParams {
    pub fn acks(&self) -> Result<Acks, BenchError> {
        match self.acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            a => Err(BenchError::Params(format!(
                "acks must be 0, 1 or -1, not {a}"
            ))),
        }
    }

    pub fn compression(&self) -> Result<Compression, BenchError> {
        self.compression.parse().map_err(BenchError::Params)
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        self.acks()?;
        self.compression()?;
        let bad = |m: &str| Err(BenchError::Params(m.to_string()));
        if self.messages == 0 || self.partitions <= 0 || self.batch_size == 0 {
            return bad("messages, partitions and batch size must be positive");
        }
        if self.producers == 0 || self.consumers == 0 {
            return bad("at least one producer and one consumer");
        }
        if self.idempotence && self.acks != -1 {
            return bad("idempotence needs acks=all (-1)");
        }
        if self.message_size < latency::TIMESTAMP_BYTES {
            return bad("message size must be at least 8 bytes (the send time is embedded)");
        }
        Ok(())
    }
}

/// Which phase a progress update belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Produce,
    Consume,
    LatencyFullSpeed,
    LatencyAtRate,
    Recovery,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Produce => "produce",
            Phase::Consume => "consume",
            Phase::LatencyFullSpeed => "latency (full speed)",
            Phase::LatencyAtRate => "latency (rate-limited)",
            Phase::Recovery => "recovery",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Progress {
    pub phase: Phase,
    pub done: u64,
    pub total: u64,
    pub bytes_done: u64,
    pub elapsed_ms: u64,
}

/// Progress callback.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Crashes the broker under test and starts it again on the same data, for the recovery
/// phase. Returns the bootstrap address of the restarted broker once it is listening.
pub trait CrashControl: Send {
    fn crash_and_restart(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>>;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    /// CPU seconds this process (client and, when embedded, broker) used in the phase.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// The same per million messages: comparable across machine loads.
    #[serde(default)]
    pub cpu_seconds_per_million: Option<f64>,
}

impl Throughput {
    fn new(messages: u64, bytes: u64, elapsed: Duration, cpu_seconds: Option<f64>) -> Self {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Self {
            messages,
            bytes,
            seconds,
            msgs_per_sec: messages as f64 / seconds,
            mb_per_sec: bytes as f64 / seconds / 1e6,
            cpu_seconds,
            cpu_seconds_per_million: cpu_seconds.map(|c| c * 1e6 / messages.max(1) as f64),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovery {
    /// From the restart until the broker answered Metadata and ListOffsets again.
    pub ms: f64,
    /// Acknowledged messages read back after the restart, every batch CRC-checked.
    pub validated_messages: u64,
    pub acknowledged_messages: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workload {
    pub brokers: usize,
    /// Replicas of each partition of the benchmark topic (0 when unknown).
    #[serde(default)]
    pub replication_factor: usize,
    pub partitions: i32,
    pub messages: u64,
    pub message_size: usize,
    pub batch_size: usize,
    pub acks: i16,
    pub producers: usize,
    pub consumers: usize,
    pub compression: String,
    pub idempotence: bool,
    pub topic: String,
    pub bootstrap: String,
    /// The run created `topic` (it did not exist before).
    #[serde(default)]
    pub topic_created: bool,
    /// The broker ran in the bench's own process (`streamforge bench` without `--bootstrap`):
    /// clients still reach it over loopback TCP, but the two share the CPUs and the CPU
    /// figures count both.
    #[serde(default)]
    pub embedded: bool,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub workload: Workload,
    pub producer: Throughput,
    pub consumer: Throughput,
    /// End-to-end latency with producers at full speed and a tailing consumer.
    pub latency_ms: Option<LatencySummary>,
    /// End-to-end latency at `latency_rate` messages per second.
    pub latency_at_rate_ms: Option<LatencySummary>,
    pub latency_rate: u64,
    /// Producer ack latency (send to the produce response for the record's batch, as Kafka's
    /// ProducerPerformance measures it) in the produce phase: full speed, open loop, so it
    /// includes the wait for buffer memory behind a full queue.
    #[serde(default)]
    pub produce_ack_latency_ms: Option<LatencySummary>,
    /// Ack latency in the full-speed latency phase (closed loop, beside `latency_ms`).
    #[serde(default)]
    pub ack_latency_ms: Option<LatencySummary>,
    /// Ack latency at `latency_rate` messages per second (beside `latency_at_rate_ms`).
    #[serde(default)]
    pub ack_latency_at_rate_ms: Option<LatencySummary>,
    pub recovery: Option<Recovery>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid parameters: {0}")]
    Params(String),
    #[error("client error: {0}")]
    Client(#[from] streamforge_client::ClientError),
    #[error("{0}")]
    Failed(String),
}

/// Runs the benchmark against `bootstrap`. With `crash`, the recovery phase runs after the
/// others: the broker is crashed, restarted, timed until it serves, and every acknowledged
/// message is read back and CRC-checked.
pub async fn run(
    bootstrap: &str,
    params: &BenchParams,
    progress: ProgressFn,
    crash: Option<&mut dyn CrashControl>,
) -> Result<BenchResult, BenchError> {
    params.validate()?;
    phases::run(bootstrap, params, progress, crash).await
}

//! Benchmarks started from the dashboard: the runner hook, the parameters, and the history.
//!
//! The http crate does not know how to benchmark; whoever starts the server may plug in a
//! [`BenchRunner`] (the `streamforge` binary adapts the bench crate to it). The hub runs at most
//! one benchmark at a time, records its progress for the UI to poll, and keeps a bounded history
//! (persisted as JSON when a path is configured, so it survives restarts).

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::facade::{ClusterView, CreateTopic, ViewError};
use crate::now_ms;

/// Past runs kept (oldest dropped first).
pub const BENCH_HISTORY_MAX: usize = 50;
/// Progress points kept per run for the live chart.
pub const BENCH_PROGRESS_POINTS_MAX: usize = 1200;

/// Benchmark topics are named `<prefix><run id>-<start ms>`.
pub const BENCH_TOPIC_PREFIX: &str = "streamforge-bench-";
pub const BENCH_MESSAGES_MAX: u64 = 50_000_000;
pub const BENCH_PARTITIONS_MAX: u32 = 1000;
pub const BENCH_BATCH_SIZE_MAX: u32 = 100_000;
pub const BENCH_MESSAGE_SIZE_MIN: u32 = 8;
pub const BENCH_MESSAGE_SIZE_MAX: u32 = 1024 * 1024;

/// What to benchmark (the knobs the dashboard offers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchParams {
    pub messages: u64,
    pub partitions: u32,
    /// Messages per produce batch.
    pub batch_size: u32,
    pub message_size: u32,
    /// 0, 1 or -1 (all).
    pub acks: i16,
}

/// A progress update from a running benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchProgress {
    /// What the benchmark is doing now, e.g. "produce", "consume", "latency".
    pub phase: String,
    pub messages_done: u64,
    pub messages_total: u64,
    pub bytes_done: u64,
    pub elapsed_ms: u64,
}

/// One line of the results table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

/// A point of the latency distribution chart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyPoint {
    pub percentile: f64,
    pub latency_ms: f64,
}

/// The result of a finished benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchReport {
    pub rows: Vec<BenchRow>,
    pub latency_percentiles: Vec<LatencyPoint>,
    /// The runner's full result, shown as-is under the table.
    #[serde(default)]
    pub details: serde_json::Value,
}

pub type BenchProgressSink = Arc<dyn Fn(BenchProgress) + Send + Sync>;
pub type BenchFuture = Pin<Box<dyn Future<Output = Result<BenchReport, String>> + Send>>;

/// Where a benchmark runs: the broker's own Kafka address and a fresh topic the hub created
/// with `params.partitions` partitions (deleted again when the run ends).
#[derive(Debug, Clone)]
pub struct BenchTarget {
    pub bootstrap: String,
    pub topic: String,
}

/// Runs one benchmark against a topic of this broker.
pub trait BenchRunner: Send + Sync + 'static {
    fn run(
        &self,
        target: BenchTarget,
        params: BenchParams,
        progress: BenchProgressSink,
    ) -> BenchFuture;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchStatus {
    Running,
    Succeeded,
    Failed,
}

/// One progress sample: time since the run started (the hub's clock, so phases that restart
/// their own clocks still line up) and the phase's count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressPoint {
    pub t_ms: u64,
    pub phase: String,
    pub messages_done: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRun {
    pub id: u64,
    pub params: BenchParams,
    pub status: BenchStatus,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub progress: BenchProgress,
    /// Progress samples for the live chart.
    pub progress_series: Vec<ProgressPoint>,
    pub report: Option<BenchReport>,
    pub error: Option<String>,
}

#[derive(Default)]
struct HubState {
    runs: VecDeque<BenchRun>,
    next_id: u64,
}

/// Starts benchmarks and remembers them.
pub struct BenchHub {
    runner: Option<Arc<dyn BenchRunner>>,
    history_path: Option<PathBuf>,
    state: Mutex<HubState>,
}

impl BenchHub {
    pub fn new(runner: Option<Arc<dyn BenchRunner>>, history_path: Option<PathBuf>) -> BenchHub {
        let mut state = HubState::default();
        if let Some(path) = &history_path {
            state.runs = load_history(path);
            state.next_id = state.runs.iter().map(|r| r.id).max().map_or(1, |id| id + 1);
        } else {
            state.next_id = 1;
        }
        BenchHub {
            runner,
            history_path,
            state: Mutex::new(state),
        }
    }

    pub fn available(&self) -> bool {
        self.runner.is_some()
    }

    /// All runs, newest first.
    pub fn runs(&self) -> Vec<BenchRun> {
        self.state.lock().runs.iter().rev().cloned().collect()
    }

    pub fn run(&self, id: u64) -> Option<BenchRun> {
        self.state.lock().runs.iter().find(|r| r.id == id).cloned()
    }

    /// Starts a benchmark in the background and returns its id.
    pub fn start(
        self: &Arc<Self>,
        view: Arc<dyn ClusterView>,
        params: BenchParams,
    ) -> Result<u64, ViewError> {
        let Some(runner) = self.runner.clone() else {
            return Err(ViewError::Unsupported(
                "this broker was started without a benchmark runner".to_string(),
            ));
        };
        let id = {
            let mut state = self.state.lock();
            if let Some(running) = state.runs.iter().find(|r| r.status == BenchStatus::Running) {
                return Err(ViewError::Conflict(format!(
                    "benchmark {} is still running; wait for it to finish",
                    running.id
                )));
            }
            let id = state.next_id;
            state.next_id += 1;
            state.runs.push_back(BenchRun {
                id,
                params: params.clone(),
                status: BenchStatus::Running,
                started_at_ms: now_ms(),
                finished_at_ms: None,
                progress: BenchProgress {
                    phase: "starting".to_string(),
                    messages_total: params.messages,
                    ..BenchProgress::default()
                },
                progress_series: Vec::new(),
                report: None,
                error: None,
            });
            while state.runs.len() > BENCH_HISTORY_MAX {
                state.runs.pop_front();
            }
            id
        };
        let hub = Arc::clone(self);
        let sink_hub = Arc::clone(self);
        let sink: BenchProgressSink =
            Arc::new(move |p: BenchProgress| sink_hub.record_progress(id, p));
        tokio::spawn(async move {
            tracing::info!(bench_id = id, ?params, "dashboard benchmark started");
            let topic = format!("{BENCH_TOPIC_PREFIX}{id}-{}", now_ms());
            let create = CreateTopic {
                name: topic.clone(),
                partitions: params.partitions as i32,
                replication_factor: 1,
                configs: Default::default(),
            };
            let outcome = match view.create_topic(create).await {
                Ok(()) => {
                    let target = BenchTarget {
                        bootstrap: view.bootstrap_address(),
                        topic: topic.clone(),
                    };
                    let outcome = match tokio::spawn(runner.run(target, params, sink)).await {
                        Ok(result) => result,
                        Err(e) => Err(format!("benchmark task failed: {e}")),
                    };
                    if let Err(error) = view.delete_topic(topic.clone()).await {
                        tracing::warn!(bench_id = id, %topic, %error, "could not delete the benchmark topic");
                    }
                    outcome
                }
                Err(e) => Err(format!("could not create the benchmark topic {topic}: {e}")),
            };
            hub.finish(id, outcome);
        });
        Ok(id)
    }

    fn record_progress(&self, id: u64, progress: BenchProgress) {
        let mut state = self.state.lock();
        if let Some(run) = state.runs.iter_mut().find(|r| r.id == id) {
            if run.progress_series.len() < BENCH_PROGRESS_POINTS_MAX {
                run.progress_series.push(ProgressPoint {
                    t_ms: (now_ms() - run.started_at_ms).max(0) as u64,
                    phase: progress.phase.clone(),
                    messages_done: progress.messages_done,
                });
            }
            run.progress = progress;
        }
    }

    fn finish(&self, id: u64, outcome: Result<BenchReport, String>) {
        let snapshot = {
            let mut state = self.state.lock();
            if let Some(run) = state.runs.iter_mut().find(|r| r.id == id) {
                run.finished_at_ms = Some(now_ms());
                match outcome {
                    Ok(report) => {
                        tracing::info!(bench_id = id, "dashboard benchmark finished");
                        run.status = BenchStatus::Succeeded;
                        run.report = Some(report);
                    }
                    Err(error) => {
                        tracing::warn!(bench_id = id, %error, "dashboard benchmark failed");
                        run.status = BenchStatus::Failed;
                        run.error = Some(error);
                    }
                }
            }
            state.runs.clone()
        };
        if let Some(path) = &self.history_path {
            save_history(path, &snapshot);
        }
    }
}

fn load_history(path: &PathBuf) -> VecDeque<BenchRun> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return VecDeque::new();
    };
    match serde_json::from_str::<VecDeque<BenchRun>>(&text) {
        Ok(mut runs) => {
            // A run that was in progress when the broker stopped never finished.
            for run in runs.iter_mut().filter(|r| r.status == BenchStatus::Running) {
                run.status = BenchStatus::Failed;
                run.error = Some("the broker stopped while the benchmark ran".to_string());
            }
            while runs.len() > BENCH_HISTORY_MAX {
                runs.pop_front();
            }
            runs
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "ignoring unreadable benchmark history");
            VecDeque::new()
        }
    }
}

fn save_history(path: &PathBuf, runs: &VecDeque<BenchRun>) {
    let result = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(runs).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(error) = result {
        tracing::warn!(path = %path.display(), %error, "could not save benchmark history");
    }
}

/// The body of `POST /api/bench`; every field optional (defaults are a quick run).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchRequest {
    pub messages: Option<u64>,
    pub partitions: Option<u32>,
    pub batch_size: Option<u32>,
    pub message_size: Option<u32>,
    pub acks: Option<serde_json::Value>,
}

impl BenchRequest {
    /// Checks every field against its limit; the message names the field.
    pub fn validate(self) -> Result<BenchParams, String> {
        let messages = self.messages.unwrap_or(100_000);
        if messages == 0 || messages > BENCH_MESSAGES_MAX {
            return Err(format!(
                "messages must be between 1 and {BENCH_MESSAGES_MAX}, got {messages}"
            ));
        }
        let partitions = self.partitions.unwrap_or(3);
        if partitions == 0 || partitions > BENCH_PARTITIONS_MAX {
            return Err(format!(
                "partitions must be between 1 and {BENCH_PARTITIONS_MAX}, got {partitions}"
            ));
        }
        let batch_size = self.batch_size.unwrap_or(1000);
        if batch_size == 0 || batch_size > BENCH_BATCH_SIZE_MAX {
            return Err(format!(
                "batch_size must be between 1 and {BENCH_BATCH_SIZE_MAX}, got {batch_size}"
            ));
        }
        let message_size = self.message_size.unwrap_or(100);
        // The benchmark embeds the send time (8 bytes) in each value to measure latency.
        if !(BENCH_MESSAGE_SIZE_MIN..=BENCH_MESSAGE_SIZE_MAX).contains(&message_size) {
            return Err(format!(
                "message_size must be between {BENCH_MESSAGE_SIZE_MIN} and {BENCH_MESSAGE_SIZE_MAX} bytes, got {message_size}"
            ));
        }
        let acks = match &self.acks {
            None => 1,
            Some(serde_json::Value::String(s)) if s.eq_ignore_ascii_case("all") => -1,
            Some(serde_json::Value::String(s)) => parse_acks(s.parse::<i64>().ok())?,
            Some(serde_json::Value::Number(n)) => parse_acks(n.as_i64())?,
            Some(other) => return Err(format!("acks must be 0, 1 or \"all\", got {other}")),
        };
        Ok(BenchParams {
            messages,
            partitions,
            batch_size,
            message_size,
            acks,
        })
    }
}

fn parse_acks(value: Option<i64>) -> Result<i16, String> {
    match value {
        Some(0) => Ok(0),
        Some(1) => Ok(1),
        Some(-1) => Ok(-1),
        _ => Err("acks must be 0, 1 or \"all\" (-1)".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_defaults_and_limits() {
        let p = BenchRequest::default().validate().unwrap();
        assert_eq!(p.acks, 1);
        assert!(p.messages > 0);
        let bad = BenchRequest {
            messages: Some(0),
            ..Default::default()
        }
        .validate();
        assert!(bad.unwrap_err().contains("messages"));
        let all = BenchRequest {
            acks: Some(serde_json::json!("all")),
            ..Default::default()
        };
        assert_eq!(all.validate().unwrap().acks, -1);
        let two = BenchRequest {
            acks: Some(serde_json::json!(2)),
            ..Default::default()
        };
        assert!(two.validate().unwrap_err().contains("acks"));
    }
}

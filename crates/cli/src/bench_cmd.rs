//! `streamforge bench`: benchmark a broker — an embedded one on a temporary data dir unless
//! `--bootstrap` is given — with progress bars and a results table (or `--json`).
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use streamforge_bench::{BenchParams, CrashControl, Phase, Progress, ProgressFn};
use streamforge_broker::{Broker, BrokerConfig};

use crate::bench_cluster::{ClusterSettings, EmbeddedCluster};

/// How long the crash-recovery restart may keep retrying the bind of the old address.
const RESTART_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between those retries.
const RESTART_RETRY: Duration = Duration::from_millis(1);

#[derive(clap::Args)]
pub struct Args {
    /// Benchmark this broker instead of an embedded one (no crash-recovery phase then).
    #[arg(long)]
    bootstrap: Option<String>,
    /// Brokers of the embedded cluster: with more than 1, that many brokers of one cluster
    /// (each a metadata quorum voter) run in this process, so `--replication-factor` and
    /// `--acks all` measure replication (no crash-recovery phase then).
    #[arg(long, default_value_t = 1, conflicts_with = "bootstrap")]
    brokers: usize,
    /// Messages in each throughput phase.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Partitions of the benchmark topic.
    #[arg(long, default_value_t = 10)]
    partitions: i32,
    /// Replication factor of the benchmark topic (with --brokers N or --bootstrap to a cluster;
    /// -1 = the broker's default, which is min(3, N) in an embedded cluster).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    replication_factor: i16,
    /// Messages per produce batch.
    #[arg(long, default_value_t = 2000)]
    batch_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    message_size: usize,
    /// 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// Concurrent producers in the produce phase.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Concurrent consumers in the consume phase.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Idempotent producers (needs --acks all).
    #[arg(long)]
    idempotence: bool,
    /// Messages per second in the rate-limited latency phase (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    latency_rate: u64,
    /// Seconds of the rate-limited latency phase.
    #[arg(long, default_value_t = 3)]
    latency_seconds: u64,
    /// Messages in the full-speed latency phase (0 skips it).
    #[arg(long, default_value_t = 200_000)]
    latency_messages: u64,
    /// Producer linger in ms for the throughput phases.
    #[arg(long, default_value_t = 2)]
    linger_ms: u64,
    /// Topic to use (default: a new unique one).
    #[arg(long)]
    topic: Option<String>,
    /// With --bootstrap: keep the topic the run created (it is deleted at the end otherwise).
    #[arg(long)]
    keep_topic: bool,
    /// Data dir of the embedded broker (default: a temporary dir, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Skip the crash-recovery phase of the embedded broker.
    #[arg(long)]
    no_recovery: bool,
    /// Print one JSON object instead of the table (progress bars go to stderr either way).
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// Worker threads of the benchmark client's runtime [default: half the CPUs, at least 1].
    #[arg(long)]
    client_threads: Option<usize>,
    /// Worker threads of the embedded broker's runtime [default: the other CPUs, at least 1].
    #[arg(long)]
    broker_threads: Option<usize>,
    /// The embedded broker's `--log-flush-background-ms` (0: only rolled segments) [default:
    /// the broker's default].
    #[arg(long)]
    broker_flush_background_ms: Option<u64>,
}

/// (client, broker) worker threads: one runtime thread per CPU in all. More threads than CPUs
/// only add wake-ups between threads that share a core: on 2 CPUs, 1 + 1 gave a p99 of
/// 0.53-0.82 ms at 10,000 msg/s against 1.1-3.3 ms for 2 + 2, at equal throughput
/// (docs/BENCHMARKS.md).
fn runtime_threads(args: &Args) -> (usize, usize) {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let client = args.client_threads.unwrap_or(cpus / 2).max(1);
    let broker = args
        .broker_threads
        .unwrap_or(cpus.saturating_sub(client))
        .max(1);
    (client, broker)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.brokers >= 1, "--brokers must be at least 1");
    let acks = match args.acks.as_str() {
        "0" => 0,
        "1" => 1,
        "all" | "-1" => -1,
        o => anyhow::bail!("--acks must be 0, 1 or all, not {o}"),
    };
    let params = BenchParams {
        messages: args.messages,
        partitions: args.partitions,
        replication_factor: args.replication_factor,
        batch_size: args.batch_size,
        message_size: args.message_size,
        acks,
        producers: args.producers,
        consumers: args.consumers,
        compression: args.compression.clone(),
        idempotence: args.idempotence,
        latency_rate: args.latency_rate,
        latency_seconds: args.latency_seconds,
        latency_full_speed_messages: args.latency_messages,
        topic: args.topic.clone(),
        linger_ms: args.linger_ms,
    };
    params.validate()?;
    let (client_threads, broker_threads) = runtime_threads(&args);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .enable_all()
        .build()?;
    let bars = Bars::new(args.quiet);
    let progress: ProgressFn = {
        let bars = bars.clone();
        Arc::new(move |p: Progress| bars.update(p))
    };
    let result = match &args.bootstrap {
        Some(b) => {
            let r = rt.block_on(streamforge_bench::run(b, &params, progress, None))?;
            if r.workload.topic_created && !args.keep_topic {
                rt.block_on(delete_topic(b, &r.workload.topic))?;
            }
            r
        }
        None if args.brokers > 1 => {
            let tmp = tempfile::tempdir()?;
            let data_root = args
                .data_dir
                .clone()
                .unwrap_or_else(|| tmp.path().join("data"));
            let mut cluster = EmbeddedCluster::start(&ClusterSettings {
                brokers: args.brokers,
                data_root,
                worker_threads: broker_threads.div_ceil(args.brokers).max(1),
                flush_background_ms: args.broker_flush_background_ms,
                default_replication_factor: args.brokers.min(3) as i16,
            })?;
            let bootstrap = cluster.bootstrap();
            let r = rt.block_on(streamforge_bench::run(&bootstrap, &params, progress, None));
            let fetches = cluster.replica_fetch_stats();
            cluster.stop();
            if fetches.requests > 0 {
                eprintln!(
                    "replica fetches: {} requests ({} incremental), {} bytes per request, {:.2} partitions named per request",
                    fetches.requests,
                    fetches.incremental,
                    fetches.request_bytes / fetches.requests,
                    fetches.partitions_named as f64 / fetches.requests as f64
                );
            }
            let mut r = r?;
            r.workload.embedded = true;
            r
        }
        None => {
            let tmp = tempfile::tempdir()?;
            let data_dir = args
                .data_dir
                .clone()
                .unwrap_or_else(|| tmp.path().join("data"));
            let mut embedded = EmbeddedBroker::start(EmbeddedSettings {
                data_dir,
                worker_threads: broker_threads,
                flush_background_ms: args.broker_flush_background_ms,
            })?;
            let bootstrap = embedded.bootstrap();
            let crash: Option<&mut dyn CrashControl> = if args.no_recovery {
                None
            } else {
                Some(&mut embedded)
            };
            let r = rt.block_on(streamforge_bench::run(&bootstrap, &params, progress, crash));
            embedded.stop();
            let mut r = r?;
            r.workload.embedded = true;
            r
        }
    };
    bars.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", streamforge_bench::report::table(&result));
    }
    Ok(())
}

/// Removes the topic a `--bootstrap` run created, so repeated runs leave nothing behind.
async fn delete_topic(bootstrap: &str, topic: &str) -> anyhow::Result<()> {
    let admin = streamforge_client::Admin::new(streamforge_client::ClientConfig::new(bootstrap));
    admin
        .delete_topics(&[topic.to_string()])
        .await
        .map_err(|e| anyhow::anyhow!("deleting the benchmark topic {topic}: {e}"))?;
    tracing::info!(topic, "deleted the benchmark topic");
    Ok(())
}

/// One progress bar per phase.
#[derive(Clone)]
struct Bars {
    multi: Option<MultiProgress>,
    current: Arc<Mutex<Option<(Phase, ProgressBar)>>>,
}

impl Bars {
    fn new(quiet: bool) -> Self {
        let multi = (!quiet)
            .then(|| MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::stderr()));
        Self {
            multi,
            current: Arc::new(Mutex::new(None)),
        }
    }

    fn update(&self, p: Progress) {
        let Some(multi) = &self.multi else { return };
        let mut cur = self.current.lock();
        if cur.as_ref().is_none_or(|(ph, _)| *ph != p.phase) {
            if let Some((_, old)) = cur.take() {
                old.finish();
            }
            let bar = multi.add(ProgressBar::new(p.total.max(1)));
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>24} [{bar:40}] {pos}/{len} msgs {rate} {elapsed}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                // Whole messages per second: "12,345 msg/s", not indicatif's "12345.6789/s".
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let rate = streamforge_bench::report::thousands(state.per_sec() as u64);
                        let _ = write!(w, "{rate} msg/s");
                    },
                )
                .progress_chars("=> "),
            );
            bar.set_prefix(p.phase.name());
            *cur = Some((p.phase, bar));
        }
        if let Some((_, bar)) = cur.as_ref() {
            bar.set_length(p.total.max(1));
            bar.set_position(p.done.min(p.total));
        }
    }

    fn finish(&self) {
        if let Some((_, bar)) = self.current.lock().take() {
            bar.finish();
        }
    }
}

/// A broker started in this process with `Broker::start`, on its own runtime so that a crash
/// can be simulated: the runtime is torn down without the broker's shutdown path (no flush,
/// no clean-shutdown marker), as kill -9 would leave it; written pages stay in the page cache
/// exactly as after kill -9 of a process.
struct EmbeddedBroker {
    settings: EmbeddedSettings,
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    handle: Option<streamforge_broker::BrokerHandle>,
}

/// What the embedded broker is started with, again on the crash-recovery restart.
#[derive(Clone)]
struct EmbeddedSettings {
    data_dir: PathBuf,
    worker_threads: usize,
    flush_background_ms: Option<u64>,
}

impl EmbeddedSettings {
    fn config(&self, listen: SocketAddr) -> BrokerConfig {
        let defaults = BrokerConfig::default();
        BrokerConfig {
            listen,
            advertised_listener: None,
            data_dir: self.data_dir.clone(),
            http_listen: None,
            log_flush_background_ms: self
                .flush_background_ms
                .unwrap_or(defaults.log_flush_background_ms),
            ..defaults
        }
    }
}

impl EmbeddedBroker {
    fn start(settings: EmbeddedSettings) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(settings.worker_threads)
            .thread_name("embedded-broker")
            .enable_all()
            .build()?;
        let handle = runtime.block_on(Broker::start(
            settings.config(SocketAddr::from(([127, 0, 0, 1], 0))),
        ))?;
        let addr = handle.kafka_addr();
        Ok(Self {
            settings,
            addr,
            runtime: Some(runtime),
            handle: Some(handle),
        })
    }

    fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    /// Graceful stop at the end of the run.
    fn stop(&mut self) {
        if let (Some(rt), Some(h)) = (self.runtime.take(), self.handle.take()) {
            rt.block_on(h.shutdown());
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl CrashControl for EmbeddedBroker {
    fn crash_and_restart(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            // Crash: drop every broker task mid-flight; nothing runs the shutdown path.
            let handle = self.handle.take();
            if let Some(rt) = self.runtime.take() {
                rt.shutdown_background();
            }
            // Dropped only after its runtime is gone, so no task sees the shutdown signal.
            drop(handle);
            let settings = self.settings.clone();
            let addr = self.addr;
            // Restart on a fresh runtime (blocking thread: runtimes cannot be built inside async code).
            let (rt, handle) = tokio::task::spawn_blocking(move || -> Result<_, String> {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(settings.worker_threads)
                    .thread_name("embedded-broker")
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                // The old listener's socket may linger briefly while the dropped runtime's
                // threads wind down; retry the bind often (a sleep here adds to the measured
                // recovery time) and for at most RESTART_TIMEOUT.
                let mut last = String::new();
                let started = std::time::Instant::now();
                while started.elapsed() < RESTART_TIMEOUT {
                    match rt.block_on(Broker::start(settings.config(addr))) {
                        Ok(h) => return Ok((rt, h)),
                        Err(e) => {
                            last = e.to_string();
                            std::thread::sleep(RESTART_RETRY);
                        }
                    }
                }
                Err(format!("restart failed: {last}"))
            })
            .await
            .map_err(|e| e.to_string())??;
            self.runtime = Some(rt);
            self.handle = Some(handle);
            Ok(addr.to_string())
        })
    }
}

//! `streamforge bench --brokers N`: N brokers of one cluster in this process (combined mode: each
//! is a voter of the Raft metadata quorum and a controller), on loopback ports, each on its own
//! runtime and data dir, so replication (`--replication-factor`, `--acks all`) can be measured
//! without starting processes. Clients reach them over TCP as they would separate processes.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use streamforge_broker::handlers::fetch_session::ReplicaFetchStats;
use streamforge_broker::metadata_cluster::{ClusterOptions, ProcessRoles};
use streamforge_broker::{Broker, BrokerConfig, BrokerHandle};

/// Most brokers an embedded cluster may have: each takes a runtime, a quorum voter and its
/// share of two CPUs; more would measure the scheduler, not the broker.
pub const BROKERS_MAX: usize = 9;
/// How long the cluster may take to form (every broker registered and unfenced).
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between looks at the cluster while it forms.
const FORM_POLL: Duration = Duration::from_millis(50);

/// An embedded cluster: the brokers and their runtimes, stopped in `stop` (or on drop).
pub struct EmbeddedCluster {
    brokers: Vec<(tokio::runtime::Runtime, Option<BrokerHandle>)>,
}

/// What each broker of the cluster is started with.
pub struct ClusterSettings {
    pub brokers: usize,
    /// Each broker's data dir is `<data_root>/broker-<id>`.
    pub data_root: PathBuf,
    /// Runtime worker threads of each broker.
    pub worker_threads: usize,
    pub flush_background_ms: Option<u64>,
    /// `default.replication.factor` of the brokers: what topics the bench creates with
    /// `--replication-factor -1` get.
    pub default_replication_factor: i16,
}

/// Free loopback ports for the controller listeners: bound, read and released (another
/// process could take one in between; the broker's bind then fails with a clear error).
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("finding free loopback ports for the controller listeners")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl EmbeddedCluster {
    /// Starts every broker at once (a voter's start waits for its quorum, so they cannot start
    /// one after another) and waits until each sees all of them registered and unfenced.
    pub fn start(settings: &ClusterSettings) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (2..=BROKERS_MAX).contains(&settings.brokers),
            "an embedded cluster has 2 to {BROKERS_MAX} brokers"
        );
        let ports = free_ports(settings.brokers)?;
        let voters: BTreeMap<u64, String> = ports
            .iter()
            .enumerate()
            .map(|(i, port)| (i as u64 + 1, format!("127.0.0.1:{port}")))
            .collect();
        let starts: Vec<_> = (1..=settings.brokers as i32)
            .map(|id| {
                let config = broker_config(settings, id, &voters);
                let threads = settings.worker_threads;
                std::thread::spawn(move || start_one(config, threads))
            })
            .collect();
        let mut brokers = Vec::with_capacity(settings.brokers);
        let mut first_error = None;
        for start in starts {
            match start.join() {
                Ok(Ok((rt, handle))) => brokers.push((rt, Some(handle))),
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(_) => first_error = first_error.or(Some(anyhow::anyhow!("broker panicked"))),
            }
        }
        let mut cluster = EmbeddedCluster { brokers };
        if let Some(e) = first_error {
            cluster.stop();
            return Err(e);
        }
        if let Err(e) = cluster.wait_formed(settings.brokers) {
            cluster.stop();
            return Err(e);
        }
        Ok(cluster)
    }

    /// Every broker's Kafka address, comma-separated: the clients' bootstrap list.
    pub fn bootstrap(&self) -> String {
        self.brokers
            .iter()
            .filter_map(|(_, h)| h.as_ref().map(|h| h.kafka_addr().to_string()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What the followers' Fetch requests carried, over every broker (as leader): requests,
    /// of which in an incremental session, request bytes, partitions named.
    pub fn replica_fetch_stats(&self) -> ReplicaFetchStats {
        let mut total = ReplicaFetchStats::default();
        for h in self.brokers.iter().filter_map(|(_, h)| h.as_ref()) {
            let s = h.state().fetch_sessions.lock().stats();
            total.requests += s.requests;
            total.incremental += s.incremental;
            total.request_bytes += s.request_bytes;
            total.partitions_named += s.partitions_named;
        }
        total
    }

    fn wait_formed(&self, n: usize) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let formed = self.brokers.iter().all(|(_, h)| {
                h.as_ref().is_some_and(|h| {
                    let image = h.state().replicas.image();
                    image.unfenced_brokers().count() == n
                })
            });
            if formed {
                tracing::info!(
                    brokers = n,
                    ms = started.elapsed().as_millis() as u64,
                    "embedded cluster formed"
                );
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < FORM_TIMEOUT,
                "the embedded cluster did not form within {FORM_TIMEOUT:?}"
            );
            std::thread::sleep(FORM_POLL);
        }
    }

    /// Controlled shutdown of every broker, then their runtimes.
    pub fn stop(&mut self) {
        for (rt, handle) in &mut self.brokers {
            if let Some(h) = handle.take() {
                rt.block_on(h.shutdown());
            }
        }
        for (rt, _) in self.brokers.drain(..) {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn broker_config(
    settings: &ClusterSettings,
    node_id: i32,
    voters: &BTreeMap<u64, String>,
) -> BrokerConfig {
    let defaults = BrokerConfig::default();
    let listen = voters[&(node_id as u64)].clone();
    BrokerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        advertised_listener: None,
        node_id,
        data_dir: settings.data_root.join(format!("broker-{node_id}")),
        http_listen: None,
        default_replication_factor: settings.default_replication_factor,
        log_flush_background_ms: settings
            .flush_background_ms
            .unwrap_or(defaults.log_flush_background_ms),
        cluster: Some(ClusterOptions {
            voters: voters.clone(),
            listen,
            roles: ProcessRoles::Combined,
            security: Default::default(),
        }),
        ..defaults
    }
}

fn start_one(
    config: BrokerConfig,
    worker_threads: usize,
) -> anyhow::Result<(tokio::runtime::Runtime, BrokerHandle)> {
    let node_id = config.node_id;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .thread_name(format!("embedded-broker-{node_id}"))
        .enable_all()
        .build()?;
    let handle = rt
        .block_on(Broker::start(config))
        .with_context(|| format!("starting embedded broker {node_id}"))?;
    Ok((rt, handle))
}

//! The StreamForge broker process as a library: `Broker::start(config)` binds the Kafka
//! listener, opens the partition logs and serves until `BrokerHandle::shutdown`.
#![forbid(unsafe_code)]

mod cleaner;
pub mod config;
mod connection;
mod coordinator_load;
pub mod data_dir_lock;
pub mod dynamic_config;
pub mod fetcher;
pub mod frame_pool;
mod group_load;
pub mod group_service;
mod group_txn;
pub mod handlers;
pub mod http_auth;
pub mod http_view;
mod http_view_console;
mod http_view_groups;
mod http_view_txn;
pub mod inter_broker;
pub mod metadata_cluster;
mod metadata_import;
pub mod metadata_service;
pub mod partition;
mod partition_create;
pub mod partition_limit;
pub mod producer_ids;
pub mod quota;
pub mod replica_manager;
pub mod replication_wiring;
pub mod request_metrics;
pub mod router;
mod scrubber;
pub mod security;
mod server;
mod storage_errors;
pub mod tiered;
pub mod topic_config;
pub mod topic_store;
mod txn_load;
pub mod txn_marker_sender;
mod txn_markers;
mod txn_pending;
pub mod txn_service;
mod txn_service_markers;
mod txn_verify;
pub mod txn_verify_sender;
pub mod util;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use streamforge_http::MetricsHub;
use streamforge_log::LogRuntime;
use streamforge_protocol::clock::SharedClock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::BrokerConfig;
pub use partition::Partition;
pub use replica_manager::{ReplicaManager, Topic};

/// Errors starting the broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("cannot bind the Kafka listener on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open data directory {}: {message}", path.display())]
    Storage { path: PathBuf, message: String },
    #[error(transparent)]
    Lock(#[from] data_dir_lock::DataDirLockError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot bind the dashboard listener on {addr}: {source}")]
    HttpBind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// State shared by every connection and handler.
pub struct BrokerState {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub replicas: ReplicaManager,
    /// Dynamic broker configs (AlterConfigs on the BROKER resource) and the limits they set.
    pub dynamic: dynamic_config::DynamicConfigs,
    /// The consumer-group coordinator and its `__consumer_offsets` storage.
    pub groups: Arc<group_service::GroupService>,
    /// Producer ids for InitProducerId (blocks persisted in the data dir).
    pub producer_ids: Arc<producer_ids::ProducerIdManager>,
    /// The transaction coordinator and its `__transaction_state` storage.
    pub txns: Arc<txn_service::TxnService>,
    /// Open client connections.
    pub connections: AtomicUsize,
    /// Memory for request frames being read or handled, in KiB permits.
    pub request_memory: Arc<tokio::sync::Semaphore>,
    /// Reused buffers for large request frames.
    pub frame_pool: frame_pool::FramePool,
    /// acks=all Produce requests waiting for their ISR.
    pub produce_purgatory: partition::purgatory::ProducePurgatory,
    /// Follower fetchers, one per source broker.
    pub fetchers: fetcher::FetcherManager,
    /// The incremental fetch sessions (KIP-227) of the followers fetching from this broker.
    pub fetch_sessions: parking_lot::Mutex<handlers::fetch_session::FetchSessionCache>,
    /// Flips to `true` when the broker shuts down (long polls return early).
    pub shutdown: watch::Receiver<bool>,
    /// Tiered storage: uploads, remote reads, tiered retention.
    pub tiering: Arc<streamforge_tiered::TieringManager>,
    /// This broker's clock (`config.clock`; its logs' runtime reads the same one).
    pub clock: SharedClock,
    /// This broker's metrics hub (see `BrokerConfig::metrics`).
    pub metrics: Option<Arc<MetricsHub>>,
    /// Listeners' endpoints, TLS acceptor, SCRAM credentials.
    pub security: security::SecurityState,
    /// Client quotas and their sensors (`quota`).
    pub quotas: Arc<quota::QuotaManager>,
}

impl BrokerState {
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// Spawn a task of this broker: what it records goes to this broker's metrics hub.
    pub fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        spawn_in(&self.metrics, fut)
    }

    /// Run `f` (blocking code of this broker) recording into this broker's metrics hub.
    pub fn in_metrics<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.metrics {
            Some(hub) => hub.in_scope(f),
            None => f(),
        }
    }
}

/// `tokio::spawn`, inside `hub` when there is one.
fn spawn_in<F>(hub: &Option<Arc<MetricsHub>>, fut: F) -> JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match hub {
        Some(hub) => tokio::spawn(hub.scope(fut)),
        None => tokio::spawn(fut),
    }
}

/// The entry point.
pub struct Broker;

impl Broker {
    /// Bind every listener, lock and open the data directory, then start serving.
    ///
    /// Order matters to an operator: a taken port fails before any file is created, and no
    /// connection is accepted (the accept loop starts last) before the logs are recovered.
    pub async fn start(mut config: BrokerConfig) -> Result<BrokerHandle, BrokerError> {
        let metrics = own_runtime(&mut config);
        let (listeners, bound) = bind_listeners(&config).await?;
        let kafka_addr = bound[0].1;
        // Before any file is created: a bad certificate or listener list fails here.
        let security = security_state(&config, &bound)?;
        let protocols: Vec<_> = bound.iter().map(|(p, _)| *p).collect();
        let inter_broker = Arc::new(
            inter_broker::InterBroker::for_broker(
                &config.security,
                &protocols,
                config.cluster.is_none(),
            )
            .map_err(|e| BrokerError::Config(e.to_string()))?,
        );
        let http_listener = match config.http_listen {
            Some(addr) => Some(bind_http(addr).await?),
            None => None,
        };
        let data_dir_lock = data_dir_lock::DataDirLock::acquire(&config.data_dir)?;
        // Before the logs: partitions read below their local log start through it.
        let tiering = streamforge_tiered::TieringManager::new(
            streamforge_tiered::TieredStorage::new(tiered_config(&config))
                .map_err(|e| BrokerError::Config(e.to_string()))?,
        );
        let (replicas, cluster_id, groups, producer_ids, dynamic) =
            open_storage(&config, &security.endpoints, tiering.clone()).await?;
        let layers = dynamic.layers();
        (replicas.replication_quotas())
            .apply_broker_configs(|name| layers.effective(name).map(|(v, _)| v));
        let (advertised_host, advertised_port) = {
            let first = &security.endpoints[0];
            (first.host.clone(), first.port)
        };
        let txns = Arc::new(
            txn_service::TxnService::open(&replicas, config.txn.clone())
                .map_err(|e| BrokerError::Config(e.to_string()))?,
        );
        // Offsets retention skips partitions with transactional offsets pending (Kafka's).
        groups.watch_pending_txn_offsets(txns.pending_offsets());
        let quotas = quota::open_in(
            &config.data_dir,
            config.quota_window,
            Arc::clone(&config.clock),
        )
        .map_err(|e| BrokerError::Config(e.to_string()))?;
        let request_memory_kib = request_memory_kib(&config);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let config_clock = Arc::clone(&config.clock);
        let fetcher_config = fetcher::FetcherConfig {
            node_id: config.node_id,
            partition_max_bytes: config.replica_fetch_max_bytes,
            response_max_bytes: config.replica_fetch_response_max_bytes,
        };
        let replication_quotas = replicas.replication_quotas().clone();
        let state = Arc::new(BrokerState {
            tiering,
            config,
            cluster_id,
            advertised_host,
            advertised_port,
            replicas,
            dynamic,
            groups,
            producer_ids,
            txns,
            connections: AtomicUsize::new(0),
            request_memory: Arc::new(tokio::sync::Semaphore::new(request_memory_kib)),
            frame_pool: frame_pool::FramePool::default(),
            produce_purgatory: Default::default(),
            fetchers: fetcher::FetcherManager::new(
                fetcher_config,
                replication_quotas,
                inter_broker,
                shutdown_rx.clone(),
            ),
            fetch_sessions: Default::default(),
            shutdown: shutdown_rx.clone(),
            clock: Arc::clone(&config_clock),
            metrics,
            security,
            quotas,
        });
        let partitions_max = partition_limit::resolve(state.config.max_partitions);
        state.replicas.set_partitions_max(partitions_max);
        (state.replicas).set_hw_checkpoint_interval_ms(
            state.config.replica_high_watermark_checkpoint_interval_ms,
        );
        // Recovery is done: checkpoint it now, so a crash loop shorter than the first
        // background flush does not re-scan an ever longer tail on every restart.
        let st = state.clone();
        tokio::task::spawn_blocking(move || st.replicas.checkpoint_recovery(st.clock.now_ms()));
        if state.replicas.metadata().is_cluster() {
            // Cluster mode: every committed delta is applied here as it commits.
            let st = state.clone();
            tokio::task::spawn_blocking(move || st.replicas.follow_metadata(&st.shutdown));
        }
        log_listening(&state, kafka_addr, partitions_max);
        tiered::startup(&state).await;
        let http = match http_listener {
            Some(listener) => Some(start_dashboard(listener, &state)?),
            None => None,
        };
        state.in_metrics(|| {
            request_metrics::describe();
            metrics::gauge!("streamforge_log_recovery_checked_bytes")
                .set(state.replicas.recovery_checked_bytes() as f64);
            metrics::gauge!("streamforge_offline_partitions")
                .set(state.replicas.offline_partitions() as f64);
        });
        state.spawn(group_service::run_timer(
            state.groups.clone(),
            shutdown_rx.clone(),
        ));
        state.spawn(txn_service::run_timer(state.clone(), shutdown_rx.clone()));
        state.spawn(txn_marker_sender::run(state.clone(), shutdown_rx.clone()));
        state.spawn(txn_verify_sender::run(state.clone(), shutdown_rx.clone()));
        state.spawn(coordinator_load::run(state.clone(), shutdown_rx.clone()));
        state.spawn(replication_wiring::run(state.clone(), shutdown_rx.clone()));
        let housekeeping = state.spawn(server::housekeeping(state.clone(), shutdown_rx.clone()));
        state.spawn(tiered::run(state.clone(), shutdown_rx.clone()));
        state.spawn(scrubber::run(state.clone(), shutdown_rx.clone()));
        let cleaner = cleaner::start(&state);
        if let Some(tls) = &state.security.tls {
            let interval_ms = state.config.security.ssl_reload_interval_ms;
            state.spawn(security::tls::run_reloader(
                tls.clone(),
                interval_ms,
                shutdown_rx.clone(),
            ));
        }
        if let Some(jwt) = &state.security.oauthbearer {
            let interval_ms = state.config.security.oauthbearer.jwks_refresh_ms;
            state.spawn(security::jwt::run_reloader(
                jwt.clone(),
                interval_ms,
                shutdown_rx.clone(),
            ));
        }
        let (failed_tx, failed) = watch::channel(None);
        if let Some(raft) = state.replicas.metadata().raft.clone() {
            state.spawn(watch_metadata_log(raft, failed_tx, shutdown_rx.clone()));
        }
        let serving = state.spawn(server::run(
            state.clone(),
            listeners,
            shutdown_rx,
            housekeeping,
        ));
        Ok(BrokerHandle {
            kafka_addr,
            http,
            state,
            shutdown_tx,
            serving,
            cleaner,
            failed,
            _data_dir_lock: data_dir_lock,
        })
    }
}

/// What this broker owns rather than shares with others in the process: its metrics hub
/// (chosen before anything records a metric, so /metrics and the live view see everything) and
/// its logs' runtime (flusher and reaper threads, the broker's clock; it stops when the last log
/// is dropped).
fn own_runtime(config: &mut BrokerConfig) -> Option<Arc<MetricsHub>> {
    config.log_defaults.runtime = LogRuntime::new(Arc::clone(&config.clock));
    match (&config.metrics, config.http_listen) {
        (Some(hub), _) => Some(Arc::clone(hub)),
        (None, Some(_)) => Some(streamforge_http::install_metrics()),
        (None, None) => None,
    }
}

fn log_listening(state: &BrokerState, kafka_addr: SocketAddr, partitions_max: usize) {
    tracing::info!(
        addr = %kafka_addr,
        partitions_max,
        advertised = %format!("{}:{}", state.advertised_host, state.advertised_port),
        node_id = state.config.node_id,
        cluster_id = %state.cluster_id,
        data_dir = %state.config.data_dir.display(),
        "broker listening"
    );
}

type BoundListeners = (
    Vec<TcpListener>,
    Vec<(security::SecurityProtocol, SocketAddr)>,
);

/// Bind every Kafka listener (`listeners`, or `listen` as one PLAINTEXT listener).
async fn bind_listeners(config: &BrokerConfig) -> Result<BoundListeners, BrokerError> {
    let mut listeners = Vec::new();
    let mut bound = Vec::new();
    for spec in security::listener_specs(&config.security, config.listen) {
        let (l, addr) = bind_kafka(spec.addr).await?;
        listeners.push(l);
        bound.push((spec.protocol, addr));
    }
    Ok((listeners, bound))
}

/// The TLS acceptor (when a listener speaks TLS), the principal mapping, the advertised
/// endpoints and the SCRAM credentials (read from the data dir, which is locked by now).
fn security_state(
    config: &BrokerConfig,
    bound: &[(security::SecurityProtocol, SocketAddr)],
) -> Result<security::SecurityState, BrokerError> {
    let cfg = &config.security;
    let tls = if bound.iter().any(|(p, _)| p.is_tls()) {
        Some(security::tls::TlsSource::load(cfg).map_err(|e| BrokerError::Config(e.to_string()))?)
    } else {
        None
    };
    let principal_mapper =
        security::principal::PrincipalMapper::parse(&cfg.ssl_principal_mapping_rules)
            .map_err(|e| BrokerError::Config(e.to_string()))?;
    let legacy = match &config.advertised_listener {
        Some(_) => Some(advertised(config, bound[0].1)?),
        None => None,
    };
    let credentials =
        security::credentials::CredentialStore::open(&config.data_dir).map_err(|e| {
            BrokerError::Storage {
                path: config.data_dir.clone(),
                message: e.to_string(),
            }
        })?;
    let oauthbearer = if cfg.serves_oauthbearer() {
        Some(
            security::jwt::JwtValidator::load(&cfg.oauthbearer)
                .map_err(|e| BrokerError::Config(e.to_string()))?,
        )
    } else {
        None
    };
    let authorizer =
        security::acl::open(cfg, &config.data_dir).map_err(|e| BrokerError::Storage {
            path: config.data_dir.clone(),
            message: e.to_string(),
        })?;
    Ok(security::SecurityState {
        endpoints: security::endpoints(cfg, bound, legacy),
        credentials: Arc::new(credentials),
        tls,
        principal_mapper,
        oauthbearer,
        authorizer,
    })
}

async fn bind_kafka(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BrokerError> {
    let bind_error = |source| BrokerError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let bound = listener.local_addr().map_err(bind_error)?;
    Ok((listener, bound))
}

async fn bind_http(addr: SocketAddr) -> Result<TcpListener, BrokerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BrokerError::HttpBind { addr, source })
}

type OpenedStorage = (
    ReplicaManager,
    String,
    Arc<group_service::GroupService>,
    Arc<producer_ids::ProducerIdManager>,
    dynamic_config::DynamicConfigs,
);

/// Recovers the partition logs (with the dynamic broker configs' defaults), the cluster id,
/// `__consumer_offsets` and the producer ids.
async fn open_storage(
    config: &BrokerConfig,
    endpoints: &[security::Endpoint],
    tiering: Arc<streamforge_tiered::TieringManager>,
) -> Result<OpenedStorage, BrokerError> {
    let metadata = metadata_options(config, endpoints);
    let clock = Arc::clone(&config.clock);
    let data_dir = config.data_dir.clone();
    let static_log_defaults = config.log_defaults.clone();
    let static_max_connections = config.max_connections;
    let groups_config = config.groups.clone();
    let fresh_cluster_id = match (&config.cluster_id, &config.cluster) {
        (Some(id), _) => id.clone(),
        (None, Some(cluster)) => metadata_cluster::derived_cluster_id(&cluster.voters),
        (None, None) => new_cluster_id(),
    };
    let storage_error = {
        let path = data_dir.clone();
        move |message: String| BrokerError::Storage {
            path: path.clone(),
            message,
        }
    };
    let error = storage_error.clone();
    tokio::task::spawn_blocking(move || {
        let dynamic = dynamic_config::DynamicConfigs::open(&data_dir, static_max_connections)
            .map_err(|e| error(e.to_string()))?;
        let log_defaults = dynamic.layers().log_defaults(&static_log_defaults);
        let replicas = ReplicaManager::open_with(&data_dir, metadata, log_defaults, Some(tiering))
            .map_err(|e| error(e.to_string()))?;
        let cluster_id = replicas
            .store()
            .cluster_id(|| fresh_cluster_id)
            .map_err(|e| error(e.to_string()))?;
        let groups = group_service::GroupService::open(&replicas, groups_config)
            .map_err(|e| error(e.to_string()))?;
        let blocks = Arc::new(metadata_service::ControllerBlocks {
            metadata: Arc::clone(replicas.metadata()),
            clock,
        });
        let producer_ids = producer_ids::ProducerIdManager::open(&data_dir, blocks)
            .map_err(|e| error(e.to_string()))?;
        Ok::<_, BrokerError>((
            replicas,
            cluster_id,
            Arc::new(groups),
            Arc::new(producer_ids),
            dynamic,
        ))
    })
    .await
    .map_err(|e| storage_error(e.to_string()))?
}

/// This broker in the metadata quorum: its id, its listener, the controller's settings.
fn metadata_options(
    config: &BrokerConfig,
    endpoints: &[security::Endpoint],
) -> replica_manager::MetadataOptions {
    use streamforge_metadata::controller::ControllerConfig;
    replica_manager::MetadataOptions {
        node_id: config.node_id,
        // One per listener, named by its security protocol (the listener name here).
        endpoints: endpoints
            .iter()
            .map(|e| streamforge_metadata::records::Endpoint {
                name: e.protocol.name().to_string(),
                host: e.host.clone(),
                port: e.port.clamp(0, i32::from(u16::MAX)) as u16,
            })
            .collect(),
        rack: config.broker_rack.clone(),
        controller: ControllerConfig {
            broker_session_timeout_ms: config.broker_session_timeout_ms,
            default_num_partitions: config.num_partitions,
            default_replication_factor: config.default_replication_factor,
            auto_leader_rebalance_enable: config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_ms: config
                .leader_imbalance_check_interval_seconds
                .saturating_mul(1000),
            leader_imbalance_per_broker_percentage: config.leader_imbalance_per_broker_percentage,
            unclean_leader_election_enable: config.log_defaults.unclean_leader_election_enable,
            // The broker's `min.insync.replicas`: the ELR's threshold for topics without one.
            min_insync_replicas: i32::try_from(config.log_defaults.min_insync_replicas)
                .unwrap_or(i32::MAX),
            ..ControllerConfig::default()
        },
        heartbeat_interval_ms: config.broker_heartbeat_interval_ms,
        cluster: config.cluster.clone(),
        replica_lag_time_max_ms: config.replica_lag_time_max_ms,
        replication_quota_window: config.replication_quota_window,
    }
}

fn tiered_config(config: &BrokerConfig) -> streamforge_tiered::TieredConfig {
    match &config.tiered {
        Some(c) => c.clone(),
        None => streamforge_tiered::TieredConfig {
            store: streamforge_tiered::StoreSpec::Local {
                path: config.data_dir.join("remote-storage"),
            },
            fail_point: streamforge_tiered::FailPoint::from_env(),
            ..Default::default()
        },
    }
}

/// A running broker.
pub struct BrokerHandle {
    kafka_addr: SocketAddr,
    http: Option<streamforge_http::HttpServer>,
    state: Arc<BrokerState>,
    shutdown_tx: watch::Sender<bool>,
    serving: JoinHandle<()>,
    /// The log cleaner's threads (stopped before the logs close).
    cleaner: Option<streamforge_log::LogCleaner>,
    /// Set when this node's member of the metadata quorum stopped on an error.
    failed: watch::Receiver<Option<String>>,
    /// Held until the handle is dropped (after shutdown closed every log).
    _data_dir_lock: data_dir_lock::DataDirLock,
}

/// Wait until this node's Raft core stops on its own (a write of the metadata log failed: a
/// full disk) and say why on `failed`. openraft does not restart it: the broker would serve on
/// with a metadata image that never moves again, so the caller stops the process, as Kafka
/// halts a broker whose metadata log dir fails.
async fn watch_metadata_log(
    raft: streamforge_metadata::quorum::raft::RaftQuorum,
    failed: watch::Sender<Option<String>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut changes = raft.changes();
    loop {
        let failure = streamforge_metadata::quorum::raft::fatal_error(&changes.borrow_and_update());
        if let Some(error) = failure {
            tracing::error!(%error, "the metadata log cannot be written: this node's metadata quorum member stopped");
            let _ = failed.send(Some(error));
            return;
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

impl BrokerHandle {
    /// The address the Kafka listener is bound to (the real port when 0 was asked for).
    pub fn kafka_addr(&self) -> SocketAddr {
        self.kafka_addr
    }

    /// Every Kafka listener with its protocol and bound address, in `listeners` order.
    pub fn listener_addrs(&self) -> Vec<(security::SecurityProtocol, SocketAddr)> {
        self.state
            .security
            .endpoints
            .iter()
            .map(|e| (e.protocol, e.bound))
            .collect()
    }

    /// The address the dashboard is bound to, when it is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    /// Shared state, for read-only views (dashboard) and embedding.
    pub fn state(&self) -> Arc<BrokerState> {
        self.state.clone()
    }

    /// Resolves when this broker cannot go on: its member of the metadata quorum stopped on
    /// an error (the metadata log cannot be written). Never resolves otherwise.
    pub async fn failed(&self) -> String {
        let mut failed = self.failed.clone();
        loop {
            if let Some(reason) = failed.borrow_and_update().clone() {
                return reason;
            }
            if failed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stop accepting, let in-flight requests finish, flush and close every log.
    pub async fn shutdown(self) {
        tracing::info!("broker shutting down");
        let _ = self.shutdown_tx.send(true);
        if let Some(cleaner) = self.cleaner {
            // Joining waits for a pass to stop; off the async workers.
            let _ = tokio::task::spawn_blocking(move || drop(cleaner)).await;
        }
        if let Some(http) = self.http {
            http.shutdown().await;
        }
        if let Err(e) = self.serving.await {
            tracing::error!(error = %e, "server task failed");
        }
        tracing::info!("broker stopped");
    }

    /// Wait until the broker stops by itself (it does not, unless shut down elsewhere).
    pub async fn wait(&mut self) {
        let _ = (&mut self.serving).await;
    }
}

/// Starts the dashboard over the broker's read-only view, on its already bound listener.
fn start_dashboard(
    listener: TcpListener,
    state: &Arc<BrokerState>,
) -> Result<streamforge_http::HttpServer, BrokerError> {
    let addr = listener
        .local_addr()
        .map_err(|source| BrokerError::HttpBind {
            addr: state
                .config
                .http_listen
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            source,
        })?;
    let mut options = state.config.http.clone();
    options.metrics = state.metrics.clone();
    if options.bench_history_path.is_none() {
        options.bench_history_path = Some(
            state
                .config
                .data_dir
                .join("dashboard")
                .join("bench-history.json"),
        );
    }
    if options.auth.is_none() {
        options.auth = http_auth::dashboard_auth(state);
    }
    if options.authorizer.is_none() {
        options.authorizer = http_auth::dashboard_authorizer(state);
    }
    http_auth::log_exposure(addr, options.auth.as_ref());
    let view = Arc::new(http_view::BrokerView::new(state.clone()));
    streamforge_http::serve_on(listener, view, options)
        .map_err(|source| BrokerError::HttpBind { addr, source })
}

fn advertised(config: &BrokerConfig, bound: SocketAddr) -> Result<(String, i32), BrokerError> {
    match &config.advertised_listener {
        Some(s) => {
            let s = s.strip_prefix("PLAINTEXT://").unwrap_or(s);
            let (host, port) = s.rsplit_once(':').ok_or_else(|| {
                BrokerError::Config(format!("advertised listener {s}: want HOST:PORT"))
            })?;
            let port: u16 = port
                .parse()
                .map_err(|_| BrokerError::Config(format!("advertised listener {s}: bad port")))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Ok((host.to_string(), port as i32))
        }
        None => {
            // An unspecified bind address is not reachable as such; loopback is what a local
            // client can always reach. Remote clients need --advertised-listener.
            let host = if bound.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                bound.ip().to_string()
            };
            Ok((host, bound.port() as i32))
        }
    }
}

/// KiB permits for request memory: at least one largest frame must fit.
fn request_memory_kib(config: &BrokerConfig) -> usize {
    let bytes = config
        .queued_max_request_bytes
        .max(config.socket_request_max_bytes);
    bytes
        .div_ceil(1024)
        .min(tokio::sync::Semaphore::MAX_PERMITS)
}

fn new_cluster_id() -> String {
    encode_cluster_id(u128::from_be_bytes(rand::random()))
}

/// Kafka cluster ids are 16 bytes in URL-safe base64 without padding (22 chars).
pub(crate) fn encode_cluster_id(mut bits: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for _ in 0..22 {
        out.push(ALPHABET[(bits & 63) as usize] as char);
        bits >>= 6;
    }
    out
}

/// Convert a config duration in ms.
pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

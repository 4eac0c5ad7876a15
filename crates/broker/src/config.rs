//! `BrokerConfig`: every setting of the broker process, with Kafka-like defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use streamforge_http::MetricsHub;
use streamforge_log::LogConfig;
use streamforge_protocol::clock::{SharedClock, SystemClock};

/// All broker settings. `Default` gives a broker that serves on 0.0.0.0:9092 with data in
/// `./data`.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Address the Kafka listener binds (`listeners`).
    pub listen: SocketAddr,
    /// `host:port` given to clients in Metadata (`advertised.listeners`). `None` = the bound
    /// address (with `localhost` in place of an unspecified host).
    pub advertised_listener: Option<String>,
    /// Where partition logs and broker metadata live (`log.dirs`).
    pub data_dir: PathBuf,
    /// `node.id`.
    pub node_id: i32,
    /// Partitions of auto-created topics and of CreateTopics with -1 (`num.partitions`).
    pub num_partitions: i32,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// Broker-wide defaults of the topic-level log configs (`log.retention.ms`, ...).
    pub log_defaults: LogConfig,
    /// `socket.request.max.bytes`: larger frames close the connection.
    pub socket_request_max_bytes: usize,
    /// `queued.max.request.bytes`: request bytes read but not yet handled, over all
    /// connections. Reading waits when it is used up (at least one maximal frame fits).
    pub queued_max_request_bytes: usize,
    /// `max.connections`: further connections are closed right after accept.
    pub max_connections: usize,
    /// `connections.max.idle.ms`: a connection with no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// Once a frame has started, all of it must arrive within this time (slow-client guard).
    pub request_read_timeout_ms: u64,
    /// How often the housekeeping task calls `Log::tick` (roll, retention, `flush.ms`).
    pub log_tick_interval_ms: u64,
    /// Background flush: data appended more than about this long ago is fsynced off the append
    /// path (and rolled segments right after the roll), moving each log's recovery point so an
    /// unclean restart re-checks only the recent tail, and a machine crash loses at most about
    /// this much acknowledged data. 0 = only on roll (and `flush.ms`/`flush.messages`, acks=all
    /// group commit, clean shutdown). Kafka leaves this to the OS and relies on replication.
    pub log_flush_background_ms: u64,
    /// `fetch.max.bytes`: most record bytes in one Fetch response to a consumer; the request's
    /// `max_bytes` is lowered to it (the first partition still gets at least one batch).
    pub fetch_max_bytes: usize,
    /// `replica.fetch.max.bytes`: per-partition cap for Fetch requests with a replica id.
    pub replica_fetch_max_bytes: usize,
    /// `replica.fetch.response.max.bytes`: response cap for Fetch requests with a replica id.
    pub replica_fetch_response_max_bytes: usize,
    /// `replica.lag.time.max.ms`: an ISR member that has not caught up for this long is dropped.
    pub replica_lag_time_max_ms: i64,
    /// `broker.rack`: the rack this broker is in, registered with the controller and shown
    /// by Metadata / DescribeCluster (`None` = unset).
    pub broker_rack: Option<String>,
    /// `replica.selector.class` (KIP-392): `RackAware` lets a leader send a consumer to an
    /// in-sync replica in its `client.rack`; `Leader` (the default, as Kafka's none) never does.
    pub replica_selector: crate::partition::replica_selector::ReplicaSelectorKind,
    /// `replica.high.watermark.checkpoint.interval.ms`: how often the housekeeping tick writes
    /// every partition's high watermark to `<data_dir>/replication-offset-checkpoint` (also
    /// written at clean shutdown; 0 = only then).
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// Most partitions this broker hosts (all topics); CreateTopics/CreatePartitions and
    /// auto-creation past it fail. `None` = derived from the open-files limit and
    /// `vm.max_map_count` at start-up (`partition_limit::resolve`).
    pub max_partitions: Option<usize>,
    /// Background scrub: every this many ms, re-check the CRC of every batch of every sealed
    /// segment (outside the logs' locks); damage is logged at ERROR and counted in
    /// `streamforge_scrub_errors_total`. 0 = off (the default).
    pub log_scrub_interval_ms: u64,
    /// Graceful shutdown: longest wait for in-flight requests before closing the logs.
    pub shutdown_grace_ms: u64,
    /// `log.cleaner.enable` (default true): run the log cleaner for compacted topics.
    pub log_cleaner_enable: bool,
    /// `log.cleaner.*`: threads, dedupe buffer, I/O limit, backoff.
    pub log_cleaner: streamforge_log::CleanerConfig,
    /// Consumer groups: coordinator settings and the `__consumer_offsets` topic.
    pub groups: crate::group_service::GroupsConfig,
    /// Transactions: `transaction.state.log.num.partitions`, `transaction.max.timeout.ms`.
    pub txn: streamforge_coordinator::txn::TxnConfig,
    /// Dashboard + /metrics listener (`None` = off). Wired by the http crate.
    pub http_listen: Option<SocketAddr>,
    /// Tiered storage (object store, cache, upload settings). `None` = a local directory
    /// `<data_dir>/remote-storage`; topics tier only with `remote.storage.enable=true`.
    pub tiered: Option<streamforge_tiered::TieredConfig>,
    /// Dashboard extras (benchmark runner, history file; the history defaults to the data dir).
    pub http: streamforge_http::HttpOptions,
    /// The dashboard's login (`--http-auth`, `--http-session-timeout-ms`, `--http-metrics-auth`).
    pub http_auth: crate::http_auth::HttpAuthConfig,
    /// The clock this broker reads (its logs' runtime gets it too); the system clock by default.
    /// A test passes a `ManualClock` to run brokers under simulated time.
    pub clock: SharedClock,
    /// Where this broker's metrics go (and what its `/metrics` serves). `None`: the process
    /// default hub, installed as the `metrics` global recorder, when the dashboard is on (the
    /// binary's case); nothing is recorded when it is off.
    pub metrics: Option<Arc<MetricsHub>>,
    /// Listeners with security protocols, TLS and SASL (`listeners` overrides `listen`).
    pub security: crate::security::SecurityConfig,
    /// Kafka's `default.replication.factor`: topics created without one get it.
    pub default_replication_factor: i16,
    /// Kafka's `broker.session.timeout.ms`: a broker silent this long is fenced.
    pub broker_session_timeout_ms: u64,
    /// Kafka's `broker.heartbeat.interval.ms`.
    pub broker_heartbeat_interval_ms: u64,
    /// Kafka's `auto.leader.rebalance.enable`: the active controller moves leadership back to
    /// preferred replicas every `leader_imbalance_check_interval_seconds`.
    pub auto_leader_rebalance_enable: bool,
    /// Kafka's `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_seconds: u64,
    /// Kafka's `leader.imbalance.per.broker.percentage` (its ZooKeeper controller's rule).
    pub leader_imbalance_per_broker_percentage: u32,
    /// `quota.window.num` / `quota.window.size.seconds`: the client-quota sensors' windows.
    pub quota_window: crate::quota::rate::RateConfig,
    /// `replication.quota.window.num` / `replication.quota.window.size.seconds`: the
    /// reassignment throttles' windows (`quota::replication`).
    pub replication_quota_window: crate::quota::rate::RateConfig,
    /// `controller.quorum.voters`: `Some` makes this broker a voter of that static quorum
    /// (and the controller when it leads); `None` is the one-voter quorum of itself.
    pub cluster: Option<crate::metadata_cluster::ClusterOptions>,
    /// The cluster id a fresh data dir gets (`None`: random alone, derived from the voters in
    /// a cluster, so every broker of it has the same one).
    pub cluster_id: Option<String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9092)),
            advertised_listener: None,
            data_dir: PathBuf::from("./data"),
            node_id: 1,
            num_partitions: 1,
            auto_create_topics: true,
            log_defaults: LogConfig::default(),
            socket_request_max_bytes: 100 * 1024 * 1024,
            queued_max_request_bytes: 1024 * 1024 * 1024,
            max_connections: 10_000,
            connections_max_idle_ms: 600_000,
            request_read_timeout_ms: 60_000,
            log_tick_interval_ms: 1_000,
            log_flush_background_ms: 1_000,
            fetch_max_bytes: 57_671_680,
            replica_fetch_max_bytes: 1024 * 1024,
            replica_fetch_response_max_bytes: 10 * 1024 * 1024,
            replica_lag_time_max_ms: crate::partition::replica::REPLICA_LAG_TIME_MAX_MS_DEFAULT,
            broker_rack: None,
            replica_selector: Default::default(),
            replica_high_watermark_checkpoint_interval_ms:
                crate::replica_manager::HW_CHECKPOINT_INTERVAL_MS_DEFAULT,
            max_partitions: None,
            log_scrub_interval_ms: 0,
            shutdown_grace_ms: 10_000,
            log_cleaner_enable: true,
            log_cleaner: streamforge_log::CleanerConfig::default(),
            groups: Default::default(),
            txn: Default::default(),
            // Loopback: without a login (`http_auth`) anyone reaching the dashboard can create
            // and delete topics.
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            http: streamforge_http::HttpOptions::default(),
            http_auth: Default::default(),
            tiered: None,
            clock: SystemClock::shared(),
            metrics: None,
            security: Default::default(),
            default_replication_factor: 1,
            broker_session_timeout_ms: streamforge_metadata::controller::BROKER_SESSION_TIMEOUT_MS,
            broker_heartbeat_interval_ms:
                streamforge_metadata::controller::BROKER_HEARTBEAT_INTERVAL_MS,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds:
                streamforge_metadata::controller::LEADER_IMBALANCE_CHECK_INTERVAL_MS / 1000,
            leader_imbalance_per_broker_percentage:
                streamforge_metadata::controller::LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
            quota_window: Default::default(),
            replication_quota_window: crate::quota::replication::rate_config(),
            cluster: None,
            cluster_id: None,
        }
    }
}

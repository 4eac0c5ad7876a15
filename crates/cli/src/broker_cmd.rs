//! `streamforge broker`: run the broker. Settings come from flags, then `STREAMFORGE_*`
//! environment variables, then an optional TOML file (`--config`), then defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use streamforge_broker::{Broker, BrokerConfig};

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// TOML file with any of the settings below (keys in snake_case, e.g. `data_dir`, or
    /// Kafka's broker property names, e.g. `log.dirs`, `listeners`, `num.partitions`).
    #[arg(long, env = "STREAMFORGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the effective settings (flags > env > file > defaults) as a config file and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Kafka listener: HOST:PORT, :PORT (all interfaces), or PLAINTEXT://HOST:PORT [default: 0.0.0.0:9092].
    #[arg(long, env = "STREAMFORGE_LISTEN")]
    pub listen: Option<String>,
    /// HOST:PORT clients are told to connect to [default: the listen address; 127.0.0.1 for 0.0.0.0].
    #[arg(long, env = "STREAMFORGE_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// Kafka listeners with a security protocol each, comma-separated
    /// `PROTOCOL://HOST:PORT` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); replaces --listen.
    #[arg(long, env = "STREAMFORGE_LISTENERS")]
    pub listeners: Option<String>,
    /// What clients are told per listener, same form (`SASL_SSL://kafka.example:9094,...`).
    #[arg(long, env = "STREAMFORGE_ADVERTISED_LISTENERS")]
    pub advertised_listeners: Option<String>,
    /// TLS certificate chain (PEM) of SSL and SASL_SSL listeners; reloaded when it changes.
    #[arg(long, env = "STREAMFORGE_SSL_CERT")]
    pub ssl_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "STREAMFORGE_SSL_KEY")]
    pub ssl_key: Option<PathBuf>,
    /// CA bundle (PEM) client certificates must chain to (mutual TLS).
    #[arg(long, env = "STREAMFORGE_SSL_CA")]
    pub ssl_ca: Option<PathBuf>,
    /// `ssl.client.auth`: none, requested or required [default: none].
    #[arg(long, env = "STREAMFORGE_SSL_CLIENT_AUTH")]
    pub ssl_client_auth: Option<String>,
    /// `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[LU],...,DEFAULT` [default: DEFAULT].
    #[arg(long, env = "STREAMFORGE_SSL_PRINCIPAL_MAPPING_RULES")]
    pub ssl_principal_mapping_rules: Option<String>,
    /// How often the PEM files are checked for changes, 0 = never [default: 10000].
    #[arg(long, env = "STREAMFORGE_SSL_RELOAD_INTERVAL_MS")]
    pub ssl_reload_interval_ms: Option<u64>,
    /// `sasl.enabled.mechanisms`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 [default: SCRAM-SHA-256,SCRAM-SHA-512].
    #[arg(long, env = "STREAMFORGE_SASL_MECHANISMS")]
    pub sasl_mechanisms: Option<String>,
    /// A TLS handshake must complete within this many ms [default: 10000].
    #[arg(long, env = "STREAMFORGE_SSL_HANDSHAKE_TIMEOUT_MS")]
    pub ssl_handshake_timeout_ms: Option<u64>,
    /// SASL listeners: authentication must succeed within this many ms of accept [default: 10000].
    #[arg(long, env = "STREAMFORGE_SASL_HANDSHAKE_TIMEOUT_MS")]
    pub sasl_handshake_timeout_ms: Option<u64>,
    /// `connections.max.reauth.ms` (KIP-368): SASL sessions last this long, 0 = forever [default: 0].
    #[arg(long, env = "STREAMFORGE_CONNECTIONS_MAX_REAUTH_MS")]
    pub connections_max_reauth_ms: Option<u64>,
    /// `inter.broker.listener.name`: the listener (= its protocol: PLAINTEXT, SSL,
    /// SASL_PLAINTEXT, SASL_SSL) brokers replicate and talk on [default: the first listener].
    #[arg(long, env = "STREAMFORGE_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
    /// `security.inter.broker.protocol`: the same, by protocol (set only one of the two).
    #[arg(long, env = "STREAMFORGE_SECURITY_INTER_BROKER_PROTOCOL")]
    pub security_inter_broker_protocol: Option<String>,
    /// `sasl.mechanism.inter.broker.protocol`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    /// [default: the first of --sasl-mechanisms].
    #[arg(long, env = "STREAMFORGE_SASL_MECHANISM_INTER_BROKER_PROTOCOL")]
    pub sasl_mechanism_inter_broker_protocol: Option<String>,
    /// The broker's own SASL user on a SASL inter-broker listener.
    #[arg(long, env = "STREAMFORGE_INTER_BROKER_SASL_USERNAME")]
    pub inter_broker_sasl_username: Option<String>,
    /// Its password (prefer the environment variable or the config file to the command line).
    #[arg(
        long,
        env = "STREAMFORGE_INTER_BROKER_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub inter_broker_sasl_password: Option<String>,
    /// SASL/OAUTHBEARER token checks (`sasl.oauthbearer.*`).
    #[command(flatten)]
    pub oauthbearer: crate::oauth_args::OAuthArgs,
    /// `quota.window.num`: samples per client-quota sensor [default: 11].
    #[arg(long, env = "STREAMFORGE_QUOTA_WINDOW_NUM")]
    pub quota_window_num: Option<usize>,
    /// `quota.window.size.seconds`: the span of one client-quota sample [default: 1].
    #[arg(long, env = "STREAMFORGE_QUOTA_WINDOW_SIZE_SECONDS")]
    pub quota_window_size_seconds: Option<u64>,
    /// `replication.quota.window.num`: samples of the reassignment throttles' rates [default: 11].
    #[arg(long, env = "STREAMFORGE_REPLICATION_QUOTA_WINDOW_NUM")]
    pub replication_quota_window_num: Option<usize>,
    /// `replication.quota.window.size.seconds`: the span of one such sample [default: 1].
    #[arg(long, env = "STREAMFORGE_REPLICATION_QUOTA_WINDOW_SIZE_SECONDS")]
    pub replication_quota_window_size_seconds: Option<u64>,
    /// `authorizer.class.name`: `acl` authorizes every request with ACLs (`streamforge acls`)
    /// [default: none, everything allowed].
    #[arg(long, env = "STREAMFORGE_AUTHORIZER")]
    pub authorizer: Option<String>,
    /// `super.users`: principals that bypass ACLs, `User:admin;User:ops` (or comma-separated).
    #[arg(long, env = "STREAMFORGE_SUPER_USERS")]
    pub super_users: Option<String>,
    /// `allow.everyone.if.no.acl.found`: a resource no ACL applies to is open to all [default: false].
    #[arg(long, env = "STREAMFORGE_ALLOW_EVERYONE_IF_NO_ACL_FOUND", num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// Data directory [default: ./data].
    #[arg(long, env = "STREAMFORGE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// This broker's node id [default: 1].
    #[arg(long, env = "STREAMFORGE_NODE_ID")]
    pub node_id: Option<i32>,
    /// The static metadata quorum, `id@host:port,...` (`controller.quorum.voters`); a broker
    /// listed there is also a controller. Unset: a one-voter quorum of itself.
    #[arg(long, env = "STREAMFORGE_CONTROLLER_QUORUM_VOTERS")]
    pub controller_quorum_voters: Option<String>,
    /// The controller listener (Raft and forwarded controller requests) [default: this node's voter address].
    #[arg(long, env = "STREAMFORGE_CONTROLLER_LISTEN")]
    pub controller_listen: Option<String>,
    /// What the controller listener speaks (Kafka: the `listener.security.protocol.map` entry
    /// of `controller.listener.names`): PLAINTEXT, or SSL (mutual TLS with --ssl-cert/--ssl-key,
    /// peers checked against --ssl-ca). Every node of a cluster must use the same [default: PLAINTEXT].
    #[arg(long, env = "STREAMFORGE_CONTROLLER_LISTENER_SECURITY_PROTOCOL")]
    pub controller_listener_security_protocol: Option<String>,
    /// This node's roles in a cluster (`process.roles`): `broker,controller` (a voter and
    /// controller, combined mode) or `broker` (a broker-only node that follows the metadata
    /// quorum without voting; needs --controller-listen) [default: broker,controller when
    /// --node-id is in --controller-quorum-voters, else broker].
    #[arg(long, env = "STREAMFORGE_PROCESS_ROLES")]
    pub process_roles: Option<String>,
    /// The cluster id a fresh data dir gets [default: random; in a cluster, derived from the voters].
    #[arg(long, env = "STREAMFORGE_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// Partitions of auto-created topics (`num.partitions`) [default: 1].
    #[arg(long, env = "STREAMFORGE_NUM_PARTITIONS")]
    pub num_partitions: Option<i32>,
    /// Replication factor of topics created without one (`default.replication.factor`) [default: 1].
    #[arg(long, env = "STREAMFORGE_DEFAULT_REPLICATION_FACTOR")]
    pub default_replication_factor: Option<i16>,
    /// In-sync replicas an acks=all write needs, for topics without their own (`min.insync.replicas`) [default: 1].
    #[arg(long, env = "STREAMFORGE_MIN_INSYNC_REPLICAS")]
    pub min_insync_replicas: Option<usize>,
    /// The controller fences a broker silent this long (`broker.session.timeout.ms`; Kafka's default is 9000) [default: 2000].
    #[arg(long, env = "STREAMFORGE_BROKER_SESSION_TIMEOUT_MS")]
    pub broker_session_timeout_ms: Option<u64>,
    /// How often this broker heartbeats to the controller (`broker.heartbeat.interval.ms`; Kafka's default is 2000) [default: 500].
    #[arg(long, env = "STREAMFORGE_BROKER_HEARTBEAT_INTERVAL_MS")]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// The active controller moves leadership back to preferred replicas periodically (`auto.leader.rebalance.enable`) [default: true].
    #[arg(long, env = "STREAMFORGE_AUTO_LEADER_REBALANCE_ENABLE")]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// How often the controller checks for leaders away from their preferred replica (`leader.imbalance.check.interval.seconds`) [default: 300].
    #[arg(long, env = "STREAMFORGE_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS")]
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// A broker gets its preferred leaderships back only when more than this percentage of them is led elsewhere (`leader.imbalance.per.broker.percentage`; 0 = any) [default: 10].
    #[arg(long, env = "STREAMFORGE_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE")]
    pub leader_imbalance_per_broker_percentage: Option<u32>,
    /// Topics without their own setting may elect a leader outside the ISR, losing data (`unclean.leader.election.enable`) [default: false].
    #[arg(long, env = "STREAMFORGE_UNCLEAN_LEADER_ELECTION_ENABLE")]
    pub unclean_leader_election_enable: Option<bool>,
    /// Create topics on first Metadata request (`auto.create.topics.enable`) [default: true].
    #[arg(long, env = "STREAMFORGE_AUTO_CREATE_TOPICS")]
    pub auto_create_topics: Option<bool>,
    /// Default `retention.ms` (-1 = forever) [default: 604800000].
    #[arg(long, env = "STREAMFORGE_RETENTION_MS", allow_hyphen_values = true)]
    pub retention_ms: Option<i64>,
    /// Default `retention.bytes` (-1 = unlimited) [default: -1].
    #[arg(long, env = "STREAMFORGE_RETENTION_BYTES", allow_hyphen_values = true)]
    pub retention_bytes: Option<i64>,
    /// Default `segment.bytes` [default: 1073741824].
    #[arg(long, env = "STREAMFORGE_SEGMENT_BYTES")]
    pub segment_bytes: Option<u64>,
    /// `log.retention.check.interval.ms`: how often retention.ms / retention.bytes are applied [default: 300000].
    #[arg(long, env = "STREAMFORGE_LOG_RETENTION_CHECK_INTERVAL_MS")]
    pub log_retention_check_interval_ms: Option<i64>,
    /// Default `flush.messages`: fsync after this many messages [default: never, OS decides].
    #[arg(long, env = "STREAMFORGE_FLUSH_MESSAGES")]
    pub flush_messages: Option<i64>,
    /// Default `flush.ms`: fsync at least this often [default: never, OS decides].
    #[arg(long, env = "STREAMFORGE_FLUSH_MS")]
    pub flush_ms: Option<i64>,
    /// Background flush: fsync data older than this many ms off the append path, bounding what
    /// an unclean restart re-checks and a machine crash loses (0 = only rolled segments) [default: 1000].
    #[arg(long, env = "STREAMFORGE_LOG_FLUSH_BACKGROUND_MS")]
    pub log_flush_background_ms: Option<u64>,
    /// Background scrub: re-check the CRC of every sealed segment every this many ms, logging
    /// damage at ERROR and counting streamforge_scrub_errors_total (0 = off) [default: 0].
    #[arg(long, env = "STREAMFORGE_LOG_SCRUB_INTERVAL_MS")]
    pub log_scrub_interval_ms: Option<u64>,
    /// `log.cleaner.enable`: compact `cleanup.policy=compact` topics [default: true].
    #[arg(long, env = "STREAMFORGE_LOG_CLEANER_ENABLE")]
    pub log_cleaner_enable: Option<bool>,
    /// `log.cleaner.backoff.ms`: the cleaner's sleep when no log needs cleaning [default: 15000].
    #[arg(long, env = "STREAMFORGE_LOG_CLEANER_BACKOFF_MS")]
    pub log_cleaner_backoff_ms: Option<u64>,
    /// `log.cleaner.dedupe.buffer.size`: memory of the cleaner's offset maps [default: 134217728].
    #[arg(long, env = "STREAMFORGE_LOG_CLEANER_DEDUPE_BUFFER_SIZE")]
    pub log_cleaner_dedupe_buffer_size: Option<usize>,
    /// `log.cleaner.io.max.bytes.per.second`: the cleaner's read+write limit [default: unlimited].
    #[arg(long, env = "STREAMFORGE_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    pub log_cleaner_io_max_bytes_per_second: Option<f64>,
    /// `log.cleaner.threads` [default: 1].
    #[arg(long, env = "STREAMFORGE_LOG_CLEANER_THREADS")]
    pub log_cleaner_threads: Option<usize>,
    /// Default `max.message.bytes` (largest record batch) [default: 1048588].
    #[arg(long, env = "STREAMFORGE_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<u64>,
    /// `socket.request.max.bytes` [default: 104857600].
    #[arg(long, env = "STREAMFORGE_SOCKET_REQUEST_MAX_BYTES")]
    pub socket_request_max_bytes: Option<usize>,
    /// `queued.max.request.bytes`: request bytes read but not yet handled [default: 1073741824].
    #[arg(long, env = "STREAMFORGE_QUEUED_MAX_REQUEST_BYTES")]
    pub queued_max_request_bytes: Option<usize>,
    /// `max.connections` [default: 10000].
    #[arg(long, env = "STREAMFORGE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// The finalized `transaction.version` feature: 2 serves KIP-890 part 2 (an epoch bump
    /// per transaction) to clients that use it, 0 keeps every client on KIP-98 [default: 2].
    #[arg(long, env = "STREAMFORGE_TRANSACTION_VERSION", value_parser = clap::value_parser!(i16).range(0..=2))]
    pub transaction_version: Option<i16>,
    /// `transactional.id.expiration.ms`: a transactional id with no transaction open whose
    /// state has not changed for this long is removed [default: 604800000].
    #[arg(long, env = "STREAMFORGE_TRANSACTIONAL_ID_EXPIRATION_MS", value_parser = clap::value_parser!(i64).range(1..))]
    pub transactional_id_expiration_ms: Option<i64>,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how often expired
    /// transactional ids are looked for [default: 3600000].
    #[arg(long, env = "STREAMFORGE_TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS", value_parser = clap::value_parser!(i64).range(1..))]
    pub transaction_remove_expired_transaction_cleanup_interval_ms: Option<i64>,
    /// `connections.max.idle.ms` [default: 600000].
    #[arg(long, env = "STREAMFORGE_CONNECTIONS_MAX_IDLE_MS")]
    pub connections_max_idle_ms: Option<u64>,
    /// A started request frame must complete within this many ms [default: 60000].
    #[arg(long, env = "STREAMFORGE_REQUEST_READ_TIMEOUT_MS")]
    pub request_read_timeout_ms: Option<u64>,
    /// `fetch.max.bytes`: most record bytes in one Fetch response [default: 57671680].
    #[arg(long, env = "STREAMFORGE_FETCH_MAX_BYTES")]
    pub fetch_max_bytes: Option<usize>,
    /// `replica.fetch.max.bytes`: per-partition cap of replica fetches [default: 1048576].
    #[arg(long, env = "STREAMFORGE_REPLICA_FETCH_MAX_BYTES")]
    pub replica_fetch_max_bytes: Option<usize>,
    /// `replica.fetch.response.max.bytes`: response cap of replica fetches [default: 10485760].
    #[arg(long, env = "STREAMFORGE_REPLICA_FETCH_RESPONSE_MAX_BYTES")]
    pub replica_fetch_response_max_bytes: Option<usize>,
    /// `replica.high.watermark.checkpoint.interval.ms`: how often the high watermarks of all
    /// partitions are written to `<data-dir>/replication-offset-checkpoint` (0 = only at clean
    /// shutdown) [default: 5000].
    #[arg(
        long,
        env = "STREAMFORGE_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS"
    )]
    pub replica_high_watermark_checkpoint_interval_ms: Option<u64>,
    /// `replica.lag.time.max.ms`: a leader drops from the ISR a follower that has not caught
    /// up with its log end for this long [default: 30000].
    #[arg(long, env = "STREAMFORGE_REPLICA_LAG_TIME_MAX_MS")]
    pub replica_lag_time_max_ms: Option<i64>,
    /// `broker.rack`: this broker's rack, registered with the controller and shown by
    /// Metadata / DescribeCluster; consumers with the same `client.rack` may read from it.
    #[arg(long, env = "STREAMFORGE_BROKER_RACK")]
    pub broker_rack: Option<String>,
    /// `replica.selector.class` (KIP-392): `rack-aware` sends a consumer to an in-sync replica
    /// in its `client.rack`; `leader` serves every consumer from the leader [default: leader].
    #[arg(long, env = "STREAMFORGE_REPLICA_SELECTOR")]
    pub replica_selector: Option<String>,
    /// Most partitions the broker hosts [default: derived from the open-files limit].
    #[arg(long, env = "STREAMFORGE_MAX_PARTITIONS")]
    pub max_partitions: Option<usize>,
    /// Dashboard and /metrics address (HOST:PORT, :PORT), or `off`. Without a login (see
    /// --http-auth) it lets anyone create and delete topics, so it listens on loopback only
    /// unless told otherwise [default: 127.0.0.1:8080].
    #[arg(long, env = "STREAMFORGE_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// The dashboard's login: --http-auth, --http-session-timeout-ms, --http-metrics-auth.
    #[command(flatten)]
    pub http_auth: crate::http_auth_args::HttpAuthArgs,
    /// Partitions of `__consumer_offsets` when it is created (`offsets.topic.num.partitions`) [default: 50].
    #[arg(long, env = "STREAMFORGE_OFFSETS_TOPIC_PARTITIONS")]
    pub offsets_topic_partitions: Option<i32>,
    /// `group.initial.rebalance.delay.ms` [default: 3000].
    #[arg(long, env = "STREAMFORGE_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    pub group_initial_rebalance_delay_ms: Option<i64>,
    /// `group.min.session.timeout.ms` [default: 6000].
    #[arg(long, env = "STREAMFORGE_GROUP_MIN_SESSION_TIMEOUT_MS")]
    pub group_min_session_timeout_ms: Option<i32>,
    /// `group.max.session.timeout.ms` [default: 1800000].
    #[arg(long, env = "STREAMFORGE_GROUP_MAX_SESSION_TIMEOUT_MS")]
    pub group_max_session_timeout_ms: Option<i32>,
    /// `offsets.retention.minutes` [default: 10080].
    #[arg(long, env = "STREAMFORGE_OFFSETS_RETENTION_MINUTES")]
    pub offsets_retention_minutes: Option<i64>,
    /// Tiered storage: --remote-storage URL or --s3-endpoint/--s3-bucket (+ AWS_* env).
    #[command(flatten)]
    pub tiered: streamforge_tiered::TieredArgs,
}

/// The TOML file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    listeners: Option<String>,
    advertised_listeners: Option<String>,
    ssl_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    ssl_ca: Option<PathBuf>,
    ssl_client_auth: Option<String>,
    ssl_principal_mapping_rules: Option<String>,
    ssl_reload_interval_ms: Option<u64>,
    sasl_mechanisms: Option<String>,
    connections_max_reauth_ms: Option<u64>,
    inter_broker_listener_name: Option<String>,
    security_inter_broker_protocol: Option<String>,
    sasl_mechanism_inter_broker_protocol: Option<String>,
    inter_broker_sasl_username: Option<String>,
    inter_broker_sasl_password: Option<String>,
    quota_window_num: Option<usize>,
    quota_window_size_seconds: Option<u64>,
    replication_quota_window_num: Option<usize>,
    replication_quota_window_size_seconds: Option<u64>,
    authorizer: Option<String>,
    super_users: Option<String>,
    allow_everyone_if_no_acl_found: Option<bool>,
    ssl_handshake_timeout_ms: Option<u64>,
    sasl_handshake_timeout_ms: Option<u64>,
    sasl_oauthbearer_jwks_file: Option<PathBuf>,
    sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    sasl_oauthbearer_jwks_refresh_ms: Option<u64>,
    sasl_oauthbearer_clock_skew_seconds: Option<u64>,
    sasl_oauthbearer_expected_issuer: Option<String>,
    sasl_oauthbearer_expected_audience: Option<String>,
    sasl_oauthbearer_sub_claim_name: Option<String>,
    advertised_listener: Option<String>,
    data_dir: Option<PathBuf>,
    node_id: Option<i32>,
    controller_quorum_voters: Option<String>,
    controller_listen: Option<String>,
    controller_listener_security_protocol: Option<String>,
    process_roles: Option<String>,
    cluster_id: Option<String>,
    num_partitions: Option<i32>,
    default_replication_factor: Option<i16>,
    min_insync_replicas: Option<usize>,
    broker_session_timeout_ms: Option<u64>,
    broker_heartbeat_interval_ms: Option<u64>,
    auto_leader_rebalance_enable: Option<bool>,
    leader_imbalance_check_interval_seconds: Option<u64>,
    leader_imbalance_per_broker_percentage: Option<u32>,
    unclean_leader_election_enable: Option<bool>,
    auto_create_topics: Option<bool>,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
    segment_bytes: Option<u64>,
    log_retention_check_interval_ms: Option<i64>,
    flush_messages: Option<i64>,
    flush_ms: Option<i64>,
    log_flush_background_ms: Option<u64>,
    log_scrub_interval_ms: Option<u64>,
    log_cleaner_enable: Option<bool>,
    log_cleaner_backoff_ms: Option<u64>,
    log_cleaner_dedupe_buffer_size: Option<usize>,
    log_cleaner_io_max_bytes_per_second: Option<f64>,
    log_cleaner_threads: Option<usize>,
    max_message_bytes: Option<u64>,
    socket_request_max_bytes: Option<usize>,
    queued_max_request_bytes: Option<usize>,
    max_connections: Option<usize>,
    transaction_version: Option<i16>,
    transactional_id_expiration_ms: Option<i64>,
    transaction_remove_expired_transaction_cleanup_interval_ms: Option<i64>,
    connections_max_idle_ms: Option<u64>,
    request_read_timeout_ms: Option<u64>,
    fetch_max_bytes: Option<usize>,
    replica_fetch_max_bytes: Option<usize>,
    replica_fetch_response_max_bytes: Option<usize>,
    replica_high_watermark_checkpoint_interval_ms: Option<u64>,
    replica_lag_time_max_ms: Option<i64>,
    broker_rack: Option<String>,
    replica_selector: Option<String>,
    max_partitions: Option<usize>,
    http_listen: Option<String>,
    http_auth: Option<String>,
    http_session_timeout_ms: Option<u64>,
    http_metrics_auth: Option<String>,
    offsets_topic_partitions: Option<i32>,
    group_initial_rebalance_delay_ms: Option<i64>,
    group_min_session_timeout_ms: Option<i32>,
    group_max_session_timeout_ms: Option<i32>,
    offsets_retention_minutes: Option<i64>,
    /// `[tiered]` table: a `streamforge_tiered::TieredConfig` (store, cache, upload settings).
    tiered: Option<streamforge_tiered::TieredConfig>,
}

/// Resolve flags/env over the file over defaults.
pub fn broker_config(args: Args) -> anyhow::Result<BrokerConfig> {
    let file: FileConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            let table: toml::Table = toml::from_str(&text)
                .with_context(|| format!("parsing config file {}", path.display()))?;
            toml::Value::Table(crate::kafka_names::normalize(table)?)
                .try_into()
                .with_context(|| format!("parsing config file {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let mut c = BrokerConfig::default();
    security_settings(&mut c.security, &args, &file)?;
    macro_rules! set {
        ($field:ident) => {
            if let Some(v) = args.$field.or(file.$field) {
                c.$field = v;
            }
        };
        ($field:ident => $target:expr) => {
            if let Some(v) = args.$field.or(file.$field) {
                $target = v;
            }
        };
    }
    if let Some(l) = args.listen.or(file.listen) {
        c.listen = parse_listen(&l).with_context(|| format!("--listen {l}"))?;
    }
    c.advertised_listener = args.advertised_listener.or(file.advertised_listener);
    if let [only] = c.security.listeners.as_slice()
        && only.protocol == streamforge_broker::security::SecurityProtocol::Plaintext
    {
        // One PLAINTEXT listener is what --listen has always meant.
        c.listen = only.addr;
        c.security.listeners.clear();
    }
    let quota_num = args.quota_window_num.or(file.quota_window_num);
    let quota_secs = args
        .quota_window_size_seconds
        .or(file.quota_window_size_seconds);
    c.quota_window = streamforge_broker::quota::rate::RateConfig::new(
        quota_num.unwrap_or(streamforge_broker::quota::rate::QUOTA_WINDOW_NUM_DEFAULT),
        quota_secs.unwrap_or(streamforge_broker::quota::rate::QUOTA_WINDOW_SIZE_SECONDS_DEFAULT),
    )
    .map_err(anyhow::Error::msg)?;
    let replication_num = args
        .replication_quota_window_num
        .or(file.replication_quota_window_num);
    let replication_secs = args
        .replication_quota_window_size_seconds
        .or(file.replication_quota_window_size_seconds);
    c.replication_quota_window = streamforge_broker::quota::rate::RateConfig::new(
        replication_num
            .unwrap_or(streamforge_broker::quota::replication::REPLICATION_QUOTA_WINDOW_NUM),
        replication_secs.unwrap_or(
            streamforge_broker::quota::replication::REPLICATION_QUOTA_WINDOW_SIZE_SECONDS,
        ),
    )
    .map_err(|e| anyhow::anyhow!("replication.{e}"))?;
    set!(data_dir);
    set!(node_id);
    c.cluster = crate::cluster_args::resolve(
        args.controller_quorum_voters
            .as_deref()
            .or(file.controller_quorum_voters.as_deref()),
        args.controller_listen
            .as_deref()
            .or(file.controller_listen.as_deref()),
        args.process_roles
            .as_deref()
            .or(file.process_roles.as_deref()),
        c.node_id,
    )?;
    controller_security(
        &mut c,
        args.controller_listener_security_protocol
            .as_deref()
            .or(file.controller_listener_security_protocol.as_deref()),
    )?;
    c.cluster_id = args.cluster_id.clone().or(file.cluster_id.clone());
    set!(num_partitions);
    set!(default_replication_factor);
    set!(min_insync_replicas => c.log_defaults.min_insync_replicas);
    set!(broker_session_timeout_ms);
    set!(broker_heartbeat_interval_ms);
    set!(auto_leader_rebalance_enable);
    set!(leader_imbalance_check_interval_seconds);
    set!(leader_imbalance_per_broker_percentage);
    set!(unclean_leader_election_enable => c.log_defaults.unclean_leader_election_enable);
    set!(auto_create_topics);
    set!(retention_ms => c.log_defaults.retention_ms);
    set!(retention_bytes => c.log_defaults.retention_bytes);
    set!(segment_bytes => c.log_defaults.segment_bytes);
    set!(log_retention_check_interval_ms => c.log_defaults.retention_check_interval_ms);
    set!(flush_messages => c.log_defaults.flush_messages);
    set!(flush_ms => c.log_defaults.flush_ms);
    set!(log_flush_background_ms);
    set!(log_scrub_interval_ms);
    set!(log_cleaner_enable);
    set!(log_cleaner_backoff_ms => c.log_cleaner.backoff_ms);
    set!(log_cleaner_dedupe_buffer_size => c.log_cleaner.dedupe_buffer_bytes);
    set!(log_cleaner_io_max_bytes_per_second => c.log_cleaner.io_max_bytes_per_second);
    set!(log_cleaner_threads => c.log_cleaner.threads);
    set!(max_message_bytes => c.log_defaults.max_message_bytes);
    set!(socket_request_max_bytes);
    set!(queued_max_request_bytes);
    set!(max_connections);
    set!(transaction_version => c.txn.transaction_version);
    set!(transactional_id_expiration_ms => c.txn.transactional_id_expiration_ms);
    set!(transaction_remove_expired_transaction_cleanup_interval_ms => c.txn.remove_expired_interval_ms);
    anyhow::ensure!(
        c.txn.transactional_id_expiration_ms > 0 && c.txn.remove_expired_interval_ms > 0,
        "transactional-id-expiration-ms and transaction-remove-expired-transaction-cleanup-interval-ms must be positive"
    );
    set!(connections_max_idle_ms);
    set!(request_read_timeout_ms);
    set!(fetch_max_bytes);
    set!(replica_fetch_max_bytes);
    set!(replica_fetch_response_max_bytes);
    set!(replica_high_watermark_checkpoint_interval_ms);
    set!(replica_lag_time_max_ms);
    anyhow::ensure!(
        c.replica_lag_time_max_ms > 0,
        "replica-lag-time-max-ms must be positive"
    );
    c.broker_rack = args.broker_rack.or(file.broker_rack);
    if let Some(v) = args.replica_selector.or(file.replica_selector) {
        c.replica_selector = v
            .parse()
            .map_err(anyhow::Error::msg)
            .context("--replica-selector")?;
    }
    c.max_partitions = args
        .max_partitions
        .or(file.max_partitions)
        .or(c.max_partitions);
    set!(offsets_topic_partitions => c.groups.coordinator.offsets_topic_partitions);
    set!(group_initial_rebalance_delay_ms => c.groups.coordinator.group_initial_rebalance_delay_ms);
    set!(group_min_session_timeout_ms => c.groups.coordinator.group_min_session_timeout_ms);
    set!(group_max_session_timeout_ms => c.groups.coordinator.group_max_session_timeout_ms);
    if let Some(minutes) = args
        .offsets_retention_minutes
        .or(file.offsets_retention_minutes)
    {
        anyhow::ensure!(minutes > 0, "offsets-retention-minutes must be positive");
        c.groups.coordinator.offsets_retention_ms = minutes.saturating_mul(60_000);
    }
    anyhow::ensure!(
        c.groups.coordinator.offsets_topic_partitions > 0,
        "offsets-topic-partitions must be at least 1"
    );
    if let Some(h) = args.http_listen.or(file.http_listen) {
        c.http_listen = if h.eq_ignore_ascii_case("off") {
            None
        } else {
            Some(parse_listen(&h).with_context(|| format!("--http-listen {h} (or off)"))?)
        };
    }
    let http_auth_file = crate::http_auth_args::FileValues {
        http_auth: file.http_auth,
        http_session_timeout_ms: file.http_session_timeout_ms,
        http_metrics_auth: file.http_metrics_auth,
    };
    crate::http_auth_args::resolve(&args.http_auth, http_auth_file, &mut c.http_auth)?;
    let a = &args.tiered;
    let tiered_flags = a.remote_storage.is_some()
        || a.s3_bucket.is_some()
        || a.s3_endpoint.is_some()
        || a.remote_prefix.is_some()
        || a.remote_cache_bytes.is_some()
        || a.remote_chunk_bytes.is_some()
        || a.remote_upload_concurrency.is_some()
        || a.remote_task_interval_ms.is_some();
    c.tiered = match file.tiered {
        Some(t) if !tiered_flags => Some(streamforge_tiered::TieredConfig {
            fail_point: streamforge_tiered::FailPoint::from_env(),
            ..t
        }),
        _ => Some(
            a.to_config(&c.data_dir)
                .context("tiered storage settings")?,
        ),
    };
    anyhow::ensure!(c.num_partitions > 0, "num-partitions must be at least 1");
    anyhow::ensure!(
        c.default_replication_factor > 0,
        "default-replication-factor must be at least 1"
    );
    anyhow::ensure!(
        c.log_defaults.min_insync_replicas > 0,
        "min-insync-replicas must be at least 1"
    );
    anyhow::ensure!(
        c.broker_heartbeat_interval_ms > 0
            && c.broker_heartbeat_interval_ms < c.broker_session_timeout_ms,
        "broker-heartbeat-interval-ms must be above 0 and below broker-session-timeout-ms"
    );
    anyhow::ensure!(
        c.leader_imbalance_check_interval_seconds > 0,
        "leader-imbalance-check-interval-seconds must be at least 1"
    );
    anyhow::ensure!(
        c.leader_imbalance_per_broker_percentage <= 100,
        "leader-imbalance-per-broker-percentage must be between 0 and 100"
    );
    anyhow::ensure!(
        c.log_defaults.segment_bytes >= 14,
        "segment-bytes must be at least 14"
    );
    Ok(c)
}

/// The listener, TLS and SASL settings (flags over the file).
fn security_settings(
    sec: &mut streamforge_broker::security::SecurityConfig,
    args: &Args,
    file: &FileConfig,
) -> anyhow::Result<()> {
    use streamforge_broker::security::listeners::{parse_advertised, parse_listeners};
    let pick = |a: &Option<String>, f: &Option<String>| a.clone().or_else(|| f.clone());
    if let Some(l) = pick(&args.listeners, &file.listeners) {
        sec.listeners = parse_listeners(&l)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--listeners {l}"))?;
    }
    if let Some(a) = pick(&args.advertised_listeners, &file.advertised_listeners) {
        sec.advertised_listeners = parse_advertised(&a)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--advertised-listeners {a}"))?;
    }
    sec.ssl_cert = args.ssl_cert.clone().or_else(|| file.ssl_cert.clone());
    sec.ssl_key = args.ssl_key.clone().or_else(|| file.ssl_key.clone());
    sec.ssl_ca = args.ssl_ca.clone().or_else(|| file.ssl_ca.clone());
    if let Some(v) = pick(&args.ssl_client_auth, &file.ssl_client_auth) {
        sec.ssl_client_auth = v.parse().map_err(anyhow::Error::msg)?;
    }
    if let Some(v) = pick(
        &args.ssl_principal_mapping_rules,
        &file.ssl_principal_mapping_rules,
    ) {
        sec.ssl_principal_mapping_rules = v;
    }
    if let Some(v) = args.ssl_reload_interval_ms.or(file.ssl_reload_interval_ms) {
        sec.ssl_reload_interval_ms = v;
    }
    if let Some(v) = pick(&args.sasl_mechanisms, &file.sasl_mechanisms) {
        sec.sasl_mechanisms = v
            .split(',')
            .filter(|m| !m.trim().is_empty())
            .map(|m| m.parse().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("--sasl-mechanisms {v}"))?;
        anyhow::ensure!(
            !sec.sasl_mechanisms.is_empty(),
            "--sasl-mechanisms is empty"
        );
    }
    if let Some(v) = args
        .ssl_handshake_timeout_ms
        .or(file.ssl_handshake_timeout_ms)
    {
        sec.ssl_handshake_timeout_ms = v;
    }
    if let Some(v) = args
        .sasl_handshake_timeout_ms
        .or(file.sasl_handshake_timeout_ms)
    {
        sec.sasl_handshake_timeout_ms = v;
    }
    if let Some(v) = args
        .connections_max_reauth_ms
        .or(file.connections_max_reauth_ms)
    {
        sec.connections_max_reauth_ms = v;
    }
    let file_oauth = crate::oauth_args::OAuthArgs {
        sasl_oauthbearer_jwks_file: file.sasl_oauthbearer_jwks_file.clone(),
        sasl_oauthbearer_jwks_endpoint_url: file.sasl_oauthbearer_jwks_endpoint_url.clone(),
        sasl_oauthbearer_jwks_refresh_ms: file.sasl_oauthbearer_jwks_refresh_ms,
        sasl_oauthbearer_clock_skew_seconds: file.sasl_oauthbearer_clock_skew_seconds,
        sasl_oauthbearer_expected_issuer: file.sasl_oauthbearer_expected_issuer.clone(),
        sasl_oauthbearer_expected_audience: file.sasl_oauthbearer_expected_audience.clone(),
        sasl_oauthbearer_sub_claim_name: file.sasl_oauthbearer_sub_claim_name.clone(),
    };
    crate::oauth_args::apply(&mut sec.oauthbearer, &args.oauthbearer, &file_oauth)?;
    inter_broker_settings(sec, args, file)?;
    acl_settings(sec, args, file)
}

/// `inter.broker.listener.name`, `security.inter.broker.protocol`,
/// `sasl.mechanism.inter.broker.protocol` and the broker's own SASL login.
fn inter_broker_settings(
    sec: &mut streamforge_broker::security::SecurityConfig,
    args: &Args,
    file: &FileConfig,
) -> anyhow::Result<()> {
    let pick = |a: &Option<String>, f: &Option<String>| a.clone().or_else(|| f.clone());
    let protocol = |flag: &str, v: Option<String>| -> anyhow::Result<_> {
        v.map(|v| {
            v.parse()
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("--{flag} {v}"))
        })
        .transpose()
    };
    sec.inter_broker_listener = protocol(
        "inter-broker-listener-name",
        pick(
            &args.inter_broker_listener_name,
            &file.inter_broker_listener_name,
        ),
    )?;
    sec.security_inter_broker_protocol = protocol(
        "security-inter-broker-protocol",
        pick(
            &args.security_inter_broker_protocol,
            &file.security_inter_broker_protocol,
        ),
    )?;
    if let Some(v) = pick(
        &args.sasl_mechanism_inter_broker_protocol,
        &file.sasl_mechanism_inter_broker_protocol,
    ) {
        sec.sasl_mechanism_inter_broker = Some(
            v.parse()
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("--sasl-mechanism-inter-broker-protocol {v}"))?,
        );
    }
    sec.inter_broker_sasl_username = pick(
        &args.inter_broker_sasl_username,
        &file.inter_broker_sasl_username,
    );
    sec.inter_broker_sasl_password = pick(
        &args.inter_broker_sasl_password,
        &file.inter_broker_sasl_password,
    )
    .map(streamforge_broker::security::Secret);
    Ok(())
}

/// `--controller-listener-security-protocol`: what the controller listener speaks (a cluster
/// setting: refused without `--controller-quorum-voters`).
fn controller_security(c: &mut BrokerConfig, text: Option<&str>) -> anyhow::Result<()> {
    let Some(text) = text else {
        return Ok(());
    };
    let flag = "--controller-listener-security-protocol";
    let protocol: streamforge_broker::security::SecurityProtocol = text
        .parse()
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{flag} {text}"))?;
    let Some(cluster) = &mut c.cluster else {
        anyhow::ensure!(
            protocol == streamforge_broker::security::SecurityProtocol::Plaintext,
            "{flag} {text} needs --controller-quorum-voters (a node alone has no controller listener)"
        );
        return Ok(());
    };
    cluster.security = streamforge_broker::security::controller::ControllerSecurity::from_config(
        protocol,
        &c.security,
    )?;
    Ok(())
}

/// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
fn acl_settings(
    sec: &mut streamforge_broker::security::SecurityConfig,
    args: &Args,
    file: &FileConfig,
) -> anyhow::Result<()> {
    use streamforge_broker::security::acl;
    if let Some(v) = args.authorizer.clone().or_else(|| file.authorizer.clone()) {
        sec.authorizer = v.parse().map_err(anyhow::Error::msg)?;
    }
    if let Some(v) = args
        .super_users
        .clone()
        .or_else(|| file.super_users.clone())
    {
        sec.acl.super_users = acl::parse_super_users(&v)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--super-users {v}"))?;
    }
    if let Some(v) = args
        .allow_everyone_if_no_acl_found
        .or(file.allow_everyone_if_no_acl_found)
    {
        sec.acl.allow_everyone_if_no_acl_found = v;
    }
    Ok(())
}

/// A listener address as Kafka's `listeners` accepts it: `HOST:PORT`, `:PORT` (every
/// interface), `[::1]:PORT`, optionally prefixed `PLAINTEXT://`; HOST may be a name
/// (`localhost`), resolved now, preferring IPv4.
pub fn parse_listen(text: &str) -> anyhow::Result<SocketAddr> {
    let s = text.trim();
    let s = match s.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("PLAINTEXT") => rest,
        Some((scheme, _)) => {
            anyhow::bail!("security protocol {scheme} is not supported (only PLAINTEXT)")
        }
        None => s,
    };
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("want HOST:PORT, :PORT or PLAINTEXT://HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow::anyhow!("port '{port}' is not a number from 0 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .with_context(|| format!("cannot resolve host '{host}'"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| anyhow::anyhow!("host '{host}' has no address"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.print_config {
        print!(
            "{}",
            crate::kafka_names::print_config(&broker_config(args)?)?
        );
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=error")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let mut config = broker_config(args)?;
    config.http.bench_runner = Some(crate::dashboard_bench::runner());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("streamforge")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let handle = Broker::start(config).await.context("starting the broker")?;
        tokio::select! {
            signal = wait_for_signal() => signal?,
            reason = handle.failed() => {
                // Kafka halts a broker whose metadata log dir failed: no clean shutdown (the
                // partition logs recover as after a crash), exit status 1. Restart it once
                // the disk has space again.
                tracing::error!(%reason, "halting: the metadata log cannot be written; restart the broker once the disk is fixed");
                std::process::exit(1);
            }
        }
        handle.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sf.toml");
        std::fs::write(
            &path,
            "node_id = 7\nnum_partitions = 3\nhttp_listen = \"off\"\n",
        )
        .unwrap();
        let args = Args {
            config: Some(path),
            num_partitions: Some(5),
            ..Default::default()
        };
        let c = broker_config(args).unwrap();
        assert_eq!(c.node_id, 7);
        assert_eq!(c.num_partitions, 5);
        assert_eq!(c.http_listen, None);
        assert_eq!(c.listen, BrokerConfig::default().listen);
    }

    #[test]
    fn the_replica_lag_time_comes_from_flag_file_or_default_and_is_positive() {
        let c = broker_config(Args::default()).unwrap();
        assert_eq!(c.replica_lag_time_max_ms, 30_000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sf.toml");
        std::fs::write(&path, "replica.lag.time.max.ms = 4000\n").unwrap();
        let file = Args {
            config: Some(path.clone()),
            ..Default::default()
        };
        assert_eq!(broker_config(file).unwrap().replica_lag_time_max_ms, 4_000);
        let flag = Args {
            config: Some(path),
            replica_lag_time_max_ms: Some(3_000),
            ..Default::default()
        };
        assert_eq!(broker_config(flag).unwrap().replica_lag_time_max_ms, 3_000);
        let zero = Args {
            replica_lag_time_max_ms: Some(0),
            ..Default::default()
        };
        assert!(broker_config(zero).is_err());
    }

    #[test]
    fn the_high_watermark_checkpoint_interval_comes_from_flag_file_or_default() {
        let c = broker_config(Args::default()).unwrap();
        assert_eq!(c.replica_high_watermark_checkpoint_interval_ms, 5_000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sf.toml");
        std::fs::write(
            &path,
            "replica.high.watermark.checkpoint.interval.ms = 250\n",
        )
        .unwrap();
        let file = Args {
            config: Some(path.clone()),
            ..Default::default()
        };
        let c = broker_config(file).unwrap();
        assert_eq!(c.replica_high_watermark_checkpoint_interval_ms, 250);
        let flag = Args {
            config: Some(path),
            replica_high_watermark_checkpoint_interval_ms: Some(0),
            ..Default::default()
        };
        let c = broker_config(flag).unwrap();
        assert_eq!(c.replica_high_watermark_checkpoint_interval_ms, 0);
    }

    #[test]
    fn the_rack_and_replica_selector_come_from_flag_file_or_default() {
        use streamforge_broker::partition::replica_selector::ReplicaSelectorKind;
        let c = broker_config(Args::default()).unwrap();
        assert_eq!(c.broker_rack, None);
        assert_eq!(c.replica_selector, ReplicaSelectorKind::Leader);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sf.toml");
        let class = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
        std::fs::write(
            &path,
            format!("broker.rack = \"eu-1a\"\nreplica.selector.class = \"{class}\"\n"),
        )
        .unwrap();
        let file = Args {
            config: Some(path.clone()),
            ..Default::default()
        };
        let c = broker_config(file).unwrap();
        assert_eq!(c.broker_rack.as_deref(), Some("eu-1a"));
        assert_eq!(c.replica_selector, ReplicaSelectorKind::RackAware);
        let flag = Args {
            config: Some(path),
            broker_rack: Some("eu-1b".into()),
            replica_selector: Some("leader".into()),
            ..Default::default()
        };
        let c = broker_config(flag).unwrap();
        assert_eq!(c.broker_rack.as_deref(), Some("eu-1b"));
        assert_eq!(c.replica_selector, ReplicaSelectorKind::Leader);
        let bad = Args {
            replica_selector: Some("closest".into()),
            ..Default::default()
        };
        assert!(broker_config(bad).is_err());
    }

    #[test]
    fn the_controller_listener_protocol_comes_from_flag_or_file_and_is_checked() {
        use streamforge_broker::security::SecurityProtocol;
        use streamforge_broker::security::controller::ControllerSecurity;
        let voters = Some("1@127.0.0.1:9093,2@127.0.0.1:9193".to_string());
        let cluster = |args: Args| broker_config(args).map(|c| c.cluster.unwrap().security);
        let plain = Args {
            controller_quorum_voters: voters.clone(),
            ..Default::default()
        };
        assert_eq!(cluster(plain).unwrap(), ControllerSecurity::Plaintext);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sf.toml");
        std::fs::write(
            &path,
            "controller_listener_security_protocol = \"SSL\"\nssl_cert = \"/c.pem\"\n\
             ssl_key = \"/k.pem\"\nssl_ca = \"/ca.pem\"\n",
        )
        .unwrap();
        let file = Args {
            config: Some(path.clone()),
            controller_quorum_voters: voters.clone(),
            ..Default::default()
        };
        let ssl = cluster(file).unwrap();
        assert_eq!(ssl.protocol(), SecurityProtocol::Ssl);
        let flag = Args {
            config: Some(path),
            controller_quorum_voters: voters.clone(),
            controller_listener_security_protocol: Some("plaintext".into()),
            ..Default::default()
        };
        assert_eq!(cluster(flag).unwrap(), ControllerSecurity::Plaintext);
        let why = |args: Args| format!("{:#}", broker_config(args).unwrap_err());
        let no_files = Args {
            controller_quorum_voters: voters.clone(),
            controller_listener_security_protocol: Some("SSL".into()),
            ..Default::default()
        };
        assert!(why(no_files).contains("--ssl-ca"));
        let sasl = Args {
            controller_quorum_voters: voters,
            controller_listener_security_protocol: Some("SASL_SSL".into()),
            ..Default::default()
        };
        assert!(why(sasl).contains("not served"));
        let alone = Args {
            controller_listener_security_protocol: Some("SSL".into()),
            ..Default::default()
        };
        assert!(why(alone).contains("--controller-quorum-voters"));
    }

    #[test]
    fn the_dashboard_listens_on_loopback_by_default() {
        let c = broker_config(Args::default()).unwrap();
        assert!(c.http_listen.expect("on by default").ip().is_loopback());
    }

    #[test]
    fn listen_accepts_kafka_listener_forms() {
        let want = |s: &str| parse_listen(s).unwrap().to_string();
        assert_eq!(want("localhost:9092"), "127.0.0.1:9092");
        assert_eq!(want(":9092"), "0.0.0.0:9092");
        assert_eq!(want("PLAINTEXT://127.0.0.1:9093"), "127.0.0.1:9093");
        assert_eq!(want("plaintext://localhost:9094"), "127.0.0.1:9094");
        assert_eq!(want("[::1]:9092"), "[::1]:9092");
        assert_eq!(want("0.0.0.0:0"), "0.0.0.0:0");
        let err = |s: &str| parse_listen(s).unwrap_err().to_string();
        assert!(err("9092").contains("HOST:PORT"), "{}", err("9092"));
        assert!(err("SSL://h:1").contains("SSL"));
        assert!(err("h:99999").contains("99999"));
    }
}

//! Kafka's broker property names in the `--config` TOML file, and `broker --print-config`.
//!
//! An operator coming from Kafka writes `log.dirs = "/var/lib/sf"` or `listeners =
//! "PLAINTEXT://:9092"`. In TOML an unquoted dotted key is a nested table (`log` → `dirs`), a
//! quoted one a flat key; both are accepted: every table except our own sections is flattened
//! into dotted names, which are then mapped to our snake_case names.

use anyhow::Context;
use streamforge_broker::BrokerConfig;

/// Kafka name → our key. Only settings with the same meaning are mapped.
const KAFKA_NAMES: &[(&str, &str)] = &[
    ("listeners", "listeners"),
    ("advertised.listeners", "advertised_listeners"),
    ("ssl.client.auth", "ssl_client_auth"),
    ("ssl.principal.mapping.rules", "ssl_principal_mapping_rules"),
    ("sasl.enabled.mechanisms", "sasl_mechanisms"),
    ("connections.max.reauth.ms", "connections_max_reauth_ms"),
    ("inter.broker.listener.name", "inter_broker_listener_name"),
    (
        "security.inter.broker.protocol",
        "security_inter_broker_protocol",
    ),
    (
        "sasl.mechanism.inter.broker.protocol",
        "sasl_mechanism_inter_broker_protocol",
    ),
    (
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl_oauthbearer_jwks_endpoint_url",
    ),
    (
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl_oauthbearer_jwks_refresh_ms",
    ),
    (
        "sasl.oauthbearer.clock.skew.seconds",
        "sasl_oauthbearer_clock_skew_seconds",
    ),
    (
        "sasl.oauthbearer.expected.issuer",
        "sasl_oauthbearer_expected_issuer",
    ),
    (
        "sasl.oauthbearer.expected.audience",
        "sasl_oauthbearer_expected_audience",
    ),
    (
        "sasl.oauthbearer.sub.claim.name",
        "sasl_oauthbearer_sub_claim_name",
    ),
    ("quota.window.num", "quota_window_num"),
    ("quota.window.size.seconds", "quota_window_size_seconds"),
    (
        "replication.quota.window.num",
        "replication_quota_window_num",
    ),
    (
        "replication.quota.window.size.seconds",
        "replication_quota_window_size_seconds",
    ),
    ("authorizer.class.name", "authorizer"),
    ("super.users", "super_users"),
    (
        "allow.everyone.if.no.acl.found",
        "allow_everyone_if_no_acl_found",
    ),
    ("log.dirs", "data_dir"),
    ("log.dir", "data_dir"),
    ("node.id", "node_id"),
    ("broker.id", "node_id"),
    ("controller.quorum.voters", "controller_quorum_voters"),
    ("process.roles", "process_roles"),
    ("num.partitions", "num_partitions"),
    ("default.replication.factor", "default_replication_factor"),
    ("broker.session.timeout.ms", "broker_session_timeout_ms"),
    (
        "broker.heartbeat.interval.ms",
        "broker_heartbeat_interval_ms",
    ),
    (
        "auto.leader.rebalance.enable",
        "auto_leader_rebalance_enable",
    ),
    (
        "leader.imbalance.check.interval.seconds",
        "leader_imbalance_check_interval_seconds",
    ),
    (
        "leader.imbalance.per.broker.percentage",
        "leader_imbalance_per_broker_percentage",
    ),
    (
        "unclean.leader.election.enable",
        "unclean_leader_election_enable",
    ),
    ("auto.create.topics.enable", "auto_create_topics"),
    ("log.retention.ms", "retention_ms"),
    ("log.retention.bytes", "retention_bytes"),
    ("log.segment.bytes", "segment_bytes"),
    ("log.flush.interval.messages", "flush_messages"),
    ("log.flush.interval.ms", "flush_ms"),
    ("message.max.bytes", "max_message_bytes"),
    ("socket.request.max.bytes", "socket_request_max_bytes"),
    ("queued.max.request.bytes", "queued_max_request_bytes"),
    ("max.connections", "max_connections"),
    ("connections.max.idle.ms", "connections_max_idle_ms"),
    ("offsets.topic.num.partitions", "offsets_topic_partitions"),
    (
        "group.initial.rebalance.delay.ms",
        "group_initial_rebalance_delay_ms",
    ),
    (
        "group.min.session.timeout.ms",
        "group_min_session_timeout_ms",
    ),
    (
        "group.max.session.timeout.ms",
        "group_max_session_timeout_ms",
    ),
    ("offsets.retention.minutes", "offsets_retention_minutes"),
    (
        "replica.high.watermark.checkpoint.interval.ms",
        "replica_high_watermark_checkpoint_interval_ms",
    ),
    ("replica.lag.time.max.ms", "replica_lag_time_max_ms"),
    ("broker.rack", "broker_rack"),
    ("replica.selector.class", "replica_selector"),
];

/// Our sections, kept as tables.
const SECTIONS: &[&str] = &["tiered"];

/// Rewrites Kafka property names (dotted or quoted) into our keys.
pub fn normalize(table: toml::Table) -> anyhow::Result<toml::Table> {
    let mut flat = Vec::new();
    for (key, value) in table {
        match value {
            toml::Value::Table(t) if !SECTIONS.contains(&key.as_str()) => {
                flatten(&key, t, &mut flat)
            }
            v => flat.push((key, v)),
        }
    }
    let mut out = toml::Table::new();
    for (key, value) in flat {
        let ours = KAFKA_NAMES
            .iter()
            .find(|(kafka, _)| *kafka == key)
            .map(|(_, ours)| *ours);
        let (name, value) = match ours {
            Some(name) => (name.to_string(), kafka_value(&key, value)?),
            None => (key, value),
        };
        if out.insert(name.clone(), value).is_some() {
            anyhow::bail!("{name} is set twice (under its own and its Kafka name)");
        }
    }
    Ok(out)
}

fn flatten(prefix: &str, table: toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let name = format!("{prefix}.{key}");
        match value {
            toml::Value::Table(t) => flatten(&name, t, out),
            v => out.push((name, v)),
        }
    }
}

/// Kafka spells some values differently: lists of listeners/dirs (one is supported here).
fn kafka_value(key: &str, value: toml::Value) -> anyhow::Result<toml::Value> {
    match (key, value) {
        ("log.dirs", toml::Value::String(s)) => {
            let items: Vec<&str> = s
                .split(',')
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .collect();
            match items.as_slice() {
                [one] => Ok(toml::Value::String(one.to_string())),
                _ => anyhow::bail!("{key} = \"{s}\": exactly one entry is supported"),
            }
        }
        (_, v) => Ok(v),
    }
}

/// The listener, TLS and SASL settings that differ from "one PLAINTEXT listener".
fn print_security(
    sec: &streamforge_broker::security::SecurityConfig,
    put: &mut impl FnMut(&str, toml::Value),
) {
    let string = |v: String| toml::Value::String(v);
    let join = |items: Vec<String>| items.join(",");
    if !sec.listeners.is_empty() {
        let l = sec
            .listeners
            .iter()
            .map(|l| format!("{}://{}", l.protocol.name(), l.addr));
        put("listeners", string(join(l.collect())));
    }
    if !sec.advertised_listeners.is_empty() {
        let a = sec.advertised_listeners.iter().map(|a| {
            let host = if a.host.contains(':') {
                format!("[{}]", a.host)
            } else {
                a.host.clone()
            };
            format!("{}://{host}:{}", a.protocol.name(), a.port)
        });
        put("advertised_listeners", string(join(a.collect())));
    }
    for (key, path) in [
        ("ssl_cert", &sec.ssl_cert),
        ("ssl_key", &sec.ssl_key),
        ("ssl_ca", &sec.ssl_ca),
    ] {
        if let Some(p) = path {
            put(key, string(p.display().to_string()));
        }
    }
    if !sec.listeners.is_empty() {
        put(
            "ssl_client_auth",
            string(format!("{:?}", sec.ssl_client_auth).to_lowercase()),
        );
        put(
            "ssl_principal_mapping_rules",
            string(sec.ssl_principal_mapping_rules.clone()),
        );
        put(
            "sasl_mechanisms",
            string(join(
                sec.sasl_mechanisms
                    .iter()
                    .map(|m| m.name().to_string())
                    .collect(),
            )),
        );
        put(
            "connections_max_reauth_ms",
            toml::Value::Integer(sec.connections_max_reauth_ms as i64),
        );
    }
    for (key, protocol) in [
        ("inter_broker_listener_name", sec.inter_broker_listener),
        (
            "security_inter_broker_protocol",
            sec.security_inter_broker_protocol,
        ),
    ] {
        if let Some(p) = protocol {
            put(key, string(p.name().to_string()));
        }
    }
    if let Some(m) = sec.sasl_mechanism_inter_broker {
        put(
            "sasl_mechanism_inter_broker_protocol",
            string(m.name().to_string()),
        );
    }
    // The password is a secret: not printed (set it again where the printed file is used).
    if let Some(u) = &sec.inter_broker_sasl_username {
        put("inter_broker_sasl_username", string(u.clone()));
    }
    if sec.serves_oauthbearer() {
        crate::oauth_args::print(&sec.oauthbearer, put);
    }
    if sec.authorizer == streamforge_broker::security::acl::AuthorizerKind::Acl {
        put("authorizer", string("acl".into()));
        put("super_users", string(sec.acl.super_users.join(";")));
        put(
            "allow_everyone_if_no_acl_found",
            toml::Value::Boolean(sec.acl.allow_everyone_if_no_acl_found),
        );
    }
}

/// The effective settings as a `--config` file (what `broker --print-config` prints).
pub fn print_config(c: &BrokerConfig) -> anyhow::Result<String> {
    let l = &c.log_defaults;
    let g = &c.groups.coordinator;
    let mut t = toml::Table::new();
    let mut put = |k: &str, v: toml::Value| {
        t.insert(k.to_string(), v);
    };
    let int = |v: i64| toml::Value::Integer(v);
    let uint = |v: u64| toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    put("listen", toml::Value::String(c.listen.to_string()));
    if let Some(a) = &c.advertised_listener {
        put("advertised_listener", toml::Value::String(a.clone()));
    }
    print_security(&c.security, &mut put);
    put(
        "data_dir",
        toml::Value::String(c.data_dir.display().to_string()),
    );
    put("node_id", int(c.node_id.into()));
    if let Some(cluster) = &c.cluster {
        let voters: Vec<String> = cluster
            .voters
            .iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect();
        put(
            "controller_quorum_voters",
            toml::Value::String(voters.join(",")),
        );
        put(
            "controller_listen",
            toml::Value::String(cluster.listen.clone()),
        );
        put(
            "process_roles",
            toml::Value::String(cluster.roles.as_kafka().to_string()),
        );
        put(
            "controller_listener_security_protocol",
            toml::Value::String(cluster.security.protocol().name().to_string()),
        );
    }
    if let Some(id) = &c.cluster_id {
        put("cluster_id", toml::Value::String(id.clone()));
    }
    put("quota_window_num", uint(c.quota_window.samples as u64));
    put(
        "quota_window_size_seconds",
        uint((c.quota_window.window_ms / 1000) as u64),
    );
    put(
        "replication_quota_window_num",
        uint(c.replication_quota_window.samples as u64),
    );
    put(
        "replication_quota_window_size_seconds",
        uint((c.replication_quota_window.window_ms / 1000) as u64),
    );
    put("num_partitions", int(c.num_partitions.into()));
    put(
        "default_replication_factor",
        int(c.default_replication_factor.into()),
    );
    put(
        "broker_session_timeout_ms",
        uint(c.broker_session_timeout_ms),
    );
    put(
        "broker_heartbeat_interval_ms",
        uint(c.broker_heartbeat_interval_ms),
    );
    put(
        "auto_leader_rebalance_enable",
        toml::Value::Boolean(c.auto_leader_rebalance_enable),
    );
    put(
        "leader_imbalance_check_interval_seconds",
        uint(c.leader_imbalance_check_interval_seconds),
    );
    put(
        "leader_imbalance_per_broker_percentage",
        uint(c.leader_imbalance_per_broker_percentage.into()),
    );
    put(
        "unclean_leader_election_enable",
        toml::Value::Boolean(l.unclean_leader_election_enable),
    );
    put(
        "auto_create_topics",
        toml::Value::Boolean(c.auto_create_topics),
    );
    put("retention_ms", int(l.retention_ms));
    put("retention_bytes", int(l.retention_bytes));
    put("segment_bytes", uint(l.segment_bytes));
    put("flush_messages", int(l.flush_messages));
    put("flush_ms", int(l.flush_ms));
    put("log_flush_background_ms", uint(c.log_flush_background_ms));
    put("max_message_bytes", uint(l.max_message_bytes));
    put(
        "socket_request_max_bytes",
        uint(c.socket_request_max_bytes as u64),
    );
    put(
        "queued_max_request_bytes",
        uint(c.queued_max_request_bytes as u64),
    );
    put("max_connections", uint(c.max_connections as u64));
    put("connections_max_idle_ms", uint(c.connections_max_idle_ms));
    put("request_read_timeout_ms", uint(c.request_read_timeout_ms));
    put(
        "http_listen",
        toml::Value::String(c.http_listen.map_or("off".to_string(), |a| a.to_string())),
    );
    crate::http_auth_args::print(&c.http_auth, &mut put);
    put(
        "offsets_topic_partitions",
        int(g.offsets_topic_partitions.into()),
    );
    put(
        "group_initial_rebalance_delay_ms",
        int(g.group_initial_rebalance_delay_ms),
    );
    put(
        "group_min_session_timeout_ms",
        int(g.group_min_session_timeout_ms.into()),
    );
    put(
        "group_max_session_timeout_ms",
        int(g.group_max_session_timeout_ms.into()),
    );
    put(
        "offsets_retention_minutes",
        int(g.offsets_retention_ms / 60_000),
    );
    let mut text = toml::to_string(&t).context("printing the configuration")?;
    if let Some(tiered) = &c.tiered {
        let mut section = toml::Table::new();
        section.insert(
            "tiered".to_string(),
            toml::Value::try_from(tiered).context("printing the tiered settings")?,
        );
        text.push('\n');
        text.push_str(&toml::to_string(&section).context("printing the tiered settings")?);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_quorum_voters_maps_to_ours() {
        let table: toml::Table =
            toml::from_str("\"controller.quorum.voters\" = \"1@127.0.0.1:9093\"\n").unwrap();
        let out = normalize(table).unwrap();
        assert_eq!(
            out["controller_quorum_voters"].as_str(),
            Some("1@127.0.0.1:9093")
        );
        let table: toml::Table = toml::from_str("process.roles = \"broker\"\n").unwrap();
        assert_eq!(
            normalize(table).unwrap()["process_roles"].as_str(),
            Some("broker")
        );
    }

    #[test]
    fn kafka_names_dotted_or_quoted_map_to_ours() {
        let table: toml::Table = toml::from_str(
            "log.dirs = \"/var/lib/sf\"\n\"num.partitions\" = 3\nlisteners = \"PLAINTEXT://:9092\"\nnode_id = 4\n[tiered]\nprefix = \"x\"\n",
        )
        .unwrap();
        let out = normalize(table).unwrap();
        assert_eq!(out["data_dir"].as_str(), Some("/var/lib/sf"));
        assert_eq!(out["num_partitions"].as_integer(), Some(3));
        assert_eq!(out["listeners"].as_str(), Some("PLAINTEXT://:9092"));
        assert_eq!(out["node_id"].as_integer(), Some(4));
        assert!(out["tiered"].is_table());
    }

    #[test]
    fn replication_quota_windows_map_to_ours() {
        let table: toml::Table = toml::from_str(
            "\"replication.quota.window.num\" = 3\nreplication.quota.window.size.seconds = 2\n",
        )
        .unwrap();
        let out = normalize(table).unwrap();
        assert_eq!(out["replication_quota_window_num"].as_integer(), Some(3));
        let size = &out["replication_quota_window_size_seconds"];
        assert_eq!(size.as_integer(), Some(2));
    }

    #[test]
    fn leader_balance_and_unclean_election_settings_map_to_ours() {
        let table: toml::Table = toml::from_str(
            "auto.leader.rebalance.enable = false\n\"leader.imbalance.check.interval.seconds\" = 2\nleader.imbalance.per.broker.percentage = 0\nunclean.leader.election.enable = true\n",
        )
        .unwrap();
        let out = normalize(table).unwrap();
        assert_eq!(out["auto_leader_rebalance_enable"].as_bool(), Some(false));
        let interval = &out["leader_imbalance_check_interval_seconds"];
        assert_eq!(interval.as_integer(), Some(2));
        let percentage = &out["leader_imbalance_per_broker_percentage"];
        assert_eq!(percentage.as_integer(), Some(0));
        assert_eq!(out["unclean_leader_election_enable"].as_bool(), Some(true));
    }

    #[test]
    fn both_names_or_two_dirs_are_refused() {
        let twice: toml::Table =
            toml::from_str("data_dir = \"a\"\n\"log.dirs\" = \"b\"\n").unwrap();
        assert!(normalize(twice).unwrap_err().to_string().contains("twice"));
        let two: toml::Table = toml::from_str("\"log.dirs\" = \"a,b\"\n").unwrap();
        assert!(
            normalize(two)
                .unwrap_err()
                .to_string()
                .contains("one entry")
        );
    }
}

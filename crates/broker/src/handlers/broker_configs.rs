//! The BROKER resource of DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: the start-up
//! settings (read-only) and the dynamic ones (`dynamic_config`), each with the source of its
//! value and, on request, every level it is set at (synonyms).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use streamforge_log::LogConfig;

use super::configs::{
    ConfigEntry, OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, SOURCE_DEFAULT, SOURCE_STATIC_BROKER,
};
use crate::BrokerState;
use crate::dynamic_config::{self, DynamicConfigError, Layers, Level};
use crate::topic_config::{self, ConfigType};

/// An error for one resource: (error code, message).
pub type ResourceError = (i16, String);

/// Which level a BROKER resource name addresses: `""` or this broker's id.
pub fn level(state: &BrokerState, name: &str) -> Result<Level, ResourceError> {
    if name.is_empty() {
        return Ok(Level::ClusterDefault);
    }
    match name.parse::<i32>() {
        Ok(id) if id == state.node_id() => Ok(Level::Broker),
        Ok(_) => Err((
            ResponseError::InvalidRequest.code(),
            format!(
                "Unexpected broker id, expected {} or empty string, but received {name}",
                state.node_id()
            ),
        )),
        Err(_) => Err((
            ResponseError::InvalidRequest.code(),
            format!("Invalid broker name {name}"),
        )),
    }
}

/// DescribeConfigs: for `""` the cluster-wide dynamic values only (as Kafka); for this broker
/// every config with its value in force.
pub fn describe(state: &BrokerState, name: &str) -> Result<Vec<ConfigEntry>, ResourceError> {
    let layers = state.dynamic.layers();
    Ok(match level(state, name)? {
        Level::ClusterDefault => layers
            .cluster_default
            .iter()
            .filter_map(|(k, v)| {
                let def = dynamic_config::find(k)?;
                let vd = dynamic_config::value_def(def);
                let source = dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER;
                Some(ConfigEntry {
                    name: k.clone(),
                    value: v.clone(),
                    source,
                    read_only: false,
                    kind: vd.kind as i8,
                    doc: vd.doc,
                    synonyms: vec![(k.clone(), v.clone(), source)],
                })
            })
            .collect(),
        Level::Broker => {
            let mut entries = static_entries(state);
            entries.extend(dynamic_config::DYNAMIC_CONFIGS.iter().map(|d| {
                let (static_value, default) = static_and_default(state, d);
                dynamic_entry(&layers, d, static_value, default)
            }));
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            entries
        }
    })
}

/// The value a dynamic config started with, and its built-in default.
fn static_and_default(state: &BrokerState, d: &dynamic_config::DynamicDef) -> (String, String) {
    match d.topic {
        Some(topic) => (
            topic_config::default_value(topic, &state.config.log_defaults),
            topic_config::default_value(topic, &LogConfig::default()),
        ),
        // The replication throttle rates have no start-up value: unlimited.
        None if d.name != dynamic_config::MAX_CONNECTIONS => {
            let unlimited = crate::quota::replication::RATE_UNLIMITED.to_string();
            (unlimited.clone(), unlimited)
        }
        None => (
            state.config.max_connections.to_string(),
            crate::BrokerConfig::default().max_connections.to_string(),
        ),
    }
}

/// One dynamic config: the highest level that sets it wins; synonyms list every level, highest
/// first, down to the built-in default.
pub fn dynamic_entry(
    layers: &Layers,
    d: &dynamic_config::DynamicDef,
    static_value: String,
    default: String,
) -> ConfigEntry {
    let name = d.name.to_string();
    let mut synonyms = Vec::new();
    if let Some(v) = layers.broker.get(d.name) {
        synonyms.push((
            name.clone(),
            v.clone(),
            dynamic_config::SOURCE_DYNAMIC_BROKER,
        ));
    }
    if let Some(v) = layers.cluster_default.get(d.name) {
        synonyms.push((
            name.clone(),
            v.clone(),
            dynamic_config::SOURCE_DYNAMIC_DEFAULT_BROKER,
        ));
    }
    if static_value != default {
        synonyms.push((name.clone(), static_value, SOURCE_STATIC_BROKER));
    }
    synonyms.push((name.clone(), default, SOURCE_DEFAULT));
    let (_, value, source) = synonyms[0].clone();
    let vd = dynamic_config::value_def(d);
    ConfigEntry {
        name,
        value,
        source,
        read_only: false,
        kind: vd.kind as i8,
        doc: vd.doc,
        synonyms,
    }
}

/// The current values of the level `name` addresses, with IncrementalAlterConfigs' operations
/// applied (not yet validated).
pub fn incremental(
    state: &BrokerState,
    name: &str,
    ops: impl Iterator<Item = (String, i8, Option<String>)>,
) -> Result<BTreeMap<String, String>, ResourceError> {
    let level = level(state, name)?;
    let mut values = state.dynamic.layers().get(level).clone();
    let invalid = |m: String| (ResponseError::InvalidRequest.code(), m);
    for (key, op, value) in ops {
        match op {
            OP_SET => {
                let v = value
                    .ok_or_else(|| invalid(format!("Null value not supported for : {key}")))?;
                values.insert(key, v);
            }
            OP_DELETE => {
                values.remove(&key);
            }
            OP_APPEND | OP_SUBTRACT => {
                let is_list = dynamic_config::find(&key)
                    .is_some_and(|d| dynamic_config::value_def(d).kind == ConfigType::List);
                if !is_list {
                    return Err(invalid(format!(
                        "Config value append/subtract is not allowed for config key {key} since it is not a list"
                    )));
                }
                let current = values.get(&key).cloned().unwrap_or_default();
                let mut items: Vec<String> = split_list(&current).map(String::from).collect();
                for v in split_list(value.as_deref().unwrap_or_default()) {
                    if op == OP_APPEND && !items.iter().any(|i| i == v) {
                        items.push(v.to_string());
                    } else if op == OP_SUBTRACT {
                        items.retain(|i| i != v);
                    }
                }
                values.insert(key, items.join(","));
            }
            other => return Err(invalid(format!("Unknown operations type {other}"))),
        }
    }
    Ok(values)
}

fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Replace the values of the level `name` addresses and apply them at once: new topic-config
/// defaults for every log, the running connection limit, the replication throttle rates.
pub async fn alter(
    state: &Arc<BrokerState>,
    name: &str,
    values: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), ResourceError> {
    let level = level(state, name)?;
    let st = state.clone();
    let done = tokio::task::spawn_blocking(move || {
        let layers = st.dynamic.replace(level, values, validate_only)?;
        if !validate_only {
            st.replicas
                .set_log_defaults(layers.log_defaults(&st.config.log_defaults));
            st.replicas
                .replication_quotas()
                .apply_broker_configs(|name| layers.effective(name).map(|(v, _)| v));
        }
        Ok::<(), DynamicConfigError>(())
    })
    .await;
    match done {
        Ok(Ok(())) => Ok(()),
        Ok(Err(DynamicConfigError::Invalid(m))) => Err((ResponseError::InvalidRequest.code(), m)),
        Ok(Err(e)) => Err((ResponseError::UnknownServerError.code(), e.to_string())),
        Err(e) => Err((ResponseError::UnknownServerError.code(), e.to_string())),
    }
}

/// The read-only settings: what the broker was started with.
fn static_entries(state: &BrokerState) -> Vec<ConfigEntry> {
    let c = &state.config;
    let advertised = format!(
        "PLAINTEXT://{}:{}",
        state.advertised_host, state.advertised_port
    );
    let rows: Vec<(&str, String, ConfigType, &'static str)> = vec![
        (
            "advertised.listeners",
            advertised,
            ConfigType::Str,
            "Address given to clients.",
        ),
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            ConfigType::Boolean,
            "Create topics on Metadata requests.",
        ),
        (
            "broker.id",
            c.node_id.to_string(),
            ConfigType::Int,
            "This broker's id.",
        ),
        (
            "connections.max.idle.ms",
            c.connections_max_idle_ms.to_string(),
            ConfigType::Long,
            "Idle connections are closed after this.",
        ),
        (
            "listeners",
            format!("PLAINTEXT://{}", c.listen),
            ConfigType::Str,
            "Bound address.",
        ),
        (
            "log.dirs",
            c.data_dir.display().to_string(),
            ConfigType::Str,
            "Data directory.",
        ),
        (
            "node.id",
            c.node_id.to_string(),
            ConfigType::Int,
            "This broker's id.",
        ),
        (
            "num.partitions",
            c.num_partitions.to_string(),
            ConfigType::Int,
            "Default partitions of new topics.",
        ),
        (
            "socket.request.max.bytes",
            c.socket_request_max_bytes.to_string(),
            ConfigType::Int,
            "Largest request accepted.",
        ),
    ];
    rows.into_iter()
        .map(|(name, value, kind, doc)| ConfigEntry {
            name: name.to_string(),
            synonyms: vec![(name.to_string(), value.clone(), SOURCE_STATIC_BROKER)],
            value,
            source: SOURCE_STATIC_BROKER,
            read_only: true,
            kind: kind as i8,
            doc,
        })
        .collect()
}

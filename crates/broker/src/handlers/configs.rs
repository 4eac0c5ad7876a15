//! DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics; broker
//! configs are described (read-only).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::replica_manager::TopicError;
use crate::router::HandlerResult;
use crate::topic_config::{self, ConfigType};

/// ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

struct ConfigEntry {
    name: String,
    value: String,
    source: i8,
    read_only: bool,
    kind: i8,
    doc: &'static str,
    default: Option<String>,
}

fn topic_entries(state: &BrokerState, overrides: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
    topic_config::TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let default = topic_config::default_value(def.name, state.replicas.log_defaults());
            let (value, source) = match overrides.get(def.name) {
                Some(v) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
                None => (default.clone(), SOURCE_DEFAULT),
            };
            ConfigEntry {
                name: def.name.to_string(),
                value,
                source,
                read_only: false,
                kind: def.kind as i8,
                doc: def.doc,
                default: Some(default),
            }
        })
        .collect()
}

/// (name, value) of every broker config DescribeConfigs reports (the dashboard's broker page).
pub(crate) fn broker_config_values(state: &BrokerState) -> Vec<(String, String)> {
    broker_entries(state)
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect()
}

fn broker_entries(state: &BrokerState) -> Vec<ConfigEntry> {
    let c = &state.config;
    let d = &c.log_defaults;
    let listen = c.listen.to_string();
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
            format!("PLAINTEXT://{listen}"),
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
            "log.flush.interval.messages",
            d.flush_messages.to_string(),
            ConfigType::Long,
            "Default flush.messages.",
        ),
        (
            "log.flush.interval.ms",
            d.flush_ms.to_string(),
            ConfigType::Long,
            "Default flush.ms.",
        ),
        (
            "log.retention.bytes",
            d.retention_bytes.to_string(),
            ConfigType::Long,
            "Default retention.bytes.",
        ),
        (
            "log.retention.ms",
            d.retention_ms.to_string(),
            ConfigType::Long,
            "Default retention.ms.",
        ),
        (
            "log.segment.bytes",
            d.segment_bytes.to_string(),
            ConfigType::Int,
            "Default segment.bytes.",
        ),
        (
            "max.connections",
            c.max_connections.to_string(),
            ConfigType::Int,
            "Connection limit.",
        ),
        (
            "message.max.bytes",
            d.max_message_bytes.to_string(),
            ConfigType::Int,
            "Default max.message.bytes.",
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
            value,
            source: SOURCE_STATIC_BROKER,
            read_only: true,
            kind: kind as i8,
            doc,
            default: None,
        })
        .collect()
}

pub async fn handle_describe_configs(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeConfigsRequest = req.decode()?;
    let mut resp = DescribeConfigsResponse::default();
    for res in request.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let entries = match res.resource_type {
            RESOURCE_TOPIC => match state.replicas.topic(&res.resource_name) {
                Some(t) => Ok(topic_entries(&state, &t.configs)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition.code(),
                    format!("Topic {} does not exist", res.resource_name.as_str()),
                )),
            },
            RESOURCE_BROKER => {
                let name = res.resource_name.as_str();
                if name.is_empty() || name == state.node_id().to_string() {
                    Ok(broker_entries(&state))
                } else {
                    Err((
                        ResponseError::InvalidRequest.code(),
                        format!(
                            "Unexpected broker id, expected {} or empty string, but received {name}",
                            state.node_id()
                        ),
                    ))
                }
            }
            other => Err((
                ResponseError::InvalidRequest.code(),
                format!("Unsupported resource type {other}"),
            )),
        };
        match entries {
            Ok(entries) => {
                let keys: Option<Vec<String>> = res
                    .configuration_keys
                    .map(|k| k.iter().map(|s| s.to_string()).collect());
                r.configs = entries
                    .into_iter()
                    .filter(|e| keys.as_ref().is_none_or(|k| k.contains(&e.name)))
                    .map(|e| {
                        to_result(
                            e,
                            request.include_synonyms,
                            request.include_documentation,
                            req.api_version,
                        )
                    })
                    .collect();
            }
            Err((code, msg)) => {
                r.error_code = code;
                r.error_message = message(msg);
            }
        }
        resp.results.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

fn to_result(
    e: ConfigEntry,
    synonyms: bool,
    docs: bool,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default();
    c.name = StrBytes::from_string(e.name.clone());
    c.value = Some(StrBytes::from_string(e.value.clone()));
    c.read_only = e.read_only;
    c.config_source = e.source;
    c.is_sensitive = false;
    if version >= 3 {
        c.config_type = e.kind;
        if docs {
            c.documentation = Some(StrBytes::from_static_str(e.doc));
        }
    }
    if synonyms {
        let mut syn = DescribeConfigsSynonym::default();
        syn.name = StrBytes::from_string(e.name.clone());
        syn.value = Some(StrBytes::from_string(e.value));
        syn.source = e.source;
        c.synonyms.push(syn);
        if e.source == SOURCE_DYNAMIC_TOPIC
            && let Some(d) = e.default
        {
            let mut syn = DescribeConfigsSynonym::default();
            syn.name = StrBytes::from_string(e.name);
            syn.value = Some(StrBytes::from_string(d));
            syn.source = SOURCE_DEFAULT;
            c.synonyms.push(syn);
        }
    }
    c
}

/// Apply a new override map to a topic; maps the outcome to (code, message).
async fn apply(
    state: &Arc<BrokerState>,
    resource_type: i8,
    name: &str,
    result: Result<BTreeMap<String, String>, String>,
    validate_only: bool,
) -> (i16, Option<String>) {
    if resource_type == RESOURCE_BROKER {
        return (
            ResponseError::InvalidRequest.code(),
            Some("Broker configs are static in StreamForge; restart with new flags.".into()),
        );
    }
    if resource_type != RESOURCE_TOPIC {
        return (
            ResponseError::InvalidRequest.code(),
            Some(format!("Unsupported resource type {resource_type}")),
        );
    }
    let configs = match result {
        Ok(c) => c,
        Err(msg) => return (ResponseError::InvalidConfig.code(), Some(msg)),
    };
    let st = state.clone();
    let n = name.to_string();
    match tokio::task::spawn_blocking(move || {
        st.replicas.set_topic_configs(&n, configs, validate_only)
    })
    .await
    {
        Ok(Ok(())) => (0, None),
        Ok(Err(e @ TopicError::UnknownTopic)) => {
            (e.kafka_code(), Some(format!("Topic {name} does not exist")))
        }
        Ok(Err(e)) => (e.kafka_code(), Some(e.to_string())),
        Err(e) => (
            ResponseError::UnknownServerError.code(),
            Some(e.to_string()),
        ),
    }
}

pub async fn handle_alter_configs(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: AlterConfigsRequest = req.decode()?;
    let mut resp = AlterConfigsResponse::default();
    for res in request.resources {
        // Non-incremental: the given set replaces all overrides.
        let mut configs = BTreeMap::new();
        let mut bad = None;
        for c in &res.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => {
                    bad = Some(format!(
                        "Null value not supported for : {}",
                        c.name.as_str()
                    ))
                }
            }
        }
        let result = match bad {
            Some(m) => Err(m),
            None => Ok(configs),
        };
        let (code, msg) = apply(
            &state,
            res.resource_type,
            &res.resource_name,
            result,
            request.validate_only,
        )
        .await;
        let mut r =
            kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default(
            );
        r.error_code = code;
        r.error_message = msg.map(StrBytes::from_string);
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name;
        resp.responses.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_incremental_alter_configs(
    state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: IncrementalAlterConfigsRequest = req.decode()?;
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in request.resources {
        let current = if res.resource_type == RESOURCE_TOPIC {
            state
                .replicas
                .topic(&res.resource_name)
                .map(|t| t.configs.clone())
        } else {
            Some(BTreeMap::new())
        };
        let result = match current {
            None => None,
            Some(mut configs) => Some(
                res.configs
                    .iter()
                    .try_for_each(|c| {
                        incremental_op(
                            &state,
                            &mut configs,
                            c.name.as_str(),
                            c.config_operation,
                            c.value.as_deref(),
                        )
                    })
                    .map(|()| configs),
            ),
        };
        let (code, msg) = match result {
            None => (
                ResponseError::UnknownTopicOrPartition.code(),
                Some(format!(
                    "Topic {} does not exist",
                    res.resource_name.as_str()
                )),
            ),
            Some(result) => {
                apply(
                    &state,
                    res.resource_type,
                    &res.resource_name,
                    result,
                    request.validate_only,
                )
                .await
            }
        };
        let mut r = kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.error_code = code;
        r.error_message = msg.map(StrBytes::from_string);
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name;
        resp.responses.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

fn incremental_op(
    state: &BrokerState,
    configs: &mut BTreeMap<String, String>,
    name: &str,
    op: i8,
    value: Option<&str>,
) -> Result<(), String> {
    let def =
        topic_config::find(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    match op {
        OP_SET => {
            let v = value.ok_or_else(|| format!("Null value not supported for : {name}"))?;
            configs.insert(name.to_string(), v.to_string());
        }
        OP_DELETE => {
            configs.remove(name);
        }
        OP_APPEND | OP_SUBTRACT => {
            if def.kind != ConfigType::List {
                return Err(format!(
                    "Config value append/subtract is not allowed for config key {name} since it is not a list"
                ));
            }
            let current = configs.get(name).cloned().unwrap_or_else(|| {
                topic_config::default_value(name, state.replicas.log_defaults())
            });
            let mut items: Vec<String> = current
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            for v in value
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
            {
                if op == OP_APPEND {
                    if !items.iter().any(|i| i == v) {
                        items.push(v.to_string());
                    }
                } else {
                    items.retain(|i| i != v);
                }
            }
            configs.insert(name.to_string(), items.join(","));
        }
        other => return Err(format!("Unknown config operation {other}")),
    }
    Ok(())
}

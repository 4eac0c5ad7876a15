//! DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics; the
//! BROKER resource (start-up and dynamic broker configs) is in `broker_configs`.

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
use crate::dynamic_config;
use crate::handlers::{broker_configs, message};
use crate::replica_manager::TopicError;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};
use crate::topic_config::{self, ConfigType};
use streamforge_log::LogConfig;

/// ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;
/// IncrementalAlterConfigs operations.
pub(crate) const OP_SET: i8 = 0;
pub(crate) const OP_DELETE: i8 = 1;
pub(crate) const OP_APPEND: i8 = 2;
pub(crate) const OP_SUBTRACT: i8 = 3;

/// One described config.
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    pub source: i8,
    pub read_only: bool,
    pub kind: i8,
    pub doc: &'static str,
    /// (name, value, source) of every level that sets it, highest first (`include_synonyms`).
    pub synonyms: Vec<(String, String, i8)>,
}

fn topic_entries(state: &BrokerState, overrides: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
    let defaults = state.replicas.log_defaults();
    let layers = state.dynamic.layers();
    topic_config::TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let default = topic_config::default_value(def.name, &defaults);
            // Below a topic override: the broker-level synonym's levels (Kafka lists them too).
            let broker_levels = match dynamic_config::for_topic(def.name) {
                Some(d) => {
                    let static_value =
                        topic_config::default_value(def.name, &state.config.log_defaults);
                    let builtin = topic_config::default_value(def.name, &LogConfig::default());
                    broker_configs::dynamic_entry(&layers, d, static_value, builtin).synonyms
                }
                None => vec![(def.name.to_string(), default.clone(), SOURCE_DEFAULT)],
            };
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push((def.name.to_string(), v.clone(), SOURCE_DYNAMIC_TOPIC));
            }
            synonyms.extend(broker_levels);
            let (value, source) = match overrides.get(def.name) {
                Some(v) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
                None => (default, synonyms[0].2),
            };
            ConfigEntry {
                name: def.name.to_string(),
                value,
                source,
                read_only: false,
                kind: def.kind as i8,
                doc: def.doc,
                synonyms,
            }
        })
        .collect()
}

/// (name, value) of every broker config DescribeConfigs reports for this broker (the
/// dashboard's broker page).
pub(crate) fn broker_config_values(state: &BrokerState) -> Vec<(String, String)> {
    broker_configs::describe(state, &state.node_id().to_string())
        .map(|entries| entries.into_iter().map(|e| (e.name, e.value)).collect())
        .unwrap_or_default()
}

pub async fn handle_describe_configs(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeConfigsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DescribeConfigsResponse::default();
    for res in request.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let denied = config_denied(
            &access,
            res.resource_type,
            &res.resource_name,
            Operation::DescribeConfigs,
        );
        let entries = match res.resource_type {
            _ if denied.is_some() => Err(denied.expect("checked")),
            RESOURCE_TOPIC => match state.replicas.topic(&res.resource_name) {
                Some(t) => Ok(topic_entries(&state, &t.configs)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition.code(),
                    format!("Topic {} does not exist", res.resource_name.as_str()),
                )),
            },
            RESOURCE_BROKER => broker_configs::describe(&state, res.resource_name.as_str()),
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
        c.synonyms = e
            .synonyms
            .into_iter()
            .map(|(name, value, source)| {
                let mut syn = DescribeConfigsSynonym::default();
                syn.name = StrBytes::from_string(name);
                syn.value = Some(StrBytes::from_string(value));
                syn.source = source;
                syn
            })
            .collect();
    }
    c
}

/// Kafka: a topic's configs need `op` on the topic (else TOPIC_AUTHORIZATION_FAILED), a
/// broker's on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
fn config_denied(
    access: &Access<'_>,
    resource_type: i8,
    name: &str,
    op: Operation,
) -> Option<(i16, String)> {
    let failed = |code: ResponseError| Some((code.code(), code.to_string()));
    match resource_type {
        RESOURCE_TOPIC if !access.topic(op, name) => {
            failed(ResponseError::TopicAuthorizationFailed)
        }
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER if !access.cluster(op) => {
            failed(ResponseError::ClusterAuthorizationFailed)
        }
        _ => None,
    }
}

/// Kafka's BROKER_LOGGER config resource type (authorized like BROKER).
const RESOURCE_BROKER_LOGGER: i8 = 8;

/// Apply a new override map to a topic; maps the outcome to (code, message).
async fn apply(
    state: &Arc<BrokerState>,
    resource_type: i8,
    name: &str,
    result: Result<BTreeMap<String, String>, String>,
    validate_only: bool,
) -> (i16, Option<String>) {
    if resource_type == RESOURCE_BROKER {
        let outcome = match result {
            Ok(values) => broker_configs::alter(state, name, values, validate_only).await,
            Err(msg) => Err((kafka_protocol::ResponseError::InvalidRequest.code(), msg)),
        };
        return match outcome {
            Ok(()) => (0, None),
            Err((code, msg)) => (code, Some(msg)),
        };
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
    let access = Access::of(&state, &req);
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
        let denied = config_denied(
            &access,
            res.resource_type,
            &res.resource_name,
            Operation::AlterConfigs,
        );
        let (code, msg) = match denied {
            Some((code, msg)) => (code, Some(msg)),
            None => {
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
    let access = Access::of(&state, &req);
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in request.resources {
        let denied = config_denied(
            &access,
            res.resource_type,
            &res.resource_name,
            Operation::AlterConfigs,
        );
        let (code, msg) = if let Some((code, msg)) = denied {
            (code, Some(msg))
        } else if res.resource_type == RESOURCE_BROKER {
            alter_broker_incrementally(&state, &res, request.validate_only).await
        } else {
            alter_topic_incrementally(&state, &res, request.validate_only).await
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

type IncrementalResource =
    kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;

async fn alter_broker_incrementally(
    state: &Arc<BrokerState>,
    res: &IncrementalResource,
    validate_only: bool,
) -> (i16, Option<String>) {
    let ops = res.configs.iter().map(|c| {
        (
            c.name.to_string(),
            c.config_operation,
            c.value.as_ref().map(|v| v.to_string()),
        )
    });
    let name = res.resource_name.as_str();
    let result = match broker_configs::incremental(state, name, ops) {
        Ok(values) => broker_configs::alter(state, name, values, validate_only).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => (0, None),
        Err((code, msg)) => (code, Some(msg)),
    }
}

async fn alter_topic_incrementally(
    state: &Arc<BrokerState>,
    res: &IncrementalResource,
    validate_only: bool,
) -> (i16, Option<String>) {
    let current = if res.resource_type == RESOURCE_TOPIC {
        state
            .replicas
            .topic(&res.resource_name)
            .map(|t| t.configs.clone())
    } else {
        Some(BTreeMap::new())
    };
    let Some(mut configs) = current else {
        return (
            ResponseError::UnknownTopicOrPartition.code(),
            Some(format!(
                "Topic {} does not exist",
                res.resource_name.as_str()
            )),
        );
    };
    let result = res
        .configs
        .iter()
        .try_for_each(|c| {
            incremental_op(
                state,
                &mut configs,
                c.name.as_str(),
                c.config_operation,
                c.value.as_deref(),
            )
        })
        .map(|()| configs);
    apply(
        state,
        res.resource_type,
        &res.resource_name,
        result,
        validate_only,
    )
    .await
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
                topic_config::default_value(name, &state.replicas.log_defaults())
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

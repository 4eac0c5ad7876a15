//! CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};
use uuid::Uuid;

use crate::BrokerState;
use crate::handlers::configs::{SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC};
use crate::handlers::{message, topic_name};
use crate::replica_manager::TopicError;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};
use crate::topic_config;

/// Check replication factor and manual assignments against the live brokers of the image
/// (with Kafka's messages; the controller checks the same again when it places replicas).
fn check_replicas(
    state: &BrokerState,
    replication_factor: i16,
    assignments: &[Vec<i32>],
) -> Result<(), (i16, String)> {
    let image = state.replicas.image();
    let live: Vec<i32> = image.unfenced_brokers().map(|b| b.id).collect();
    if replication_factor == 0 || replication_factor < -1 {
        let msg = "Replication factor must be larger than 0, or -1 to use the default value.";
        return Err((ResponseError::InvalidReplicationFactor.code(), msg.into()));
    }
    if replication_factor as usize > live.len() && replication_factor > 0 {
        let msg = format!(
            "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered.",
            live.len()
        );
        return Err((ResponseError::InvalidReplicationFactor.code(), msg));
    }
    for a in assignments {
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if a.is_empty() || sorted.len() != a.len() || a.iter().any(|b| !live.contains(b)) {
            return Err((
                ResponseError::InvalidReplicaAssignment.code(),
                format!(
                    "Replica assignment {a:?} names brokers that are not registered and live (live: {live:?})."
                ),
            ));
        }
    }
    Ok(())
}

pub async fn handle_create_topics(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: CreateTopicsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let cluster_create = access.quiet().cluster(Operation::Create);
    let mut resp = CreateTopicsResponse::default();
    let mut seen = BTreeMap::<String, usize>::new();
    for t in &request.topics {
        *seen.entry(t.name.0.to_string()).or_default() += 1;
    }
    for t in request.topics {
        let name = t.name.0.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        // Kafka: CREATE on the cluster, or else on the topic.
        let outcome =
            if seen[&name] == 1 && !cluster_create && !access.topic(Operation::Create, &name) {
                Err(authorization_failed())
            } else {
                create_one(&state, &name, &t, request.validate_only, seen[&name] > 1).await
            };
        match outcome {
            Ok((id, partitions, configs)) => {
                r.topic_id = id;
                r.num_partitions = partitions;
                r.replication_factor = state
                    .replicas
                    .image()
                    .topic(id)
                    .and_then(|t| {
                        t.partitions
                            .values()
                            .next()
                            .map(|p| p.replicas.len() as i16)
                    })
                    .unwrap_or(t.replication_factor.max(1));
                if access.topic(Operation::DescribeConfigs, &name) {
                    r.configs = Some(described_configs(&state, &configs));
                } else {
                    r.topic_config_error_code = ResponseError::TopicAuthorizationFailed.code();
                }
            }
            Err((code, msg)) => {
                tracing::debug!(topic = %name, code, msg = %msg, "create topic rejected");
                r.error_code = code;
                r.error_message = message(msg);
            }
        }
        resp.topics.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

type Created = (Uuid, i32, BTreeMap<String, String>);

fn authorization_failed() -> (i16, String) {
    (
        ResponseError::TopicAuthorizationFailed.code(),
        "Authorization failed.".into(),
    )
}

/// DeleteTopics' checks (Kafka's controller): a topic named but not DESCRIBE-able is
/// TOPIC_AUTHORIZATION_FAILED before its existence is looked at; an existing one needs DELETE.
fn authorize_delete(
    access: &Access<'_>,
    given: Option<&str>,
    resolved: Result<String, ResponseError>,
) -> Result<String, ResponseError> {
    if let Some(n) = given
        && !access.topic(Operation::Describe, n)
    {
        return Err(ResponseError::TopicAuthorizationFailed);
    }
    let name = resolved?;
    if !access.topic(Operation::Delete, &name) {
        return Err(ResponseError::TopicAuthorizationFailed);
    }
    Ok(name)
}

async fn create_one(
    state: &Arc<BrokerState>,
    name: &str,
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
    duplicate: bool,
) -> Result<Created, (i16, String)> {
    if duplicate {
        return Err((
            ResponseError::InvalidRequest.code(),
            format!("Create topics request from client contains multiple entries for topic {name}"),
        ));
    }
    let assignments: Vec<Vec<i32>> = t
        .assignments
        .iter()
        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
        .collect();
    let partitions = if !assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err((ResponseError::InvalidRequest.code(), "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into()));
        }
        assignments.len() as i32
    } else if t.num_partitions == -1 {
        state.config.num_partitions
    } else if t.num_partitions <= 0 {
        return Err((
            ResponseError::InvalidPartitions.code(),
            "Number of partitions must be larger than 0, or -1 to use the default value.".into(),
        ));
    } else {
        t.num_partitions
    };
    check_replicas(state, t.replication_factor, &assignments)?;
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let Some(value) = &c.value else {
            return Err((
                ResponseError::InvalidConfig.code(),
                format!(
                    "Null value not supported for topic configs: {}",
                    c.name.as_str()
                ),
            ));
        };
        configs.insert(c.name.to_string(), value.to_string());
    }
    // With an explicit assignment both counts are -1 on the wire and to the controller.
    let explicit = !assignments.is_empty();
    let spec = streamforge_metadata::controller::CreateTopic {
        name: name.to_string(),
        num_partitions: if explicit { -1 } else { partitions },
        replication_factor: t.replication_factor,
        assignment: (0..).zip(assignments).collect(),
        configs: configs.clone(),
    };
    let st = state.clone();
    let result =
        tokio::task::spawn_blocking(move || st.replicas.create_topic_spec(spec, validate_only))
            .await
            .map_err(|e| (ResponseError::UnknownServerError.code(), e.to_string()))?;
    match result {
        Ok(Some(topic)) => Ok((topic.id, partitions, configs)),
        Ok(None) => Ok((Uuid::nil(), partitions, configs)),
        Err(e) => Err((e.kafka_code(), e.to_string())),
    }
}

fn described_configs(
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
) -> Vec<CreatableTopicConfigs> {
    topic_config::TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let mut c = CreatableTopicConfigs::default();
            c.name = StrBytes::from_static_str(def.name);
            let (value, source) = match overrides.get(def.name) {
                Some(v) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
                None => (
                    topic_config::default_value(def.name, &state.replicas.log_defaults()),
                    SOURCE_DEFAULT,
                ),
            };
            c.value = Some(StrBytes::from_string(value));
            c.config_source = source;
            c
        })
        .collect()
}

pub async fn handle_delete_topics(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DeleteTopicsRequest = req.decode()?;
    // v0-5 name topics in `topic_names`; v6 in `topics` (name or id).
    let mut targets: Vec<(Option<String>, Uuid)> = request
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), Uuid::nil()))
        .collect();
    targets.extend(
        request
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let mut resp = DeleteTopicsResponse::default();
    let access = Access::of(&state, &req);
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default();
        r.topic_id = id;
        let resolved = match (&name, id.is_nil()) {
            (Some(n), _) => state
                .replicas
                .topic(n)
                .map(|t| t.name.clone())
                .ok_or(ResponseError::UnknownTopicOrPartition),
            (None, false) => state
                .replicas
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .ok_or(ResponseError::UnknownTopicId),
            (None, true) => Err(ResponseError::InvalidRequest),
        };
        r.name = name.as_deref().map(topic_name);
        match authorize_delete(&access, name.as_deref(), resolved) {
            Err(code) => {
                r.error_code = code.code();
                r.error_message = message(match code {
                    ResponseError::UnknownTopicId => "This server does not host this topic ID.",
                    ResponseError::InvalidRequest => "Neither topic name nor id were specified.",
                    ResponseError::TopicAuthorizationFailed => "Authorization failed.",
                    _ => "This server does not host this topic-partition.",
                });
            }
            Ok(resolved_name) => {
                let st = state.clone();
                let n = resolved_name.clone();
                let deleted =
                    tokio::task::spawn_blocking(move || st.replicas.delete_topic(&n)).await;
                r.name = Some(topic_name(&resolved_name));
                match deleted {
                    Ok(Ok(id)) => r.topic_id = id,
                    Ok(Err(e)) => {
                        r.error_code = e.kafka_code();
                        r.error_message = message(e.to_string());
                    }
                    Err(e) => {
                        r.error_code = ResponseError::UnknownServerError.code();
                        r.error_message = message(e.to_string());
                    }
                }
            }
        }
        resp.responses.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_create_partitions(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: CreatePartitionsRequest = req.decode()?;
    let mut resp = CreatePartitionsResponse::default();
    let access = Access::of(&state, &req);
    for t in request.topics {
        let name = t.name.0.to_string();
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let assignments: Vec<Vec<i32>> = t
            .assignments
            .iter()
            .flatten()
            .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
            .collect();
        // Kafka: ALTER on the topic, checked first.
        let checked = if access.topic(Operation::Alter, &name) {
            check_replicas(&state, -1, &assignments)
        } else {
            Err(authorization_failed())
        };
        let result = match checked {
            Err(e) => Err(e),
            Ok(()) => {
                let current = state.replicas.topic(&name).map(|t| t.partition_count());
                if let Some(cur) = current
                    && t.assignments.is_some()
                    && assignments.len() as i32 != t.count - cur
                {
                    Err((
                        ResponseError::InvalidReplicaAssignment.code(),
                        format!(
                            "Increasing the number of partitions by {} but {} assignments provided.",
                            t.count - cur,
                            assignments.len()
                        ),
                    ))
                } else {
                    let st = state.clone();
                    let (n, count, validate_only) = (name.clone(), t.count, request.validate_only);
                    match tokio::task::spawn_blocking(move || {
                        st.replicas.create_partitions(&n, count, validate_only)
                    })
                    .await
                    {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e @ TopicError::UnknownTopic)) => Err((
                            e.kafka_code(),
                            format!("The topic '{name}' does not exist."),
                        )),
                        Ok(Err(e)) => Err((e.kafka_code(), e.to_string())),
                        Err(e) => Err((ResponseError::UnknownServerError.code(), e.to_string())),
                    }
                }
            }
        };
        if let Err((code, msg)) = result {
            r.error_code = code;
            r.error_message = message(msg);
        }
        resp.results.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

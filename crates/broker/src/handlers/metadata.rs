//! Metadata (3): brokers, cluster id, controller and topics, with auto topic creation.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};
use uuid::Uuid;

use crate::BrokerState;
use crate::handlers::topic_name;
use crate::replica_manager::{Topic, TopicError};
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, Resource};
use streamforge_metadata::{MetadataImage, NO_LEADER};

/// "Authorized operations not requested" marker (Integer.MIN_VALUE).
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// Most topics one Metadata request may auto-create; the rest are answered
/// LEADER_NOT_AVAILABLE (Kafka's answer for a topic still being created), so a client's retry
/// creates the next ones. One request once created 4,000 topics and left the broker 6 file
/// descriptors short of its limit.
pub const AUTO_CREATE_TOPICS_PER_REQUEST_MAX: usize = 100;

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: MetadataRequest = req.decode()?;
    let mut resp = MetadataResponse::default();
    let image = state.replicas.image();
    resp.brokers = live_brokers(&state, &image, req.listener);
    resp.cluster_id = Some(StrBytes::from_string(state.cluster_id.clone()));
    resp.controller_id = BrokerId(controller_id(&state));
    resp.cluster_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED;

    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let all = match &request.topics {
        None => true,
        Some(t) => t.is_empty() && req.api_version == 0,
    };
    let access = Access::of(&state, &req);
    let include_operations = (
        request.include_cluster_authorized_operations,
        request.include_topic_authorized_operations,
    );
    if all {
        // Kafka lists only the topics the principal may DESCRIBE.
        let quiet = access.quiet();
        resp.topics = state
            .replicas
            .topics()
            .iter()
            .filter(|t| quiet.topic(Operation::Describe, &t.name))
            .map(|t| topic_entry(&state, t))
            .collect();
    } else {
        // Auto creation: always allowed before v4, then per request; and by the broker config.
        let allow_auto_create = state.config.auto_create_topics
            && (req.api_version < 4 || request.allow_auto_topic_creation);
        let mut creations_left = AUTO_CREATE_TOPICS_PER_REQUEST_MAX;
        for t in request.topics.unwrap_or_default() {
            // v10+: a topic given by id has name null, or "" from the Java client (4.x);
            // Kafka resolves both by the id.
            let by_id = !t.topic_id.is_nil() && t.name.as_ref().is_none_or(|n| n.is_empty());
            let entry = match t.name {
                Some(name) if !by_id => {
                    let name = name.0.to_string();
                    match denied(&state, &access, &name, allow_auto_create) {
                        Some(code) => error_entry(Some(&name), Uuid::nil(), code),
                        None => {
                            lookup_or_create(&state, &name, allow_auto_create, &mut creations_left)
                                .await
                        }
                    }
                }
                _ => match state.replicas.topic_by_id(t.topic_id) {
                    Some(topic) if !access.topic(Operation::Describe, &topic.name) => {
                        error_entry(None, t.topic_id, ResponseError::TopicAuthorizationFailed)
                    }
                    Some(topic) => topic_entry(&state, &topic),
                    None => error_entry(None, t.topic_id, ResponseError::UnknownTopicId),
                },
            };
            resp.topics.push(entry);
        }
    }
    authorized_operations(&access, include_operations, &mut resp);
    Ok(Some(req.respond(&resp)?))
}

/// Kafka's order for a named topic: no DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether it
/// exists or not (its existence is not revealed); a missing topic that would be auto-created
/// needs CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED too.
fn denied(
    state: &BrokerState,
    access: &Access<'_>,
    name: &str,
    allow_auto_create: bool,
) -> Option<ResponseError> {
    let may_create =
        || access.quiet().cluster(Operation::Create) || access.topic(Operation::Create, name);
    if !access.topic(Operation::Describe, name)
        || (allow_auto_create && state.replicas.topic(name).is_none() && !may_create())
    {
        Some(ResponseError::TopicAuthorizationFailed)
    } else {
        None
    }
}

/// v8+: the authorized-operations bit fields the request asked for (cluster: v8-10).
fn authorized_operations(
    access: &Access<'_>,
    (cluster, topics): (bool, bool),
    resp: &mut MetadataResponse,
) {
    if cluster {
        resp.cluster_authorized_operations = access.operations(&Resource::cluster());
    }
    if topics {
        for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
            if let Some(name) = &t.name {
                t.topic_authorized_operations =
                    access.operations(&Resource::topic(name.0.as_str()));
            }
        }
    }
}

async fn lookup_or_create(
    state: &Arc<BrokerState>,
    name: &str,
    allow_auto_create: bool,
    creations_left: &mut usize,
) -> MetadataResponseTopic {
    if let Some(topic) = state.replicas.topic(name) {
        return topic_entry(state, &topic);
    }
    if !allow_auto_create {
        return error_entry(
            Some(name),
            Uuid::nil(),
            ResponseError::UnknownTopicOrPartition,
        );
    }
    if *creations_left == 0 {
        return error_entry(Some(name), Uuid::nil(), ResponseError::LeaderNotAvailable);
    }
    *creations_left -= 1;
    let st = state.clone();
    let owned = name.to_string();
    let partitions = state.config.num_partitions;
    let created = tokio::task::spawn_blocking(move || {
        st.replicas
            .create_topic(&owned, partitions, BTreeMap::new(), false)
    })
    .await;
    match created {
        Ok(Ok(Some(topic))) => topic_entry(state, &topic),
        // Lost a race with another creator: fine, it exists now.
        Ok(Err(TopicError::AlreadyExists(_))) => match state.replicas.topic(name) {
            Some(topic) => topic_entry(state, &topic),
            None => error_entry(Some(name), Uuid::nil(), ResponseError::LeaderNotAvailable),
        },
        // Also a name colliding with an existing topic (`a.b` against `a_b`), as in Kafka.
        Ok(Err(TopicError::InvalidName(_))) => error_entry(
            Some(name),
            Uuid::nil(),
            ResponseError::InvalidTopicException,
        ),
        // The broker's partition limit: the topic does not exist and cannot be created.
        Ok(Err(e @ TopicError::InvalidPartitions(_))) => {
            tracing::warn!(topic = name, error = %e, "auto topic creation refused");
            error_entry(
                Some(name),
                Uuid::nil(),
                ResponseError::UnknownTopicOrPartition,
            )
        }
        Ok(Err(e)) => {
            tracing::warn!(topic = name, error = %e, "auto topic creation failed");
            error_entry(Some(name), Uuid::nil(), ResponseError::UnknownServerError)
        }
        Ok(Ok(None)) | Err(_) => {
            error_entry(Some(name), Uuid::nil(), ResponseError::UnknownServerError)
        }
    }
}

/// The active controller's id (in combined mode, a broker id), or -1 when none is known.
pub(crate) fn controller_id(state: &BrokerState) -> i32 {
    state.replicas.metadata().controller_id().unwrap_or(-1)
}

/// Every unfenced broker of the image with its endpoint for `listener`'s protocol (this broker
/// always, as clients reach it through its advertised address).
pub(crate) fn live_brokers(
    state: &BrokerState,
    image: &MetadataImage,
    listener: usize,
) -> Vec<MetadataResponseBroker> {
    let mut brokers = vec![broker_entry(state, listener)];
    // Other brokers are named by the listener the request came in on, as Kafka does.
    let name = state.security.endpoint(listener).protocol.name();
    for b in image.unfenced_brokers().filter(|b| b.id != state.node_id()) {
        let Some(e) = b.endpoints.iter().find(|e| e.name == name) else {
            continue;
        };
        let mut m = MetadataResponseBroker::default();
        m.node_id = BrokerId(b.id);
        m.host = StrBytes::from_string(e.host.clone());
        m.port = i32::from(e.port);
        m.rack = b.rack.clone().map(StrBytes::from_string);
        brokers.push(m);
    }
    brokers.sort_by_key(|b| b.node_id.0);
    brokers
}

pub(crate) fn broker_entry(state: &BrokerState, listener: usize) -> MetadataResponseBroker {
    let endpoint = state.security.endpoint(listener);
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(state.node_id());
    b.host = StrBytes::from_string(endpoint.host.clone());
    b.port = endpoint.port;
    b.rack = state.config.broker_rack.clone().map(StrBytes::from_string);
    b
}

/// A topic as the image has it: leader, epoch, replicas, ISR and offline replicas per
/// partition (a replica hosted here whose log cannot be opened is offline).
fn topic_entry(state: &BrokerState, topic: &Topic) -> MetadataResponseTopic {
    let image = state.replicas.image();
    let mut t = MetadataResponseTopic::default();
    t.error_code = 0;
    t.name = Some(topic_name(&topic.name));
    t.topic_id = topic.id;
    t.is_internal = topic.is_internal();
    t.topic_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED;
    let Some(partitions) = image.topic(topic.id).map(|t| &t.partitions) else {
        return t;
    };
    let node = state.node_id();
    t.partitions = partitions
        .iter()
        .map(|(&index, s)| {
            let mut e = MetadataResponsePartition::default();
            e.partition_index = index;
            e.leader_id = BrokerId(s.leader);
            e.leader_epoch = s.leader_epoch;
            e.replica_nodes = s.replicas.iter().map(|&r| BrokerId(r)).collect();
            e.isr_nodes = s.isr.iter().map(|&r| BrokerId(r)).collect();
            let offline_here = topic
                .partition(index)
                .is_some_and(|p| p.offline_reason().is_some());
            e.offline_replicas = s
                .replicas
                .iter()
                .filter(|&&r| !image.is_unfenced(r) || (r == node && offline_here))
                .map(|&r| BrokerId(r))
                .collect();
            if s.leader == NO_LEADER || (s.leader == node && offline_here) {
                // As Kafka reports a partition without a serving leader.
                e.error_code = ResponseError::LeaderNotAvailable.code();
                e.leader_id = BrokerId(-1);
            }
            e
        })
        .collect();
    t
}

fn error_entry(name: Option<&str>, id: Uuid, code: ResponseError) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.error_code = code.code();
    t.name = name.map(topic_name);
    t.topic_id = id;
    t.topic_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED;
    t
}

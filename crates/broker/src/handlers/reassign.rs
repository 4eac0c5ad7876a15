//! AlterPartitionReassignments (45) and ListPartitionReassignments (46), what
//! `kafka-reassign-partitions` sends: forwarded to the active controller (KIP-455; rules in
//! `streamforge_metadata::controller::reassign`), ALTER / DESCRIBE on the cluster as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use streamforge_metadata::controller::{OngoingReassignment, ReassignPartition};
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::{message, topic_name};
use crate::replica_manager::TopicError;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// Kafka's message for each error of a partition's reassignment.
fn error_message(e: ResponseError) -> String {
    match e {
        ResponseError::UnknownTopicOrPartition => "Unable to find the topic or partition.".into(),
        ResponseError::InvalidReplicaAssignment => "The replica assignment is not valid: \
             an empty list, a broker listed twice or one that is not registered, or a cancel \
             that would need an unclean leader election."
            .into(),
        ResponseError::NoReassignmentInProgress => {
            "No partition reassignment is in progress.".into()
        }
        ResponseError::InvalidReplicationFactor => {
            "The reassignment would change the replication factor.".into()
        }
        other => format!("{other:?}"),
    }
}

pub async fn handle_alter_partition_reassignments(
    state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: AlterPartitionReassignmentsRequest = req.decode()?;
    let partitions: Vec<ReassignPartition> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignPartition {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let mut resp = AlterPartitionReassignmentsResponse::default();
    resp.allow_replication_factor_change = request.allow_replication_factor_change;
    // Kafka: ALTER on the cluster, else the error at the top and on every partition.
    let outcome = if Access::of(&state, &req).cluster(Operation::Alter) {
        let st = state.clone();
        let allow = request.allow_replication_factor_change;
        tokio::task::spawn_blocking(move || {
            st.replicas.alter_partition_reassignments(partitions, allow)
        })
        .await
        .unwrap_or_else(|e| Err(TopicError::Storage(e.to_string())))
    } else {
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        resp.error_message = message("Cluster authorization failed.");
        Err(TopicError::Controller(
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.".into(),
        ))
    };
    // An answer per partition, in the request's order.
    let mut answers = match outcome {
        Ok(results) => results.into_iter().map(|(_, r)| r).collect(),
        Err(e) => {
            let code = match e {
                TopicError::Controller(code, _) => code,
                _ => ResponseError::RequestTimedOut,
            };
            vec![Err(code); request.topics.iter().map(|t| t.partitions.len()).sum()]
        }
    }
    .into_iter();
    for t in &request.topics {
        let mut topic = ReassignableTopicResponse::default();
        topic.name = t.name.clone();
        for p in &t.partitions {
            let mut partition = ReassignablePartitionResponse::default();
            partition.partition_index = p.partition_index;
            partition.error_message = None;
            if let Some(Err(e)) = answers.next() {
                partition.error_code = e.code();
                partition.error_message = message(error_message(e));
            }
            topic.partitions.push(partition);
        }
        resp.responses.push(topic);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_list_partition_reassignments(
    state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: ListPartitionReassignmentsRequest = req.decode()?;
    let mut resp = ListPartitionReassignmentsResponse::default();
    if !Access::of(&state, &req).cluster(Operation::Describe) {
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        resp.error_message = message("Cluster authorization failed.");
        return Ok(Some(req.respond(&resp)?));
    }
    let topics = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let st = state.clone();
    let listed =
        tokio::task::spawn_blocking(move || st.replicas.list_partition_reassignments(topics))
            .await
            .unwrap_or_else(|e| Err(TopicError::Storage(e.to_string())));
    match listed {
        Ok(ongoing) => resp.topics = by_topic(ongoing),
        Err(e) => {
            let code = match e {
                TopicError::Controller(code, _) => code,
                _ => ResponseError::RequestTimedOut,
            };
            resp.error_code = code.code();
            resp.error_message = message(e.to_string());
        }
    }
    Ok(Some(req.respond(&resp)?))
}

/// The controller's list (ordered by topic) grouped into one entry per topic.
fn by_topic(ongoing: Vec<OngoingReassignment>) -> Vec<OngoingTopicReassignment> {
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect();
    let mut out: Vec<OngoingTopicReassignment> = Vec::new();
    for o in ongoing {
        if out.last().is_none_or(|t| t.name.0.as_str() != o.topic) {
            let mut topic = OngoingTopicReassignment::default();
            topic.name = topic_name(&o.topic);
            out.push(topic);
        }
        let mut p = OngoingPartitionReassignment::default();
        p.partition_index = o.partition;
        p.replicas = ids(o.replicas);
        p.adding_replicas = ids(o.adding);
        p.removing_replicas = ids(o.removing);
        if let Some(topic) = out.last_mut() {
            topic.partitions.push(p);
        }
    }
    out
}

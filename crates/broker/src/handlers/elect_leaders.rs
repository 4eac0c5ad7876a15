//! ElectLeaders (43): `kafka-leader-election`, `Admin.electLeaders`. Sent to the active
//! controller like the other admin requests; answered once what it wrote is applied here.
//!
//! As Kafka 4 (`ControllerApis.handleElectLeaders`, `ReplicationControlManager.electLeaders`):
//! - ALTER on the cluster, else the whole request fails with CLUSTER_AUTHORIZATION_FAILED
//!   (top level from v1, and on every named partition: `ElectLeadersRequest.getErrorResponse`);
//! - an election type other than 0 (preferred) or 1 (unclean) fails the same way with
//!   INVALID_REQUEST; v0 has no type and means preferred;
//! - per partition: UNKNOWN_TOPIC_OR_PARTITION, ELECTION_NOT_NEEDED (the preferred replica
//!   already leads / the partition has a leader), PREFERRED_LEADER_NOT_AVAILABLE,
//!   ELIGIBLE_LEADERS_NOT_AVAILABLE. An unclean election goes outside the ISR whatever
//!   `unclean.leader.election.enable` says (KIP-460: asking for it is the operator's consent);
//! - `topic_partitions: null` elects every partition and leaves out the ELECTION_NOT_NEEDED
//!   ones; an empty list is an empty answer;
//! - `timeout_ms` bounds the wait: past it the request fails with REQUEST_TIMED_OUT (the
//!   election may still happen, as in Kafka when the deadline passes after the commit); with
//!   0 or less it fails so at once, without an election (Kafka's deadline has passed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use streamforge_metadata::controller::ElectionType;
use streamforge_metadata::records::BrokerId;
use streamforge_protocol::{RequestFrame, ResponseError};

use super::{message, topic_name};
use crate::BrokerState;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// The controller's answer: per partition, the new leader or why not.
pub(crate) type Results = crate::replica_manager::topics::ElectionResults;

pub async fn handle_elect_leaders(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: ElectLeadersRequest = req.decode()?;
    let version = req.api_version;
    if !Access::of(&state, &req).cluster(Operation::Alter) {
        let resp = error_response(&request, version, ResponseError::ClusterAuthorizationFailed);
        return Ok(Some(req.respond(&resp)?));
    }
    let Some(kind) = election_type(request.election_type) else {
        let resp = error_response(&request, version, ResponseError::InvalidRequest);
        return Ok(Some(req.respond(&resp)?));
    };
    let partitions: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|ts| {
        ts.iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
            .collect()
    });
    if partitions.as_ref().is_some_and(Vec::is_empty) {
        let mut resp = ElectLeadersResponse::default();
        resp.replica_election_results = named_results(&request, Vec::new(), &|_| true);
        return Ok(Some(req.respond(&resp)?));
    }
    // Kafka's deadline is now + timeout_ms: with none left the request times out unapplied.
    let Ok(wait_ms @ 1..) = u64::try_from(request.timeout_ms) else {
        let resp = error_response(&request, version, ResponseError::RequestTimedOut);
        return Ok(Some(req.respond(&resp)?));
    };
    let st = state.clone();
    let election = tokio::task::spawn_blocking(move || st.replicas.elect_leaders(kind, partitions));
    let wait = Duration::from_millis(wait_ms);
    let resp = match tokio::time::timeout(wait, election).await {
        Err(_) => error_response(&request, version, ResponseError::RequestTimedOut),
        Ok(Err(_)) => error_response(&request, version, ResponseError::UnknownServerError),
        Ok(Ok(Err(e))) => {
            let code = ResponseError::try_from_code(e.kafka_code());
            let error = code.unwrap_or(ResponseError::UnknownServerError);
            error_response(&request, version, error)
        }
        Ok(Ok(Ok(results))) => {
            let image = state.replicas.image();
            let topic_exists = |t: &str| image.topic_by_name(t).is_some();
            let mut resp = ElectLeadersResponse::default();
            resp.replica_election_results = match request.topic_partitions {
                Some(_) => named_results(&request, results, &topic_exists),
                None => all_results(results, image.topics().map(|t| t.name.clone())),
            };
            resp
        }
    };
    Ok(Some(req.respond(&resp)?))
}

/// ElectLeaders' election type: 0 preferred, 1 unclean; anything else is INVALID_REQUEST.
pub(crate) fn election_type(t: i8) -> Option<ElectionType> {
    match t {
        0 => Some(ElectionType::Preferred),
        1 => Some(ElectionType::Unclean),
        _ => None,
    }
}

/// The whole request failed with `error`: top level from v1 (v0 has no such field), and on
/// every partition it names (none when it names all).
pub(crate) fn error_response(
    request: &ElectLeadersRequest,
    version: i16,
    error: ResponseError,
) -> ElectLeadersResponse {
    let mut resp = ElectLeadersResponse::default();
    if version >= 1 {
        resp.error_code = error.code();
    }
    let results = request.topic_partitions.iter().flatten().flat_map(|t| {
        let topic = t.topic.0.to_string();
        t.partitions
            .iter()
            .map(move |&p| ((topic.clone(), p), Err(error)))
    });
    resp.replica_election_results = named_results(request, results.collect(), &|_| true);
    resp
}

/// One result per topic entry of the request, in its order, each with its partitions'
/// results (`results` is in the same order, as the controller answers).
pub(crate) fn named_results(
    request: &ElectLeadersRequest,
    results: Results,
    topic_exists: &dyn Fn(&str) -> bool,
) -> Vec<ReplicaElectionResult> {
    let mut results = results.into_iter();
    let mut out = Vec::new();
    for t in request.topic_partitions.iter().flatten() {
        let mut r = ReplicaElectionResult::default();
        r.topic = t.topic.clone();
        for _ in &t.partitions {
            let Some(((topic, partition), result)) = results.next() else {
                break;
            };
            let exists = topic_exists(&topic);
            r.partition_result
                .push(partition_result(&topic, partition, result, exists));
        }
        out.push(r);
    }
    out
}

/// Every topic, each with the results of its partitions (those that needed no election are
/// not in `results`: Kafka leaves them out when asked for all).
pub(crate) fn all_results(
    results: Results,
    topics: impl Iterator<Item = String>,
) -> Vec<ReplicaElectionResult> {
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> =
        topics.map(|t| (t, Vec::new())).collect();
    for ((topic, partition), result) in results {
        let r = partition_result(&topic, partition, result, true);
        by_topic.entry(topic).or_default().push(r);
    }
    by_topic
        .into_iter()
        .map(|(topic, partition_result)| {
            let mut r = ReplicaElectionResult::default();
            r.topic = topic_name(&topic);
            r.partition_result = partition_result;
            r
        })
        .collect()
}

/// One partition's result, with Kafka's message for each error (none on success).
pub(crate) fn partition_result(
    topic: &str,
    partition: i32,
    result: Result<BrokerId, ResponseError>,
    topic_exists: bool,
) -> PartitionResult {
    let mut r = PartitionResult::default();
    r.partition_id = partition;
    // Null on success, as Kafka's ApiError.NONE (the generated default is "").
    r.error_message = None;
    if let Err(e) = result {
        r.error_code = e.code();
        r.error_message = message(match e {
            ResponseError::UnknownTopicOrPartition if topic_exists => {
                format!("No such partition as {topic}-{partition}")
            }
            ResponseError::UnknownTopicOrPartition => format!("No such topic as {topic}"),
            ResponseError::ElectionNotNeeded => {
                "Leader election not needed for topic partition.".into()
            }
            ResponseError::PreferredLeaderNotAvailable => {
                "The preferred leader was not available.".into()
            }
            ResponseError::EligibleLeadersNotAvailable => {
                "Eligible topic partition leaders are not available.".into()
            }
            ResponseError::ClusterAuthorizationFailed => "Cluster authorization failed.".into(),
            other => format!("{other:?}"),
        });
    }
    r
}

#[cfg(test)]
#[path = "elect_leaders_tests.rs"]
mod tests;

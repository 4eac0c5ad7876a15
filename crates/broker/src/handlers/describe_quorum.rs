//! DescribeQuorum (55): the metadata quorum's leader, epoch, high watermark and voters, as
//! `kafka-metadata-quorum describe` shows them.
//!
//! Only the quorum leader knows how far each voter's log is (it replicates to them). Kafka's
//! brokers therefore forward DescribeQuorum to the active controller (`KafkaApis`:
//! `forwardToController`), and a controller that does not lead answers NOT_LEADER_OR_FOLLOWER.
//! Here the leader (a combined broker and voter) answers from its own quorum state, listing
//! broker-only nodes (openraft learners) as observers, and any other broker, voter or observer,
//! forwards the request to the leader's client listener and passes its answer on. If the leader cannot be reached, this node answers with what it knows
//! (leader, epoch, voters; log ends and fetch times unknown: -1) rather than fail the tool.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_quorum_response::{PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_metadata::quorum::VoterStatus;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// Kafka's name for the metadata log's topic.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The client id of a forwarded DescribeQuorum: the receiver answers it itself, never forwards
/// it again (leadership may have moved on the way; one hop bounds the request).
const FORWARDED_CLIENT_ID: &str = "streamforge-describe-quorum-forward";
/// Bound on connecting to the leader and on its answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// A DescribeQuorum answer is a few hundred bytes per voter.
const FORWARD_RESPONSE_MAX_BYTES: usize = 1 << 20;

pub async fn handle_describe_quorum(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeQuorumRequest = req.decode()?;
    let mut resp = DescribeQuorumResponse::default();
    if !Access::of(&state, &req).cluster(Operation::Describe) {
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return Ok(Some(req.respond(&resp)?));
    }
    let asked_for_metadata = request.topics.len() == 1
        && request.topics[0].topic_name.0.as_str() == METADATA_TOPIC
        && request.topics[0].partitions.len() == 1
        && request.topics[0].partitions[0].partition_index == 0;
    if !asked_for_metadata {
        return Ok(Some(req.respond(&unknown_partitions(&request))?));
    }
    let (leader, _) = state.replicas.metadata().quorum_status();
    let leader_id = leader.leader.map(|id| id as i32);
    let forwarded = req.client_id.as_deref() == Some(FORWARDED_CLIENT_ID);
    if let Some(leader_id) = leader_id
        && leader_id != state.node_id()
        && !forwarded
    {
        match forward(&state, leader_id, &request, req.api_version).await {
            Ok(resp) => return Ok(Some(req.respond(&resp)?)),
            Err(error) => tracing::warn!(
                leader_id,
                %error,
                "DescribeQuorum: the quorum leader did not answer; answering with this node's view"
            ),
        }
    }
    Ok(Some(req.respond(&local_view(&state))?))
}

/// Kafka (`KafkaRaftClient.handleDescribeQuorumRequest`): every asked partition other than the
/// metadata log's gets UNKNOWN_TOPIC_OR_PARTITION.
fn unknown_partitions(request: &DescribeQuorumRequest) -> DescribeQuorumResponse {
    let mut resp = DescribeQuorumResponse::default();
    resp.topics = request
        .topics
        .iter()
        .map(|t| {
            let mut topic = TopicData::default();
            topic.topic_name = t.topic_name.clone();
            topic.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = PartitionData::default();
                    d.partition_index = p.partition_index;
                    d.error_code = ResponseError::UnknownTopicOrPartition.code();
                    d
                })
                .collect();
            topic
        })
        .collect();
    resp
}

/// Ask the quorum leader over its client listener (the one this broker's fetchers use), at the
/// client's version, and take its answer only when it is the leader's own.
async fn forward(
    state: &BrokerState,
    leader_id: i32,
    request: &DescribeQuorumRequest,
    version: i16,
) -> Result<DescribeQuorumResponse, String> {
    let peer = state
        .fetchers
        .peer(leader_id)
        .ok_or_else(|| format!("no address known for broker {leader_id}"))?;
    let mut conn = (state.fetchers.link())
        .connect(&peer, FORWARD_RESPONSE_MAX_BYTES, FORWARD_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?
        .with_client_id(FORWARDED_CLIENT_ID);
    let resp: DescribeQuorumResponse = conn
        .call(ApiKey::DescribeQuorum, version, request, FORWARD_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    if resp.error_code != 0 {
        return Err(format!("error code {}", resp.error_code));
    }
    let partition = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in the answer")?;
    if partition.error_code != 0 || partition.leader_id.0 != leader_id {
        return Err(format!(
            "answered by a node that does not lead (error {}, leader {})",
            partition.error_code, partition.leader_id.0
        ));
    }
    Ok(resp)
}

/// The quorum as this node knows it. The high watermark is the metadata offset this broker has
/// applied (the next offset, as Kafka counts it); a voter's log end is that minus its lag as the
/// leader reports it, or -1 when this node does not lead and so does not know.
fn local_view(state: &BrokerState) -> DescribeQuorumResponse {
    let (leader, voters) = state.replicas.metadata().quorum_status();
    let high_watermark = state.replicas.image().position().offset + 1;
    let now_ms = state.clock.now_ms();
    let me = state.node_id();
    let mut partition = PartitionData::default();
    partition.partition_index = 0;
    partition.leader_id = BrokerId(leader.leader.map_or(-1, |id| id as i32));
    partition.leader_epoch = leader.epoch;
    partition.high_watermark = high_watermark;
    let replica = |v: &VoterStatus| {
        let mut r = ReplicaState::default();
        r.replica_id = BrokerId(v.id as i32);
        r.log_end_offset = v
            .lag_entries
            .map_or(-1, |lag| (high_watermark - lag as i64).max(0));
        let caught_up = v.lag_entries == Some(0) || v.id as i32 == me;
        r.last_fetch_timestamp = if caught_up { now_ms } else { -1 };
        r.last_caught_up_timestamp = if caught_up { now_ms } else { -1 };
        r
    };
    partition.current_voters = voters.iter().map(replica).collect();
    // Broker-only nodes follow the log as learners (Kafka's observers).
    let observers = state.replicas.metadata().quorum_observers();
    partition.observers = observers.iter().map(replica).collect();
    let mut topic = TopicData::default();
    topic.topic_name = TopicName(StrBytes::from_static_str(METADATA_TOPIC));
    topic.partitions = vec![partition];
    let mut resp = DescribeQuorumResponse::default();
    resp.topics = vec![topic];
    resp
}

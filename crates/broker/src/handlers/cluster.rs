//! DescribeCluster (60): the brokers of the metadata image (fenced ones too from v2, when
//! asked: KIP-1073) and the active controller. DescribeQuorum (55): the metadata quorum's leader,
//! epoch, high watermark and voters, as `kafka-metadata-quorum describe` shows them.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_quorum_response::{PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, Resource};

/// DescribeCluster endpoint types (KIP-919): brokers = 1, controllers = 2.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

pub async fn handle_describe_cluster(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeClusterRequest = req.decode()?;
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = StrBytes::from_string(state.cluster_id.clone());
    resp.controller_id = BrokerId(crate::handlers::metadata::controller_id(&state));
    // Kafka: the bit field when asked for, and 0 without DESCRIBE on the cluster.
    let access = Access::of(&state, &req);
    resp.cluster_authorized_operations = if !request.include_cluster_authorized_operations {
        i32::MIN
    } else if access.quiet().cluster(Operation::Describe) {
        access.operations(&Resource::cluster())
    } else {
        0
    };
    resp.endpoint_type = ENDPOINT_TYPE_BROKERS;
    if req.api_version >= 1 && request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        // Kafka (`AuthHelper.computeDescribeClusterResponse`): asking a broker listener for
        // controllers is MISMATCHED_ENDPOINT_TYPE, any other type UNSUPPORTED_ENDPOINT_TYPE.
        resp.error_code = if request.endpoint_type == ENDPOINT_TYPE_CONTROLLER {
            ResponseError::MismatchedEndpointType.code()
        } else {
            ResponseError::UnsupportedEndpointType.code()
        };
        resp.error_message = message("only broker endpoints are served");
        resp.endpoint_type = request.endpoint_type;
        return Ok(Some(req.respond(&resp)?));
    }
    let image = state.replicas.image();
    let mut brokers: Vec<DescribeClusterBroker> =
        crate::handlers::metadata::live_brokers(&state, &image, req.listener)
            .into_iter()
            .map(|m| {
                let mut b = DescribeClusterBroker::default();
                b.broker_id = m.node_id;
                b.host = m.host;
                b.port = m.port;
                b.rack = m.rack;
                b
            })
            .collect();
    if request.include_fenced_brokers {
        brokers.extend(fenced_brokers(&state, &image, req.listener));
        brokers.sort_by_key(|b| b.broker_id.0);
    }
    resp.brokers = brokers;
    resp.error_code = 0;
    Ok(Some(req.respond(&resp)?))
}

/// Fenced brokers (registered, not heartbeating or shut down) on the request's listener, with
/// `is_fenced` set (DescribeCluster v2).
fn fenced_brokers(
    state: &BrokerState,
    image: &streamforge_metadata::MetadataImage,
    listener: usize,
) -> Vec<DescribeClusterBroker> {
    let name = state.security.endpoint(listener).protocol.name();
    image
        .brokers()
        .values()
        .filter(|b| b.fenced && b.id != state.node_id())
        .filter_map(|b| {
            let e = b.endpoints.iter().find(|e| e.name == name)?;
            let mut d = DescribeClusterBroker::default();
            d.broker_id = BrokerId(b.id);
            d.host = StrBytes::from_string(e.host.clone());
            d.port = i32::from(e.port);
            d.rack = b.rack.clone().map(StrBytes::from_string);
            d.is_fenced = true;
            Some(d)
        })
        .collect()
}

/// Kafka's name for the metadata log's topic.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// DescribeQuorum: the quorum as this node knows it. The high watermark is the metadata offset
/// this broker has applied (the next offset, as Kafka counts it); a voter's log end is that
/// minus its lag as the leader reports it, or -1 when this node does not lead and so does not
/// know. Kafka answers from the active controller (brokers forward the request); here every
/// broker is a voter in combined mode and answers with what its quorum member knows.
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
        // Kafka (`KafkaRaftClient.handleDescribeQuorumRequest`): every asked partition gets
        // UNKNOWN_TOPIC_OR_PARTITION.
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
        return Ok(Some(req.respond(&resp)?));
    }
    let metadata = state.replicas.metadata();
    let (leader, voters) = metadata.quorum_status();
    let high_watermark = state.replicas.image().position().offset + 1;
    let now_ms = state.clock.now_ms();
    let me = state.node_id();
    let mut partition = PartitionData::default();
    partition.partition_index = 0;
    partition.leader_id = BrokerId(leader.leader.map_or(-1, |id| id as i32));
    partition.leader_epoch = leader.epoch;
    partition.high_watermark = high_watermark;
    partition.current_voters = voters
        .iter()
        .map(|v| {
            let mut r = ReplicaState::default();
            r.replica_id = BrokerId(v.id as i32);
            r.log_end_offset = v
                .lag_entries
                .map_or(-1, |lag| (high_watermark - lag as i64).max(0));
            let caught_up = v.lag_entries == Some(0) || v.id as i32 == me;
            r.last_fetch_timestamp = if caught_up { now_ms } else { -1 };
            r.last_caught_up_timestamp = if caught_up { now_ms } else { -1 };
            r
        })
        .collect();
    let mut topic = TopicData::default();
    topic.topic_name = TopicName(StrBytes::from_static_str(METADATA_TOPIC));
    topic.partitions = vec![partition];
    resp.topics = vec![topic];
    resp.error_code = 0;
    Ok(Some(req.respond(&resp)?))
}

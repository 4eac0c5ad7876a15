//! ListOffsets (2), DeleteRecords (21) and OffsetForLeaderEpoch (23): offset queries and
//! moves of the log start offset.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::partition::OffsetSpec;
use crate::replica_manager::is_internal_topic;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

pub async fn handle_list_offsets(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: ListOffsetsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = ListOffsetsResponse::default();
    for t in request.topics {
        let allowed = access.topic(Operation::Describe, &t.name.0);
        let mut tr = ListOffsetsTopicResponse::default();
        for p in &t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            let found = match state
                .replicas
                .lookup_partition(&t.name.0, p.partition_index)
            {
                _ if !allowed => Err(ResponseError::TopicAuthorizationFailed.code()),
                Err(e) => Err(e.kafka_code()),
                Ok(part) => part
                    .list_offsets(
                        OffsetSpec::from_kafka(p.timestamp).with_isolation(request.isolation_level),
                        p.current_leader_epoch,
                    )
                    .await
                    .map_err(|e| e.kafka_code()),
            };
            match found {
                Ok(found) => {
                    pr.timestamp = found.timestamp;
                    pr.offset = found.offset;
                    if req.api_version >= 4 && found.offset >= 0 {
                        pr.leader_epoch = found.leader_epoch;
                    }
                }
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_delete_records(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DeleteRecordsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DeleteRecordsResponse::default();
    for t in request.topics {
        let allowed = access.topic(Operation::Delete, &t.name.0);
        let mut tr = DeleteRecordsTopicResult::default();
        for p in &t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            // Kafka's ReplicaManager refuses internal topics before looking the partition up:
            // deleting records of `__consumer_offsets` would destroy committed offsets.
            let result = match state
                .replicas
                .lookup_partition(&t.name.0, p.partition_index)
            {
                _ if !allowed => Err(ResponseError::TopicAuthorizationFailed.code()),
                _ if is_internal_topic(&t.name.0) => {
                    Err(ResponseError::InvalidTopicException.code())
                }
                Err(e) => Err(e.kafka_code()),
                Ok(part) => part
                    .delete_records(p.offset)
                    .await
                    .map_err(|e| e.kafka_code()),
            };
            match result {
                Ok(low) => pr.low_watermark = low,
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_offset_for_leader_epoch(
    state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: OffsetForLeaderEpochRequest = req.decode()?;
    // Kafka (KIP-320): CLUSTER_ACTION on the cluster (brokers), else DESCRIBE per topic.
    let access = Access::of(&state, &req);
    let cluster_action = access.quiet().cluster(Operation::ClusterAction);
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in request.topics {
        let allowed = cluster_action || access.topic(Operation::Describe, &t.topic.0);
        let mut tr = OffsetForLeaderTopicResult::default();
        for p in &t.partitions {
            let mut e = EpochEndOffset::default();
            e.partition = p.partition;
            e.leader_epoch = -1;
            e.end_offset = -1;
            match state.replicas.lookup_partition(&t.topic.0, p.partition) {
                _ if !allowed => e.error_code = ResponseError::TopicAuthorizationFailed.code(),
                Err(err) => e.error_code = err.kafka_code(),
                Ok(part) => {
                    match part.end_offset_for_epoch(p.leader_epoch, p.current_leader_epoch) {
                        Ok(Some((epoch, end))) => {
                            e.leader_epoch = epoch;
                            e.end_offset = end;
                        }
                        Ok(None) => {}
                        Err(err) => e.error_code = err.kafka_code(),
                    }
                }
            }
            tr.partitions.push(e);
        }
        tr.topic = t.topic;
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

//! ListOffsets (2), DeleteRecords (21) and OffsetForLeaderEpoch (23): offset queries and
//! moves of the log start offset.

use std::sync::Arc;

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
use streamforge_log::Log;
use streamforge_protocol::{ErrorCode, RequestFrame};

use crate::BrokerState;
use crate::replica_manager::LEADER_EPOCH;
use crate::router::HandlerResult;

/// ListOffsets special timestamps.
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
const LATEST_TIERED_TIMESTAMP: i64 = -5;
/// Kafka's FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH error codes.
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 76;
/// DeleteRecords: "up to the high watermark".
const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// Validate a client's view of the leader epoch (-1 = not checked).
fn check_leader_epoch(current_leader_epoch: i32) -> Result<(), i16> {
    if current_leader_epoch < 0 || current_leader_epoch == LEADER_EPOCH {
        Ok(())
    } else if current_leader_epoch < LEADER_EPOCH {
        Err(FENCED_LEADER_EPOCH)
    } else {
        Err(UNKNOWN_LEADER_EPOCH)
    }
}

pub async fn handle_list_offsets(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: ListOffsetsRequest = req.decode()?;
    let mut resp = ListOffsetsResponse::default();
    for t in request.topics {
        let mut tr = ListOffsetsTopicResponse::default();
        for p in &t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            let found = match state.replicas.partition(&t.name.0, p.partition_index) {
                None => Err(ErrorCode::UnknownTopicOrPartition.code()),
                Some(_) if check_leader_epoch(p.current_leader_epoch).is_err() => {
                    Err(check_leader_epoch(p.current_leader_epoch).unwrap_err())
                }
                Some(part) => {
                    let local = part
                        .with_log(|log| (list_offset(log, p.timestamp), log.log_start_offset()))
                        .map_err(|e| e.kafka_code());
                    match local {
                        Err(code) => Err(code),
                        Ok((found, local_start)) => {
                            crate::tiered::list_offset(
                                &state,
                                &t.name.0,
                                p.partition_index,
                                p.timestamp,
                                found,
                                local_start,
                            )
                            .await
                        }
                    }
                }
            };
            match found {
                Ok((timestamp, offset)) => {
                    pr.timestamp = timestamp;
                    pr.offset = offset;
                    if req.api_version >= 4 && offset >= 0 {
                        pr.leader_epoch = LEADER_EPOCH;
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

/// `(timestamp, offset)` for one ListOffsets query; offset -1 when nothing matches.
fn list_offset(log: &Log, timestamp: i64) -> Result<(i64, i64), i16> {
    match timestamp {
        LATEST_TIMESTAMP => Ok((-1, log.high_watermark())),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok((-1, log.log_start_offset())),
        LATEST_TIERED_TIMESTAMP => Ok((-1, -1)),
        MAX_TIMESTAMP => Ok(log
            .max_timestamp_and_offset()
            .map(|(offset, ts)| (ts, offset))
            .unwrap_or((-1, -1))),
        ts if ts < 0 => Err(ErrorCode::InvalidRequest.code()),
        ts => match log.offset_for_timestamp(ts) {
            Ok(Some((offset, found_ts))) => Ok((found_ts, offset)),
            Ok(None) => Ok((-1, -1)),
            Err(e) => Err(e.kafka_code()),
        },
    }
}

pub async fn handle_delete_records(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DeleteRecordsRequest = req.decode()?;
    let mut resp = DeleteRecordsResponse::default();
    for t in request.topics {
        let mut tr = DeleteRecordsTopicResult::default();
        for p in &t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            let result = match state.replicas.partition(&t.name.0, p.partition_index) {
                None => Err(ErrorCode::UnknownTopicOrPartition.code()),
                Some(part) => {
                    let r = part
                        .with_log(|log| {
                            let hw = log.high_watermark();
                            let target = if p.offset == DELETE_TO_HIGH_WATERMARK {
                                hw
                            } else {
                                p.offset
                            };
                            if target < 0 || target > hw {
                                return Err(ErrorCode::OffsetOutOfRange.code());
                            }
                            if target < log.log_start_offset() {
                                // Below the local log: only remote data moves (tiered).
                                return Ok((target, log.log_start_offset()));
                            }
                            log.delete_records_before(target)
                                .map(|start| (target, start))
                                .map_err(|e| e.kafka_code())
                        })
                        .map_err(|e| e.kafka_code())
                        .and_then(|r| r);
                    part.notify();
                    match r {
                        Ok((target, local_start)) => {
                            crate::tiered::delete_records(
                                &state,
                                &t.name.0,
                                p.partition_index,
                                target,
                                local_start,
                            )
                            .await
                        }
                        Err(code) => Err(code),
                    }
                }
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
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in request.topics {
        let mut tr = OffsetForLeaderTopicResult::default();
        for p in &t.partitions {
            let mut e = EpochEndOffset::default();
            e.partition = p.partition;
            e.leader_epoch = -1;
            e.end_offset = -1;
            match state.replicas.partition(&t.topic.0, p.partition) {
                None => e.error_code = ErrorCode::UnknownTopicOrPartition.code(),
                Some(part) => match check_leader_epoch(p.current_leader_epoch) {
                    Err(code) => e.error_code = code,
                    Ok(()) => match part.with_log(|log| {
                        log.end_offset_for_epoch(p.leader_epoch).or_else(|| {
                            // An empty log has no epochs yet: its end is the log end offset.
                            (log.latest_epoch().is_none() && p.leader_epoch >= LEADER_EPOCH)
                                .then(|| (LEADER_EPOCH, log.log_end_offset()))
                        })
                    }) {
                        Ok(Some((epoch, end))) => {
                            e.leader_epoch = epoch;
                            e.end_offset = end;
                        }
                        Ok(None) => {}
                        Err(err) => e.error_code = err.kafka_code(),
                    },
                },
            }
            tr.partitions.push(e);
        }
        tr.topic = t.topic;
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

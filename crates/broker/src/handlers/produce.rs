//! Produce (0): validate and append record batches as they arrived (no re-encoding; offsets
//! are patched in place by the log), acks 0/1/all.
//!
//! Copies: the frame is read once from the socket; each partition's batches are copied once
//! into a private mutable buffer (the log patches base offsets in place), then written.

use std::sync::Arc;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use streamforge_protocol::{ErrorCode, RequestFrame};

use crate::BrokerState;
use crate::handlers::message;
use crate::replica_manager::Partition;
use crate::router::{HandlerError, HandlerResult};

/// Smallest possible RecordBatch v2 (header without records).
const RECORD_BATCH_HEADER_BYTES: usize = 61;

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    if req.api_version < 3 {
        // v0-2 carry message sets v0/v1, which we do not store.
        return Err(HandlerError::Close(format!(
            "Produce v{} (message format v0/v1) is not supported; use v3+",
            req.api_version
        )));
    }
    let request: ProduceRequest = req.decode()?;
    let acks = request.acks;
    let acks_valid = matches!(acks, -1..=1);
    let mut any_error = false;
    let mut resp = ProduceResponse::default();
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        let mut t = TopicProduceResponse::default();
        t.name = topic.name;
        for p in topic.partition_data {
            let mut r = PartitionProduceResponse::default();
            r.index = p.index;
            r.base_offset = -1;
            r.log_append_time_ms = -1;
            r.log_start_offset = -1;
            let result = if !acks_valid {
                Err((ErrorCode::InvalidRequiredAcks.code(), None))
            } else {
                match state.replicas.partition(&name, p.index) {
                    None => Err((ErrorCode::UnknownTopicOrPartition.code(), None)),
                    Some(partition) => append(&partition, p.records.as_deref()),
                }
            };
            match result {
                Ok(info) => {
                    r.error_code = ErrorCode::None.code();
                    r.base_offset = info.first_offset;
                    r.log_append_time_ms = info.log_append_time_ms;
                    r.log_start_offset = info.log_start_offset;
                    metrics::counter!("streamforge_messages_in_total", "topic" => name.clone())
                        .increment(info.record_count as u64);
                    metrics::counter!("streamforge_bytes_in_total", "topic" => name.clone())
                        .increment(p.records.as_ref().map_or(0, |b| b.len()) as u64);
                }
                Err((code, msg)) => {
                    any_error = true;
                    tracing::debug!(topic = %name, partition = p.index, code, ?msg, "produce rejected");
                    r.error_code = code;
                    r.error_message = msg.map(message).unwrap_or_default();
                }
            }
            t.partition_responses.push(r);
        }
        resp.responses.push(t);
    }
    if acks == 0 {
        // No response for acks=0; on an error Kafka closes the connection so the producer
        // notices and refreshes its metadata.
        return if any_error {
            Err(HandlerError::Close("acks=0 produce failed".into()))
        } else {
            Ok(None)
        };
    }
    Ok(Some(req.respond(&resp)?))
}

fn append(
    partition: &Partition,
    records: Option<&[u8]>,
) -> Result<streamforge_log::AppendInfo, (i16, Option<String>)> {
    let records = records.unwrap_or_default();
    if records.len() < RECORD_BATCH_HEADER_BYTES {
        return Err((
            ErrorCode::InvalidRecord.code(),
            Some("produce request without a complete record batch".into()),
        ));
    }
    let mut batches = records.to_vec();
    let info = partition
        .append(&mut batches)
        .map_err(|e| (e.kafka_code(), Some(e.to_string())))?;
    // acks=all on one broker: the only in-sync replica (us) has it once appended; fsync
    // follows the log's flush policy (flush.messages / flush.ms), as in Kafka.
    Ok(info)
}

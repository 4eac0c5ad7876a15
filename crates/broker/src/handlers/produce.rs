//! Produce (0): validate and append record batches as they arrived (no re-encoding; offsets
//! are patched in place by the log), acks 0/1/all.
//!
//! Copies: the frame is read once from the socket. After decoding, every reference into the
//! frame is dropped so it can be taken back as a mutable buffer; the log patches base offsets
//! in place there and writes it. Only if the frame is still shared (it should not be) are a
//! partition's batches copied once into a private buffer.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use streamforge_protocol::{ErrorCode, RequestFrame};

use crate::BrokerState;
use crate::handlers::produce_txn::{TxnAppend, TxnProduce};
use crate::handlers::{message, topic_name};
use crate::partition::purgatory::must_wait;
use crate::partition::{Acks, AppendParams, Partition, PartitionError};
use crate::quota::ClientIdentity;
use crate::quota::entity::QuotaKey;
use crate::replica_manager::is_internal_topic;
use crate::router::{HandlerError, HandlerResult};
use crate::security::acl::{Access, Operation};
use crate::security::principal::ANONYMOUS;

/// Smallest possible RecordBatch v2 (header without records).
const RECORD_BATCH_HEADER_BYTES: usize = streamforge_protocol::batch::HEADER_BYTES;

/// One partition's data, located inside the request body.
struct PartitionData {
    index: i32,
    records: Option<Range<usize>>,
}

/// Why a partition's batches were refused: the Kafka error code, `error_message`, and (for a
/// record that failed validation) `record_errors` (ProduceResponse v8+).
pub(crate) struct Rejection {
    code: i16,
    message: Option<String>,
    record_errors: Vec<BatchIndexAndErrorMessage>,
}

impl Rejection {
    pub(crate) fn new(code: ErrorCode, message: Option<String>) -> Rejection {
        Rejection {
            code: code.code(),
            message,
            record_errors: Vec::new(),
        }
    }

    /// A refusal by code (a transaction coordinator's answer, translated).
    pub(crate) fn with_code(code: i16, message: Option<String>) -> Rejection {
        Rejection {
            code,
            message,
            record_errors: Vec::new(),
        }
    }

    pub(crate) fn from_partition(e: PartitionError) -> Rejection {
        let code = e.kafka_code();
        let mut record_errors = Vec::new();
        if let PartitionError::Log(streamforge_log::LogError::Records(r)) = &e
            && let Some(index) = r.record_index
        {
            let mut entry = BatchIndexAndErrorMessage::default();
            entry.batch_index = index;
            entry.batch_index_error_message = message(r.message.clone());
            record_errors.push(entry);
        }
        Rejection {
            code,
            message: Some(e.to_string()),
            record_errors,
        }
    }
}

/// A transactional partition whose producer's coordinator is another broker: where its answer
/// goes in the response, and its batches, appended once the coordinator has answered.
struct Remote {
    at: (usize, usize),
    topic: String,
    index: i32,
    records: Option<Range<usize>>,
    producer: (i64, i16),
    /// Taken before the check; the append carries it (a marker of the producer landing in
    /// between voids it).
    guard: Option<streamforge_log::VerificationGuard>,
}

/// Where the records sit: a mutable view of the body when we own it, else the shared one.
enum Body {
    Owned(BytesMut),
    Shared(Bytes),
}

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    if req.api_version < 3 {
        // v0-2 carry message sets v0/v1, which we do not store.
        return Err(HandlerError::Close(format!(
            "Produce v{} (message format v0/v1) is not supported; use v3+",
            req.api_version
        )));
    }
    // Time spent working (not waiting for the ISR): what request_percentage counts.
    let mut busy = crate::quota::BusyTime::start();
    // Kafka counts the whole request against producer_byte_rate.
    let request_bytes = req.body.len();
    let (user, client_id) = (req.principal.clone(), req.client_id.clone());
    // Destructuring the temporary drops its other fields (and their slices of the frame) now.
    let ProduceRequest {
        transactional_id,
        acks,
        timeout_ms,
        topic_data,
        ..
    } = req.decode::<ProduceRequest>()?;
    // Kafka: transactional batches need WRITE on the transactional id (else every partition
    // answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic.
    let access = Access::of(&state, &req);
    let txn_denied = transactional_id
        .as_ref()
        .is_some_and(|id| !access.transactional_id(Operation::Write, id));
    let txn = transactional_id.map(|t| crate::handlers::produce_txn::TxnProduce {
        transactional_id: t.0.to_string(),
        // Produce v12+ means transaction version 2: the partition joins the transaction.
        produce_version: req.api_version,
    });
    let append_acks = Acks::from_kafka(acks);
    let body_start = req.body.as_ptr() as usize;
    let body_len = req.body.len();
    let topics: Vec<(String, Vec<PartitionData>)> = topic_data
        .into_iter()
        .map(|t| {
            let parts = t
                .partition_data
                .into_iter()
                .map(|p| PartitionData {
                    index: p.index,
                    records: p.records.as_ref().map(|r| {
                        let start = r.as_ptr() as usize - body_start;
                        debug_assert!(start + r.len() <= body_len);
                        start..start + r.len()
                    }),
                })
                .collect();
            (t.name.0.to_string(), parts)
        })
        .collect();
    // Every slice of the frame is gone now (names were copied out), so this is normally ours.
    let (api_version, correlation_id, api_key) = (req.api_version, req.correlation_id, req.api_key);
    let mut body = match req.body.try_into_mut() {
        Ok(b) => Body::Owned(b),
        Err(b) => {
            tracing::debug!("produce frame still shared; copying its batches");
            Body::Shared(b)
        }
    };

    let mut resp = ProduceResponse::default();
    // acks=all appends whose ISR has not got them yet: (topic, partition) positions in the
    // response, and what to wait for.
    let mut delayed: Vec<(usize, usize)> = Vec::new();
    let mut delayed_waits: Vec<(Arc<Partition>, i64, i32)> = Vec::new();
    // Transactional partitions whose coordinator is another broker: checked there first.
    let mut remote: Vec<Remote> = Vec::new();
    for (name, parts) in topics {
        let mut t = TopicProduceResponse::default();
        t.name = topic_name(&name);
        let denied = if txn_denied {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        } else {
            (!access.topic(Operation::Write, &name)).then_some(ErrorCode::TopicAuthorizationFailed)
        };
        for p in parts {
            let mut r = PartitionProduceResponse::default();
            r.index = p.index;
            r.base_offset = -1;
            r.log_append_time_ms = -1;
            r.log_start_offset = -1;
            let at = (resp.responses.len(), t.partition_responses.len());
            let result = if let Some(code) = denied {
                Err(Rejection::new(code, None))
            } else if let Some(acks) = append_acks {
                let step = append_checked(
                    &state,
                    &name,
                    p.index,
                    &mut body,
                    p.records.clone(),
                    acks,
                    txn.as_ref(),
                );
                match step {
                    TxnAppend::Done(result) => result,
                    TxnAppend::Remote {
                        producer_id,
                        producer_epoch,
                        guard,
                    } => {
                        remote.push(Remote {
                            at,
                            topic: name.clone(),
                            index: p.index,
                            records: p.records,
                            producer: (producer_id, producer_epoch),
                            guard,
                        });
                        t.partition_responses.push(r);
                        continue;
                    }
                }
            } else {
                Err(Rejection::new(ErrorCode::InvalidRequiredAcks, None))
            };
            let records_bytes = p.records.as_ref().map_or(0, |r| r.len());
            let wait = settle(&state, &name, append_acks, result, &mut r, records_bytes);
            if let Some(wait) = wait {
                delayed.push(at);
                delayed_waits.push(wait);
            }
            t.partition_responses.push(r);
        }
        resp.responses.push(t);
    }
    if let (Some(txn), Some(acks)) = (txn.as_ref(), append_acks)
        && !remote.is_empty()
    {
        busy.pause();
        let answers = check_remote(&state, txn, &remote).await;
        busy.resume();
        for (d, code) in remote.into_iter().zip(answers) {
            let result = if code == 0 {
                append_remote_checked(&state, &d, &mut body, acks)
            } else {
                Err(txn.rejection(code))
            };
            let records_bytes = d.records.as_ref().map_or(0, |r| r.len());
            let r = &mut resp.responses[d.at.0].partition_responses[d.at.1];
            if let Some(wait) = settle(&state, &d.topic, append_acks, result, r, records_bytes) {
                delayed.push(d.at);
                delayed_waits.push(wait);
            }
        }
    }
    if let Body::Owned(buf) = body {
        state.frame_pool.give(buf);
    }
    if !delayed_waits.is_empty() {
        let timeout = std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        busy.pause();
        let results = state
            .produce_purgatory
            .wait_in_leadership(&delayed_waits, timeout)
            .await;
        busy.resume();
        for ((ti, pi), result) in delayed.into_iter().zip(results) {
            if let Err(e) = result {
                let r = &mut resp.responses[ti].partition_responses[pi];
                tracing::debug!(partition = r.index, error = %e, "acks=all produce not replicated");
                r.error_code = e.kafka_code();
                r.error_message = message(e.to_string());
                r.base_offset = -1;
            }
        }
    }
    let any_error = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .any(|r| r.error_code != 0);
    crate::request_metrics::count(
        "Produce",
        resp.responses
            .iter()
            .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code)),
        Some(crate::request_metrics::FAILED_PRODUCE),
    );
    let who = ClientIdentity {
        user: user.as_deref().unwrap_or(ANONYMOUS),
        client_id: client_id.as_deref().unwrap_or(""),
    };
    let throttle_ms = produce_throttle_ms(&state, who, request_bytes, acks, busy.total());
    if acks == 0 {
        // No response for acks=0; on an error Kafka closes the connection so the producer
        // notices and refreshes its metadata. A throttle travels in a frame with nothing to
        // send: the connection mutes itself once this request's memory is released.
        return if any_error {
            Err(HandlerError::Close("acks=0 produce failed".into()))
        } else {
            Ok(
                (throttle_ms > 0).then(|| streamforge_protocol::ResponseFrame {
                    throttle_ms,
                    ..Default::default()
                }),
            )
        };
    }
    resp.throttle_time_ms = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
    let mut frame =
        streamforge_protocol::frame::encode_response(api_key, api_version, correlation_id, &resp)?;
    frame.throttle_ms = throttle_ms;
    Ok(Some(frame))
}

/// Kafka's Produce quotas: the request's bytes against `producer_byte_rate`, and (not for
/// acks=0) the handler's busy time against `request_percentage`; the larger throttle applies.
fn produce_throttle_ms(
    state: &BrokerState,
    who: ClientIdentity<'_>,
    request_bytes: usize,
    acks: i16,
    busy: std::time::Duration,
) -> u64 {
    let bandwidth_ms = state
        .quotas
        .record(QuotaKey::ProducerByteRate, who, request_bytes as f64);
    let request_ms = if acks == 0 {
        0
    } else {
        state.quotas.record_request_time(who, busy)
    };
    bandwidth_ms.max(request_ms)
}

/// One partition's result into its response entry; an acks=all append whose ISR lacks it yet
/// is returned to be waited for.
fn settle(
    state: &BrokerState,
    name: &str,
    append_acks: Option<Acks>,
    result: Result<streamforge_log::AppendInfo, Rejection>,
    r: &mut PartitionProduceResponse,
    records_bytes: usize,
) -> Option<(Arc<Partition>, i64, i32)> {
    match result {
        Ok(info) => {
            r.error_code = 0;
            r.base_offset = info.first_offset;
            r.log_append_time_ms = info.log_append_time_ms;
            r.log_start_offset = info.log_start_offset;
            metrics::counter!("streamforge_messages_in_total", "topic" => name.to_string())
                .increment(info.record_count as u64);
            metrics::counter!("streamforge_bytes_in_total", "topic" => name.to_string())
                .increment(records_bytes as u64);
            if append_acks != Some(Acks::All) {
                return None;
            }
            let required = info.last_offset + 1;
            // Gone since the append (deleted, reassigned away): its replication cannot be
            // confirmed any more.
            let Some(partition) = state.replicas.partition(name, r.index) else {
                r.error_code = ErrorCode::NotLeaderOrFollower.code();
                r.base_offset = -1;
                return None;
            };
            let epoch = info.leader_epoch;
            must_wait(&partition, required, Some(epoch)).then_some((partition, required, epoch))
        }
        Err(rejection) => {
            let Rejection {
                code,
                message: msg,
                record_errors,
            } = rejection;
            tracing::debug!(topic = %name, partition = r.index, code, ?msg, "produce rejected");
            r.error_code = code;
            r.error_message = msg.map(message).unwrap_or_default();
            r.record_errors = record_errors;
            None
        }
    }
}

/// Each remote partition's answer from its producer's coordinator (one check per producer:
/// a request's batches normally share one).
async fn check_remote(state: &BrokerState, txn: &TxnProduce, remote: &[Remote]) -> Vec<i16> {
    let mut producers: Vec<(i64, i16)> = remote.iter().map(|d| d.producer).collect();
    producers.sort_unstable();
    producers.dedup();
    let mut codes: std::collections::HashMap<(String, i32), i16> = Default::default();
    for (pid, epoch) in producers {
        let partitions = remote
            .iter()
            .filter(|d| d.producer == (pid, epoch))
            .map(|d| (d.topic.clone(), d.index))
            .collect();
        let producer = (txn.transactional_id.as_str(), pid, epoch);
        let answer = check_retrying(state, producer, !txn.add_partitions(), partitions).await;
        codes.extend(answer);
    }
    remote
        .iter()
        .map(|d| {
            codes
                .get(&(d.topic.clone(), d.index))
                .copied()
                .unwrap_or(ErrorCode::UnknownServerError.code())
        })
        .collect()
}

/// First backoff of a CONCURRENT_TRANSACTIONS retry (Kafka's
/// `add.partitions.to.txn.retry.backoff.ms`), doubled up to the max.
const CONCURRENT_RETRY_BACKOFF_MS: u64 = 20;
const CONCURRENT_RETRY_BACKOFF_MS_MAX: u64 = 100;
/// How long a transaction version 2 add retries CONCURRENT_TRANSACTIONS (the previous
/// transaction's markers going out) before the producer is told.
const CONCURRENT_RETRY_MS_MAX: u64 = 5_000;

/// The coordinator's check of `partitions`; an add answered CONCURRENT_TRANSACTIONS is asked
/// again after a backoff (bounded), as Kafka's leader does for transaction version 2: the
/// client's next request (its EndTxn) must not meet the previous transaction still prepared.
async fn check_retrying(
    state: &BrokerState,
    producer: (&str, i64, i16),
    verify_only: bool,
    partitions: Vec<(String, i32)>,
) -> crate::txn_verify::Answer {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(CONCURRENT_RETRY_MS_MAX);
    let mut backoff_ms = CONCURRENT_RETRY_BACKOFF_MS;
    loop {
        let answer =
            crate::txn_verify_sender::check(state, producer, verify_only, partitions.clone()).await;
        let busy = ErrorCode::ConcurrentTransactions.code();
        if verify_only
            || !answer.iter().any(|(_, c)| *c == busy)
            || std::time::Instant::now() >= deadline
        {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(backoff_ms)).await;
        backoff_ms = (backoff_ms * 2).min(CONCURRENT_RETRY_BACKOFF_MS_MAX);
    }
}

/// Appends a remote partition's batches once its coordinator has answered 0.
fn append_remote_checked(
    state: &BrokerState,
    d: &Remote,
    body: &mut Body,
    acks: Acks,
) -> Result<streamforge_log::AppendInfo, Rejection> {
    let partition = state
        .replicas
        .lookup_partition(&d.topic, d.index)
        .map_err(|e| Rejection::new(e.response_error(), None))?;
    let mut shared = Vec::new();
    let batches = batches_of(body, d.records.clone().unwrap_or(0..0), &mut shared);
    let params = AppendParams { acks };
    let appended = partition.append_verified(batches, params, d.producer, d.guard);
    if let Err(PartitionError::TxnNotVerified) = &appended {
        // Worth a line: the client's transaction ended while its Produce was being checked.
        tracing::info!(topic = %d.topic, partition = d.index, producer_id = d.producer.0, producer_epoch = d.producer.1, "transactional Produce answered INVALID_TXN_STATE: a marker landed after the coordinator's check");
    }
    appended.map_err(Rejection::from_partition)
}

/// A partition's batches in the request body (copied to `shared` when the body is shared).
fn batches_of<'a>(
    body: &'a mut Body,
    range: Range<usize>,
    shared: &'a mut Vec<u8>,
) -> &'a mut [u8] {
    match body {
        Body::Owned(buf) => &mut buf[range],
        Body::Shared(bytes) => {
            *shared = bytes[range].to_vec();
            shared
        }
    }
}

/// Kafka's order of checks for one partition: internal topic, hosted partition, batches.
fn append_checked(
    state: &BrokerState,
    name: &str,
    index: i32,
    body: &mut Body,
    records: Option<Range<usize>>,
    acks: Acks,
    txn: Option<&TxnProduce>,
) -> TxnAppend {
    if is_internal_topic(name) {
        // Only the broker writes its internal topics (Kafka: InvalidTopicException).
        return TxnAppend::Done(Err(Rejection::new(
            ErrorCode::InvalidTopicException,
            Some(format!("Cannot append to internal topic {name}")),
        )));
    }
    let partition = match state.replicas.lookup_partition(name, index) {
        Err(e) => return TxnAppend::Done(Err(Rejection::new(e.response_error(), None))),
        Ok(partition) => partition,
    };
    let range = records.unwrap_or(0..0);
    if range.len() < RECORD_BATCH_HEADER_BYTES {
        return TxnAppend::Done(Err(Rejection::new(
            ErrorCode::InvalidRecord,
            Some("produce request without a complete record batch".into()),
        )));
    }
    let mut shared = Vec::new();
    let batches = batches_of(body, range, &mut shared);
    let params = AppendParams { acks };
    match txn {
        None => TxnAppend::Done(append(&partition, batches, params)),
        Some(txn) => crate::handlers::produce_txn::append(state, txn, &partition, batches, params),
    }
}

fn append(
    partition: &Partition,
    batches: &mut [u8],
    params: AppendParams,
) -> Result<streamforge_log::AppendInfo, Rejection> {
    let result = partition.append(batches, params);
    // acks=all on one broker: the only in-sync replica (us) has it once appended (the
    // partition decides); fsync follows the log's flush policy (flush.messages / flush.ms).
    result.map_err(Rejection::from_partition)
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    #[test]
    fn a_frozen_frame_comes_back_mutable_once_slices_are_dropped() {
        let mut m = BytesMut::new();
        m.put_slice(&[1u8; 128]);
        let frame = m.freeze();
        let mut body = frame.clone();
        bytes::Buf::advance(&mut body, 8);
        let slice = body.slice(10..20);
        drop(frame);
        let body = body.try_into_mut().unwrap_err();
        drop(slice);
        assert!(body.try_into_mut().is_ok());
    }
}

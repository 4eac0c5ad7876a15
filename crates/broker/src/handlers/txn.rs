//! Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
//! TxnOffsetCommit (28), answered by the transaction coordinator (`crate::txn_service`).
//! InitProducerId with a transactional id is in `producer.rs`.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, ProducerId, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use streamforge_coordinator::{OFFSETS_TOPIC, TxnOffset, partition_for_group};
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// Kafka: every transaction API needs WRITE on the transactional id.
fn tid_denied(access: &Access<'_>, tid: &str) -> Option<i16> {
    (!access.transactional_id(Operation::Write, tid))
        .then(|| ResponseError::TransactionalIdAuthorizationFailed.code())
}

fn code(r: Result<(), ResponseError>) -> i16 {
    r.err().map_or(0, |e| e.code())
}

/// KIP-588: versions below `first_version` (InitProducerId v4, AddPartitionsToTxn,
/// AddOffsetsToTxn and EndTxn v2) predate PRODUCER_FENCED, so Kafka answers them
/// INVALID_PRODUCER_EPOCH instead, which those clients handle as fencing (kafkajs, for one,
/// does not know code 90).
pub(crate) fn fenced_code(api_version: i16, first_version: i16, code: i16) -> i16 {
    if api_version < first_version && code == ResponseError::ProducerFenced.code() {
        ResponseError::InvalidProducerEpoch.code()
    } else {
        code
    }
}

/// The first AddPartitionsToTxn, AddOffsetsToTxn and EndTxn version that may answer
/// PRODUCER_FENCED (KIP-588).
const PRODUCER_FENCED_SINCE: i16 = 2;
/// The first InitProducerId version that may answer PRODUCER_FENCED (KIP-588).
pub(crate) const INIT_PRODUCER_ID_FENCED_SINCE: i16 = 4;

/// The `__consumer_offsets` partition of a group, as a transaction partition.
fn offsets_partition(state: &BrokerState, group: &str) -> (String, i32) {
    let n = state.groups.offsets_partitions();
    (OFFSETS_TOPIC.to_string(), partition_for_group(group, n))
}

/// One transaction of AddPartitionsToTxn: every partition's error. Unknown partitions get
/// UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka answers.
async fn add_one(
    state: &BrokerState,
    tid: &str,
    pid: i64,
    epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
    client: Option<&Access<'_>>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let wanted: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    // A client (v0-3) needs WRITE on the transactional id and on each topic (Kafka's codes);
    // the brokers' v4+ batches were checked for CLUSTER_ACTION by the caller.
    let tid_refused = client.and_then(|a| tid_denied(a, tid));
    let refused: Vec<Option<i16>> = wanted
        .iter()
        .map(|(t, p)| {
            if let Some(code) = tid_refused {
                Some(code)
            } else if client.is_some_and(|a| !a.topic(Operation::Write, t)) {
                Some(ResponseError::TopicAuthorizationFailed.code())
            } else if !state.replicas.partition_exists(t, *p) {
                Some(ResponseError::UnknownTopicOrPartition.code())
            } else {
                None
            }
        })
        .collect();
    let codes: Vec<i16> = if refused.iter().any(Option::is_some) {
        refused
            .iter()
            .map(|r| r.unwrap_or(ResponseError::OperationNotAttempted.code()))
            .collect()
    } else if verify_only {
        match state
            .txns
            .read_for(tid, |c| c.verify_partitions(tid, pid, epoch, &wanted))
        {
            Ok(codes) => codes,
            Err(e) => vec![e.code(); wanted.len()],
        }
    } else if client.is_some() {
        // A client's add waits out the previous transaction's markers (bounded); a broker's
        // (v4+, many ids in one request) is answered at once and retried by that broker.
        let r = state
            .txns
            .run_after_markers(state, tid, |c, now, out| {
                c.add_partitions(now, tid, pid, epoch, &wanted, out)
            })
            .await;
        let r = state.txns.replicated(state, tid, r).await;
        vec![code(r); wanted.len()]
    } else {
        let r = state.txns.run(state, tid, |c, now, out| {
            c.add_partitions(now, tid, pid, epoch, &wanted, out)
        });
        let r = state.txns.replicated(state, tid, r).await;
        vec![code(r); wanted.len()]
    };
    let mut results: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, p), c) in wanted.into_iter().zip(codes) {
        if results.last().is_none_or(|r| r.name.0.as_str() != topic) {
            let mut r = AddPartitionsToTxnTopicResult::default();
            r.name = crate::handlers::topic_name(&topic);
            results.push(r);
        }
        let mut pr = AddPartitionsToTxnPartitionResult::default();
        pr.partition_index = p;
        pr.partition_error_code = c;
        results
            .last_mut()
            .expect("pushed")
            .results_by_partition
            .push(pr);
    }
    results
}

pub async fn handle_add_partitions(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: AddPartitionsToTxnRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = AddPartitionsToTxnResponse::default();
    if req.api_version >= 4 && !access.cluster(Operation::ClusterAction) {
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return Ok(Some(req.respond(&resp)?));
    }
    if req.api_version <= 3 {
        resp.results_by_topic_v3_and_below = add_one(
            &state,
            &request.v3_and_below_transactional_id.0,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            &request.v3_and_below_topics,
            Some(&access),
        )
        .await;
        for pr in resp
            .results_by_topic_v3_and_below
            .iter_mut()
            .flat_map(|t| t.results_by_partition.iter_mut())
        {
            pr.partition_error_code = fenced_code(
                req.api_version,
                PRODUCER_FENCED_SINCE,
                pr.partition_error_code,
            );
        }
    } else {
        for t in &request.transactions {
            let mut r = AddPartitionsToTxnResult::default();
            r.transactional_id = t.transactional_id.clone();
            r.topic_results = add_one(
                &state,
                &t.transactional_id.0,
                t.producer_id.0,
                t.producer_epoch,
                t.verify_only,
                &t.topics,
                None,
            )
            .await;
            resp.results_by_transaction.push(r);
        }
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_add_offsets(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: AddOffsetsToTxnRequest = req.decode()?;
    let mut resp = AddOffsetsToTxnResponse::default();
    let access = Access::of(&state, &req);
    let denied = tid_denied(&access, &request.transactional_id.0).or_else(|| {
        (!access.group(Operation::Read, &request.group_id.0))
            .then(|| ResponseError::GroupAuthorizationFailed.code())
    });
    if let Some(code) = denied {
        resp.error_code = code;
        return Ok(Some(req.respond(&resp)?));
    }
    let partition = offsets_partition(&state, &request.group_id.0);
    let tid = &request.transactional_id.0;
    // Waits out the previous transaction's markers (bounded), as a client's AddPartitionsToTxn.
    let added = state
        .txns
        .run_after_markers(&state, tid, |c, now, out| {
            c.add_partitions(
                now,
                tid,
                request.producer_id.0,
                request.producer_epoch,
                std::slice::from_ref(&partition),
                out,
            )
        })
        .await;
    let result = code(state.txns.replicated(&state, tid, added).await);
    resp.error_code = fenced_code(req.api_version, PRODUCER_FENCED_SINCE, result);
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_end_txn(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: EndTxnRequest = req.decode()?;
    let mut resp = EndTxnResponse::default();
    if let Some(code) = tid_denied(&Access::of(&state, &req), &request.transactional_id.0) {
        resp.error_code = code;
        return Ok(Some(req.respond(&resp)?));
    }
    let started = std::time::Instant::now();
    // v5+ is transaction version 2 (KIP-890 part 2), as Kafka reads it: the epoch is bumped
    // and the answer carries the producer id and epoch of the next transaction.
    let epoch_bump = req.api_version >= 5;
    let tid = &request.transactional_id.0;
    let (pid, epoch) = (request.producer_id.0, request.producer_epoch);
    let st = state.clone();
    let mut new_id = || st.producer_ids.init_idempotent().ok().map(|(p, _)| p);
    let result = state.txns.run(&state, tid, |c, now, out| {
        if epoch_bump {
            c.end_txn_v2(now, tid, pid, epoch, request.committed, &mut new_id, out)
        } else {
            c.end_txn(now, tid, pid, epoch, request.committed, out)
        }
    });
    if result == Err(ResponseError::InvalidTxnState) {
        // Fatal for the client: say what the coordinator had, for whoever reads the log.
        let had = state.txns.read(|c| {
            c.get(tid)
                .map(|m| (m.state.name(), m.producer_id, m.producer_epoch))
        });
        tracing::info!(
            transactional_id = %tid,
            api_version = req.api_version,
            commit = request.committed,
            producer_id = pid,
            producer_epoch = epoch,
            coordinator = ?had,
            "EndTxn answered INVALID_TXN_STATE"
        );
    }
    // Answered once the Prepare record is in the ISR (as Kafka); the markers go on meanwhile.
    let result = state.txns.replicated(&state, tid, result).await;
    metrics::histogram!("streamforge_end_txn_seconds").record(started.elapsed().as_secs_f64());
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    if result.is_ok()
        && epoch_bump
        && let Some((p, e)) = state
            .txns
            .read(|c| c.get(tid).map(|m| (m.producer_id, m.producer_epoch)))
    {
        resp.producer_id = ProducerId(p);
        resp.producer_epoch = e;
    }
    resp.error_code = fenced_code(req.api_version, PRODUCER_FENCED_SINCE, code(result));
    Ok(Some(req.respond(&resp)?))
}

/// TxnOffsetCommit's check that the group's offsets partition is in the producer's open
/// transaction, then `hold` (the group's check, the append and the hold of the offsets) once
/// it passed: v5+ (transaction version 2, no AddOffsetsToTxn) adds it, as Kafka's group
/// coordinator does through AddPartitionsToTxn; older versions must have added it
/// (AddOffsetsToTxn) or get the producer's error (fenced, unknown, not open). When the
/// transaction's coordinator is this broker, that check and `hold` run under its lock: no
/// EndTxn, and so no marker, comes between them (Kafka's verification guard). When it is
/// another broker (this one coordinates the group), the check or the add goes there
/// (`txn_verify_sender::check`); a marker landing before the append is then refused by the
/// epoch it carries when bumped (a timeout's abort, fencing, transaction version 2). Returns
/// the error code, 0 when the offsets were held.
async fn offsets_in_txn(
    state: &BrokerState,
    api_version: i16,
    producer: (&str, i64, i16),
    partition: &(String, i32),
    hold: impl FnOnce() -> i16,
) -> i16 {
    let (tid, pid, epoch) = producer;
    let add = api_version >= 5;
    let mut hold = Some(hold);
    let local = if add {
        let added = state.txns.run(state, tid, |c, now, out| {
            c.add_partitions(now, tid, pid, epoch, std::slice::from_ref(partition), out)
        });
        state.txns.replicated(state, tid, added).await.map(|()| 0)
    } else {
        state.txns.read_for(tid, |c| {
            match c.verify_partitions(tid, pid, epoch, std::slice::from_ref(partition))[0] {
                0 => hold.take().map_or(0, |hold| hold()),
                code => code,
            }
        })
    };
    let checked = match local {
        Ok(code) => code,
        Err(ResponseError::NotCoordinator) => {
            let answer =
                crate::txn_verify_sender::check(state, producer, !add, vec![partition.clone()])
                    .await;
            let code = answer.first().map_or(0, |(_, c)| *c);
            crate::txn_verify::offset_commit_error(code)
        }
        Err(e) => e.code(),
    };
    match (checked, hold) {
        (0, Some(hold)) => hold(),
        (code, _) => code,
    }
}

/// KIP-447: TxnOffsetCommit v3+ carries the consumer's generation, member id and instance id,
/// checked against the group as Kafka does (a zombie whose consumer was rebalanced out is
/// fenced); v0-2 carry none and are not checked. Kafka checks the producer's transaction
/// first, then the group. Runs under the group coordinator's lock, which the offsets' append
/// and hold keep (`GroupService::txn_offset_commit`), so no rebalance comes between.
fn consumer_check(
    c: &streamforge_coordinator::GroupCoordinator,
    request: &TxnOffsetCommitRequest,
    api_version: i16,
) -> Result<(), i16> {
    let group = request.group_id.0.as_str();
    let (generation, member, instance) = if api_version >= 3 {
        (
            request.generation_id,
            request.member_id.as_str(),
            request.group_instance_id.as_ref().map(|i| i.as_str()),
        )
    } else {
        (-1, "", None)
    };
    c.validate_txn_offset_commit(group, generation, member, instance)
}

/// Holds a TxnOffsetCommit's offsets as Kafka's group coordinator stores them: the producer's
/// transactional batch in the group's `__consumer_offsets` partition, pending until the
/// transaction's marker there (`GroupService::txn_offset_commit`). 0 when held.
fn hold_txn_offsets(
    state: &BrokerState,
    request: &TxnOffsetCommitRequest,
    api_version: i16,
    guard: Option<streamforge_log::VerificationGuard>,
    offsets: Vec<TxnOffset>,
) -> i16 {
    let group = request.group_id.0.as_str();
    let producer = (request.producer_id.0, request.producer_epoch);
    let held = state
        .groups
        .txn_offset_commit(group, producer, guard, offsets, |c| {
            consumer_check(c, request, api_version)
        });
    held.err().unwrap_or(0)
}

/// The held offsets' batch in the ISR of the group's partition, as Kafka answers only then. A
/// timeout is COORDINATOR_NOT_AVAILABLE (retriable; a retry appends the same offsets again).
async fn replicated_txn_offsets(state: &BrokerState, group: &str) -> i16 {
    let timeout = std::time::Duration::from_millis(crate::group_service::OFFSET_COMMIT_TIMEOUT_MS);
    match state
        .groups
        .wait_replicated(&state.produce_purgatory, group, timeout)
        .await
    {
        Ok(()) => 0,
        Err(code) if code == ResponseError::RequestTimedOut.code() => {
            ResponseError::CoordinatorNotAvailable.code()
        }
        Err(code) => code,
    }
}

pub async fn handle_txn_offset_commit(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: TxnOffsetCommitRequest = req.decode()?;
    let group = request.group_id.0.to_string();
    // Kafka: WRITE on the transactional id, READ on the group, READ on each topic.
    let access = Access::of(&state, &req);
    let denied = tid_denied(&access, &request.transactional_id.0).or_else(|| {
        (!access.group(Operation::Read, &group))
            .then(|| ResponseError::GroupAuthorizationFailed.code())
    });
    let topic_denied = |name: &str| {
        (!access.topic(Operation::Read, name))
            .then(|| ResponseError::TopicAuthorizationFailed.code())
    };
    let partition = offsets_partition(&state, &group);
    let (tid, pid, epoch) = (
        &request.transactional_id.0,
        request.producer_id.0,
        request.producer_epoch,
    );
    let mut offsets = Vec::new();
    for t in request
        .topics
        .iter()
        .filter(|t| topic_denied(&t.name.0).is_none())
    {
        for p in &t.partitions {
            offsets.push(TxnOffset {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p
                    .committed_metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            });
        }
    }
    let error = if let Some(code) = denied {
        code
    } else if group.is_empty() {
        // Kafka's group coordinator refuses it before looking at the transaction.
        ResponseError::InvalidGroupId.code()
    } else if let Err(code) = state.groups.serves(&group) {
        // Sent to the group's coordinator (FindCoordinator for the group), as Kafka.
        code
    } else {
        let (tid, pid, epoch) = (tid.as_str(), pid, epoch);
        // The guard goes before the check: a marker of the producer landing on the group's
        // partition after it refuses the offsets' append (Kafka's verification guard).
        let epoch_bump = req.api_version >= 5;
        match state
            .groups
            .start_txn_offsets_verification(&group, (pid, epoch), epoch_bump)
        {
            Err(code) => code,
            Ok(guard) => {
                let hold = || hold_txn_offsets(&state, &request, req.api_version, guard, offsets);
                match offsets_in_txn(&state, req.api_version, (tid, pid, epoch), &partition, hold)
                    .await
                {
                    0 => replicated_txn_offsets(&state, &group).await,
                    code => code,
                }
            }
        }
    };
    let mut resp = TxnOffsetCommitResponse::default();
    for t in &request.topics {
        let mut tr = TxnOffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        let code = match denied {
            Some(code) => code,
            None => topic_denied(&t.name.0).unwrap_or(error),
        };
        for p in &t.partitions {
            let mut pr = TxnOffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = code;
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

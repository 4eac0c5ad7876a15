//! InitProducerId (22) and DescribeProducers (61): producer ids for idempotent producers, and a
//! view of each partition's producer state.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use streamforge_protocol::{ErrorCode, RequestFrame};

use crate::BrokerState;
use crate::handlers::message;
use crate::replica_manager::LookupError;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, ResourceType};

pub async fn handle_init_producer_id(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: InitProducerIdRequest = req.decode()?;
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    resp.ongoing_txn_producer_id = ProducerId(-1);
    resp.ongoing_txn_producer_epoch = -1;
    let ids = state.producer_ids.clone();
    let transactional_id = request.transactional_id.map(|t| t.0.to_string());
    let expected = (request.producer_id.0 >= 0 && request.producer_epoch >= 0)
        .then_some((request.producer_id.0, request.producer_epoch));
    let timeout_ms = request.transaction_timeout_ms;
    // Kafka: WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or
    // WRITE on any topic.
    let access = Access::of(&state, &req);
    let denied = match transactional_id.as_deref().filter(|t| !t.is_empty()) {
        Some(tid) => (!access.transactional_id(Operation::Write, tid))
            .then_some(ErrorCode::TransactionalIdAuthorizationFailed),
        None => (!access.quiet().cluster(Operation::IdempotentWrite)
            && !access.any_of_type(Operation::Write, ResourceType::Topic))
        .then_some(ErrorCode::ClusterAuthorizationFailed),
    };
    if let Some(code) = denied {
        resp.error_code = code.code();
        return Ok(Some(req.respond(&resp)?));
    }
    if let Some(tid) = transactional_id.as_deref().filter(|t| !t.is_empty()) {
        // The transaction coordinator: epoch bump, fencing, abort of an open transaction.
        let st = state.clone();
        let owned = tid.to_string();
        let result = tokio::task::spawn_blocking(move || {
            let tid = owned;
            st.txns.run(&st, &tid, |c, now, out| {
                let mut new_id = || st.producer_ids.init_idempotent().ok().map(|(p, _)| p);
                c.init_producer_id(now, &tid, timeout_ms, expected, &mut new_id, out)
            })
        })
        .await;
        let result = match result {
            Ok(r) => Ok(state.txns.replicated(&state, tid, r).await),
            Err(e) => Err(e),
        };
        match result {
            Ok(Ok((producer_id, epoch))) => {
                resp.producer_id = ProducerId(producer_id);
                resp.producer_epoch = epoch;
            }
            Ok(Err(e)) => {
                resp.error_code = super::txn::fenced_code(
                    req.api_version,
                    super::txn::INIT_PRODUCER_ID_FENCED_SINCE,
                    e.code(),
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "InitProducerId task failed");
                resp.error_code = ErrorCode::UnknownServerError.code();
            }
        }
        return Ok(Some(req.respond(&resp)?));
    }
    // Allocating a new block persists it (fsync): keep that off the async workers.
    let result = tokio::task::spawn_blocking(move || match transactional_id {
        None => ids.init_idempotent(),
        Some(tid) => ids.init_transactional(&tid, timeout_ms, expected),
    })
    .await;
    match result {
        Ok(Ok((producer_id, epoch))) => {
            resp.producer_id = ProducerId(producer_id);
            resp.producer_epoch = epoch;
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "InitProducerId rejected");
            resp.error_code = e.kafka_code();
        }
        Err(e) => {
            tracing::error!(error = %e, "InitProducerId task failed");
            resp.error_code = ErrorCode::UnknownServerError.code();
        }
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_describe_producers(
    state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: DescribeProducersRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DescribeProducersResponse::default();
    for t in request.topics {
        let mut tr = TopicResponse::default();
        // Kafka: READ on the topic.
        let allowed = access.topic(Operation::Read, &t.name.0);
        for &index in &t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = index;
            if !allowed {
                pr.error_code = ErrorCode::TopicAuthorizationFailed.code();
                tr.partitions.push(pr);
                continue;
            }
            let producers = state
                .replicas
                .lookup_partition(&t.name.0, index)
                .and_then(|p| p.producers().map_err(|_| LookupError::Unknown));
            match producers {
                Err(e) => {
                    pr.error_code = e.kafka_code();
                    pr.error_message = message(e.to_string());
                }
                Ok(entries) => {
                    for e in entries {
                        let mut ps = ProducerState::default();
                        ps.producer_id = ProducerId(e.producer_id);
                        ps.producer_epoch = i32::from(e.epoch);
                        ps.last_sequence = e.last_seq();
                        ps.last_timestamp = e.last_timestamp;
                        ps.coordinator_epoch = -1;
                        ps.current_txn_start_offset = e.current_txn_first_offset;
                        pr.active_producers.push(ps);
                    }
                }
            }
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    Ok(Some(req.respond(&resp)?))
}

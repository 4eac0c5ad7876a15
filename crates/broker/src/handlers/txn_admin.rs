//! DescribeTransactions (65) and ListTransactions (66): the transaction coordinator's view, as
//! `kafka-transactions.sh describe|list` and the `streamforge transactions` command show it.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_coordinator::txn::TxnState;
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};
use crate::util::now_ms;

/// Every state name ListTransactions may filter on.
const STATE_NAMES: [TxnState; 8] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
    TxnState::PrepareEpochFence,
];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub async fn handle_describe(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeTransactionsRequest = req.decode()?;
    // Kafka: DESCRIBE on the transactional id; only the topics the principal may DESCRIBE.
    let access = Access::of(&state, &req);
    let quiet = access.quiet();
    let mut resp = DescribeTransactionsResponse::default();
    state.txns.read(|c| {
        for tid in &request.transactional_ids {
            let mut ts = TransactionState::default();
            ts.transactional_id = tid.clone();
            ts.producer_id = ProducerId(-1);
            ts.producer_epoch = -1;
            ts.transaction_start_time_ms = -1;
            match c.get(&tid.0) {
                _ if !access.transactional_id(Operation::Describe, &tid.0) => {
                    ts.error_code = ResponseError::TransactionalIdAuthorizationFailed.code()
                }
                None => ts.error_code = ResponseError::TransactionalIdNotFound.code(),
                Some(m) => {
                    ts.transaction_state = s(m.state.name());
                    ts.transaction_timeout_ms = m.timeout_ms;
                    ts.transaction_start_time_ms = m.start_ms;
                    ts.producer_id = ProducerId(m.producer_id);
                    ts.producer_epoch = m.producer_epoch;
                    let visible = m
                        .partitions
                        .iter()
                        .filter(|(topic, _)| quiet.topic(Operation::Describe, topic));
                    for (topic, p) in visible {
                        if ts.topics.last().is_none_or(|t| t.topic.0.as_str() != topic) {
                            let mut t = TopicData::default();
                            t.topic = crate::handlers::topic_name(topic);
                            ts.topics.push(t);
                        }
                        ts.topics.last_mut().expect("pushed").partitions.push(*p);
                    }
                }
            }
            resp.transaction_states.push(ts);
        }
    });
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_list(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: ListTransactionsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = ListTransactionsResponse::default();
    let mut states = Vec::new();
    for f in &request.state_filters {
        match STATE_NAMES.iter().find(|st| st.name() == f.as_str()) {
            Some(st) => states.push(*st),
            None => resp.unknown_state_filters.push(f.clone()),
        }
    }
    let now = now_ms();
    state.txns.read(|c| {
        for (tid, m) in c.all() {
            let state_ok = states.is_empty() || states.contains(&m.state);
            let pid_ok = request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .contains(&ProducerId(m.producer_id));
            // v1: only transactions running longer than the filter (-1 = all).
            let age_ok = request.duration_filter < 0
                || (m.start_ms >= 0 && now - m.start_ms > request.duration_filter);
            let visible = access.quiet().transactional_id(Operation::Describe, tid);
            if state_ok && pid_ok && age_ok && visible {
                let mut l = ListedState::default();
                l.transactional_id = TransactionalId(s(tid));
                l.producer_id = ProducerId(m.producer_id);
                l.transaction_state = s(m.state.name());
                resp.transaction_states.push(l);
            }
        }
    });
    Ok(Some(req.respond(&resp)?))
}

/// WriteTxnMarkers (27): markers written on request, sent by transaction coordinators on other
/// brokers to this partition leader (`txn_marker_sender.rs`), and by `kafka-transactions.sh
/// abort` / `streamforge transactions abort` for a hanging transaction. A marker for a
/// `__consumer_offsets` partition commits (or drops) the transaction's pending offsets here.
/// Every partition's marker is appended first; the answer comes once all of them are in their
/// ISRs (one deadline for the request), each partition with its own error.
pub async fn handle_write_markers(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
    use streamforge_log::TxnMarker;
    use streamforge_protocol::control::ControlType;

    use crate::txn_marker_sender::{MarkerWrite, write_markers_here};

    let request: WriteTxnMarkersRequest = req.decode()?;
    // Kafka: CLUSTER_ACTION on the cluster (coordinators send it), else every partition
    // answers CLUSTER_AUTHORIZATION_FAILED.
    let allowed = Access::of(&state, &req).cluster(Operation::ClusterAction);
    let mut writes = Vec::new();
    for m in request.markers.iter().filter(|_| allowed) {
        let marker = TxnMarker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            kind: if m.transaction_result {
                ControlType::Commit
            } else {
                ControlType::Abort
            },
        };
        for t in &m.topics {
            for &index in &t.partition_indexes {
                writes.push(MarkerWrite {
                    topic: t.name.0.to_string(),
                    partition: index,
                    marker,
                    transactional_id: None,
                });
            }
        }
    }
    // An older coordinator epoch than the producer's last marker is
    // TRANSACTION_COORDINATOR_FENCED (the log checks).
    let mut codes = write_markers_here(&state, writes).await.into_iter();
    let mut resp = WriteTxnMarkersResponse::default();
    for m in &request.markers {
        let mut mr = WritableTxnMarkerResult::default();
        mr.producer_id = m.producer_id;
        for t in &m.topics {
            let mut tr = WritableTxnMarkerTopicResult::default();
            tr.name = t.name.clone();
            for &index in &t.partition_indexes {
                let mut pr = WritableTxnMarkerPartitionResult::default();
                pr.partition_index = index;
                pr.error_code = if allowed {
                    codes.next().expect("one answer per marker written")
                } else {
                    ResponseError::ClusterAuthorizationFailed.code()
                };
                tr.partitions.push(pr);
            }
            mr.topics.push(tr);
        }
        resp.markers.push(mr);
    }
    Ok(Some(req.respond(&resp)?))
}

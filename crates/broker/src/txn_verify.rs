//! Transaction checks a partition leader asks of another broker's transaction coordinator
//! (KIP-890; Kafka's `AddPartitionsToTxnManager`), as a sans-io state machine. The first
//! transactional batch of a producer on a partition led here, whose transactional id is
//! coordinated elsewhere, is checked with one AddPartitionsToTxn v4+ entry: `verify_only` for
//! transaction version 1 (Produce below v12, TxnOffsetCommit below v5: the partition must be in
//! the open transaction), adding the partition for transaction version 2. Checks are queued per
//! coordinator broker (bounded), one entry per transactional id, and taken as one request per
//! broker at a time; the answers come back per partition with Kafka's translations, for the
//! Produce (`produce_error`) and TxnOffsetCommit (`offset_commit_error`) paths. The I/O is
//! `txn_verify_sender.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

/// Checks queued for all coordinators at once (more are answered COORDINATOR_NOT_AVAILABLE at
/// once, which a producer retries).
pub const QUEUED_CHECKS_MAX: usize = 10_000;
/// Transactions in one AddPartitionsToTxn request (the rest wait for the next one).
pub const CHECKS_PER_REQUEST_MAX: usize = 500;
/// The first Produce version of transaction version 2 (the leader adds the partition).
pub const FIRST_ADD_PARTITION_PRODUCE_VERSION: i16 = 12;
/// The last Produce version before TRANSACTION_ABORTABLE (Kafka's `DEFAULT_ERROR` clients).
pub const LAST_DEFAULT_ERROR_PRODUCE_VERSION: i16 = 10;

/// One transaction's partitions to verify (or add), waited for under `ticket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ticket: u64,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Transaction version 1: verify only; version 2: add the partitions.
    pub verify_only: bool,
    pub partitions: Vec<(String, i32)>,
}

/// Every partition of a check with its error code (0: verified or added).
pub type Answer = Vec<((String, i32), i16)>;

/// The answer `code` for every partition of `check`.
pub fn answer_all(check: &Check, code: i16) -> Answer {
    check.partitions.iter().map(|p| (p.clone(), code)).collect()
}

#[derive(Default)]
pub struct CheckQueue {
    /// Per coordinator broker, the checks for its next request, by transactional id.
    queued: BTreeMap<i32, BTreeMap<String, Check>>,
    in_flight: BTreeSet<i32>,
    next_ticket: u64,
}

impl CheckQueue {
    /// A ticket for a new check.
    pub fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Checks queued (not in flight).
    pub fn queued(&self) -> usize {
        self.queued.values().map(BTreeMap::len).sum()
    }

    /// Queues `check` for `broker`. At most one check per transactional id waits per broker,
    /// as in Kafka: a newer epoch (or a retry under the same one) replaces a queued check,
    /// which is answered at once (INVALID_PRODUCER_EPOCH, or NETWORK_EXCEPTION for the same
    /// epoch: the producer retries); an older epoch than the queued one is answered
    /// INVALID_PRODUCER_EPOCH itself. Over the bound: COORDINATOR_NOT_AVAILABLE. The answers
    /// given now are returned.
    pub fn submit(&mut self, broker: i32, check: Check) -> Vec<(u64, Answer)> {
        let mut answered = Vec::new();
        let existing = self
            .queued
            .get(&broker)
            .and_then(|q| q.get(&check.transactional_id))
            .map(|c| c.producer_epoch);
        match existing {
            Some(epoch) if epoch > check.producer_epoch => {
                let code = ResponseError::InvalidProducerEpoch.code();
                answered.push((check.ticket, answer_all(&check, code)));
                return answered;
            }
            Some(epoch) => {
                let code = if epoch < check.producer_epoch {
                    ResponseError::InvalidProducerEpoch.code()
                } else {
                    ResponseError::NetworkException.code()
                };
                let old = self
                    .queued
                    .get_mut(&broker)
                    .and_then(|q| q.remove(&check.transactional_id))
                    .expect("queued");
                answered.push((old.ticket, answer_all(&old, code)));
            }
            None if self.queued() >= QUEUED_CHECKS_MAX => {
                let code = ResponseError::CoordinatorNotAvailable.code();
                answered.push((check.ticket, answer_all(&check, code)));
                return answered;
            }
            None => {}
        }
        self.queued
            .entry(broker)
            .or_default()
            .insert(check.transactional_id.clone(), check);
        answered
    }

    /// Brokers with queued checks and no request in flight.
    pub fn ready_brokers(&self) -> Vec<i32> {
        self.queued
            .iter()
            .filter(|(b, q)| !q.is_empty() && !self.in_flight.contains(b))
            .map(|(b, _)| *b)
            .collect()
    }

    /// The next request's checks for `broker` (one request in flight per broker).
    pub fn take_batch(&mut self, broker: i32) -> Vec<Check> {
        if self.in_flight.contains(&broker) {
            return Vec::new();
        }
        let Some(queue) = self.queued.get_mut(&broker) else {
            return Vec::new();
        };
        let ids: Vec<String> = queue.keys().take(CHECKS_PER_REQUEST_MAX).cloned().collect();
        let batch: Vec<Check> = ids.iter().filter_map(|id| queue.remove(id)).collect();
        if queue.is_empty() {
            self.queued.remove(&broker);
        }
        if !batch.is_empty() {
            self.in_flight.insert(broker);
        }
        batch
    }

    /// `broker`'s request is answered (or failed): its next one may go.
    pub fn done(&mut self, broker: i32) {
        self.in_flight.remove(&broker);
    }
}

/// The broker-to-broker AddPartitionsToTxn (v4+) of `checks`, partitions grouped by topic.
pub fn request_of(checks: &[Check]) -> AddPartitionsToTxnRequest {
    let mut request = AddPartitionsToTxnRequest::default();
    for c in checks {
        let mut t = AddPartitionsToTxnTransaction::default();
        t.transactional_id = TransactionalId(StrBytes::from_string(c.transactional_id.clone()));
        t.producer_id = ProducerId(c.producer_id);
        t.producer_epoch = c.producer_epoch;
        t.verify_only = c.verify_only;
        for (topic, partition) in &c.partitions {
            if t.topics.last().is_none_or(|x| x.name.0.as_str() != topic) {
                let mut x = AddPartitionsToTxnTopic::default();
                x.name = crate::handlers::topic_name(topic);
                t.topics.push(x);
            }
            t.topics
                .last_mut()
                .expect("pushed")
                .partitions
                .push(*partition);
        }
        request.transactions.push(t);
    }
    request
}

/// Each check's answer from the coordinator's response, with Kafka's translations: a whole
/// request refused for CLUSTER_AUTHORIZATION_FAILED is INVALID_TXN_STATE (the client must not
/// see it), PRODUCER_FENCED is INVALID_PRODUCER_EPOCH (what producers expect on a Produce). A
/// partition the response does not name is UNKNOWN_SERVER_ERROR.
pub fn answers_of(checks: &[Check], response: &AddPartitionsToTxnResponse) -> Vec<(u64, Answer)> {
    if response.error_code != 0 {
        let code = if response.error_code == ResponseError::ClusterAuthorizationFailed.code() {
            ResponseError::InvalidTxnState.code()
        } else {
            response.error_code
        };
        return checks
            .iter()
            .map(|c| (c.ticket, answer_all(c, code)))
            .collect();
    }
    let mut codes: HashMap<(&str, &str, i32), i16> = HashMap::new();
    for r in &response.results_by_transaction {
        for t in &r.topic_results {
            for p in &t.results_by_partition {
                codes.insert(
                    (
                        r.transactional_id.0.as_str(),
                        t.name.0.as_str(),
                        p.partition_index,
                    ),
                    p.partition_error_code,
                );
            }
        }
    }
    checks
        .iter()
        .map(|c| {
            let answer = c
                .partitions
                .iter()
                .map(|(topic, p)| {
                    let code = codes
                        .get(&(c.transactional_id.as_str(), topic.as_str(), *p))
                        .copied()
                        .unwrap_or(ResponseError::UnknownServerError.code());
                    let code = if code == ResponseError::ProducerFenced.code() {
                        ResponseError::InvalidProducerEpoch.code()
                    } else {
                        code
                    };
                    ((topic.clone(), *p), code)
                })
                .collect();
            (c.ticket, answer)
        })
        .collect()
}

/// A coordinator's answer as the Produce of `produce_version` reports it (Kafka's
/// `ReplicaManager`): INVALID_TXN_STATE says the partition was not added; errors an older
/// producer would not retry on a Produce become NOT_ENOUGH_REPLICAS (retried without a
/// metadata refresh): NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, and CONCURRENT_TRANSACTIONS below v12 (a
/// transaction version 2 producer retries it itself); TRANSACTION_ABORTABLE is
/// INVALID_TXN_STATE for clients that predate it; the rest pass through.
pub fn produce_error(code: i16, produce_version: i16) -> (i16, Option<String>) {
    let Some(error) = ResponseError::try_from_code(code) else {
        return (code, None);
    };
    let error = match error {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::TransactionAbortable
            if produce_version <= LAST_DEFAULT_ERROR_PRODUCE_VERSION =>
        {
            ResponseError::InvalidTxnState
        }
        e => e,
    };
    let retriable = match error {
        ResponseError::NetworkException
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator => true,
        ResponseError::ConcurrentTransactions => {
            produce_version < FIRST_ADD_PARTITION_PRODUCE_VERSION
        }
        _ => false,
    };
    if retriable {
        let message = format!(
            "Unable to verify the partition has been added to the transaction. Underlying error: {error:?}"
        );
        return (ResponseError::NotEnoughReplicas.code(), Some(message));
    }
    if error == ResponseError::InvalidTxnState {
        let message = "Partition was not added to the transaction".to_string();
        return (error.code(), Some(message));
    }
    (error.code(), None)
}

/// A coordinator's answer as TxnOffsetCommit reports it (Kafka's group coordinator): errors
/// of the round trip itself are COORDINATOR_NOT_AVAILABLE (the client looks the coordinator up
/// again and retries), PRODUCER_FENCED is INVALID_PRODUCER_EPOCH, the rest pass through.
pub fn offset_commit_error(code: i16) -> i16 {
    match ResponseError::try_from_code(code) {
        Some(
            ResponseError::NetworkException
            | ResponseError::NotEnoughReplicas
            | ResponseError::RequestTimedOut
            | ResponseError::UnknownTopicOrPartition,
        ) => ResponseError::CoordinatorNotAvailable.code(),
        Some(ResponseError::ProducerFenced) => ResponseError::InvalidProducerEpoch.code(),
        _ => code,
    }
}

#[cfg(test)]
#[path = "txn_verify_tests.rs"]
mod tests;

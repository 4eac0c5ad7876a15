//! The I/O of [`CheckQueue`]: a Produce (or TxnOffsetCommit) whose transactional id is
//! coordinated by another broker submits its check and waits for the answer (bounded); one
//! task sends the queued checks as one AddPartitionsToTxn (v5) request per coordinator broker
//! at a time over a kept connection (the fetcher's `LeaderConnection`, as the marker sender),
//! with peers' addresses from the metadata image, and hands each check its answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{AddPartitionsToTxnResponse, ApiKey};
use parking_lot::Mutex;
use streamforge_coordinator::txn::TRANSACTION_STATE_TOPIC;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinSet;

use crate::BrokerState;
use crate::fetcher::connection::LeaderConnection;
use crate::inter_broker::{InterBroker, PeerAddr};
use crate::txn_markers::Destination;
use crate::txn_verify::{Answer, Check, CheckQueue, answer_all, answers_of, request_of};

/// How long a Produce waits for its coordinator's answer before answering a retriable error
/// (below the clients' 30 s request timeout; the coordinator itself waits up to 5 s for its
/// `__transaction_state` ISR when it adds a partition).
const CHECK_TIMEOUT_MS: u64 = 10_000;
/// Bound of one AddPartitionsToTxn round trip.
const REQUEST_TIMEOUT_MS: u64 = 9_000;
/// Largest AddPartitionsToTxn response read.
const RESPONSE_BYTES_MAX: usize = 4 << 20;
/// AddPartitionsToTxn version sent: v5, as Kafka 4.x brokers send theirs (v4+ is the
/// brokers' batched form with `verify_only`).
const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 5;
/// The client id of these requests (the coordinator's logs can tell them from a client's).
const CLIENT_ID: &str = "streamforge-txn-verifier";

/// The queue, the waiting checks' answer channels, and the wake-up of the sender.
#[derive(Default)]
pub struct CheckChannel {
    queue: Mutex<(CheckQueue, HashMap<u64, oneshot::Sender<Answer>>)>,
    wake: Notify,
}

impl CheckChannel {
    fn answer(&self, answers: Vec<(u64, Answer)>) {
        let mut q = self.queue.lock();
        for (ticket, answer) in answers {
            if let Some(tx) = q.1.remove(&ticket) {
                // The waiter may have given up (timeout): nothing to tell.
                let _ = tx.send(answer);
            }
        }
    }
}

/// The broker leading `tid`'s `__transaction_state` partition in `image`.
fn coordinator_of(image: &streamforge_metadata::MetadataImage, tid: &str) -> Option<i32> {
    let topic = image.topic_by_name(TRANSACTION_STATE_TOPIC)?;
    let count = i32::try_from(topic.partitions.len())
        .ok()
        .filter(|n| *n > 0)?;
    let partition = streamforge_coordinator::partition_for_group(tid, count);
    match crate::txn_marker_sender::leader_of(image, TRANSACTION_STATE_TOPIC, partition) {
        Destination::Broker(id) => Some(id),
        Destination::NoLeader | Destination::Gone => None,
    }
}

/// Checks `partitions` of `tid`'s transaction with its coordinator (another broker): each
/// partition's error code, 0 when verified (`verify_only`) or added. The coordinator is found
/// in the metadata image; none, or this broker (its load is not served yet), is a retriable
/// error, as is no answer within [`CHECK_TIMEOUT_MS`].
pub(crate) async fn check(
    state: &BrokerState,
    producer: (&str, i64, i16),
    verify_only: bool,
    partitions: Vec<(String, i32)>,
) -> Answer {
    let (tid, producer_id, producer_epoch) = producer;
    let channel = &state.txns.checks;
    let mut check = Check {
        ticket: 0,
        transactional_id: tid.to_string(),
        producer_id,
        producer_epoch,
        verify_only,
        partitions,
    };
    let broker = match coordinator_of(&state.replicas.image(), tid) {
        None => return answer_all(&check, ResponseError::CoordinatorNotAvailable.code()),
        Some(b) if b == state.node_id() => return check_here(state, &check).await,
        Some(b) => b,
    };
    let (tx, rx) = oneshot::channel();
    let answered_now = {
        let mut q = channel.queue.lock();
        check.ticket = q.0.ticket();
        q.1.insert(check.ticket, tx);
        q.0.submit(broker, check.clone())
    };
    channel.answer(answered_now);
    channel.wake.notify_one();
    let timeout = Duration::from_millis(CHECK_TIMEOUT_MS);
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(answer)) => answer,
        _ => {
            channel.queue.lock().1.remove(&check.ticket);
            tracing::warn!(
                transactional_id = tid,
                broker,
                "no answer from the transaction coordinator in time"
            );
            answer_all(&check, ResponseError::NetworkException.code())
        }
    }
}

/// The check when this broker is the coordinator (a retry of CONCURRENT_TRANSACTIONS, or a
/// load not served yet): answered as the AddPartitionsToTxn v4+ handler answers it.
async fn check_here(state: &BrokerState, check: &Check) -> Answer {
    let (tid, pid, epoch) = (
        check.transactional_id.as_str(),
        check.producer_id,
        check.producer_epoch,
    );
    let code = if check.verify_only {
        match state.txns.read_for(tid, |c| {
            c.verify_partitions(tid, pid, epoch, &check.partitions)
        }) {
            Ok(codes) => {
                return check.partitions.iter().cloned().zip(codes).collect();
            }
            Err(e) => e.code(),
        }
    } else {
        let added = state.txns.run(state, tid, |c, now, out| {
            c.add_partitions(now, tid, pid, epoch, &check.partitions, out)
        });
        match state.txns.replicated(state, tid, added).await {
            Ok(()) => 0,
            // Served here no more, or not yet: retriable for the producer.
            Err(ResponseError::NotCoordinator) => ResponseError::CoordinatorLoadInProgress.code(),
            Err(e) => e.code(),
        }
    };
    answer_all(check, code)
}

/// One AddPartitionsToTxn request with `checks`; a connection failure answers them all
/// NETWORK_EXCEPTION (retriable for the client).
async fn send(
    link: Arc<InterBroker>,
    conn: &mut Option<LeaderConnection>,
    peer: Option<PeerAddr>,
    checks: &[Check],
) -> Vec<(u64, Answer)> {
    let network = |checks: &[Check]| {
        let code = ResponseError::NetworkException.code();
        checks
            .iter()
            .map(|c| (c.ticket, answer_all(c, code)))
            .collect()
    };
    let Some(peer) = peer else {
        return network(checks);
    };
    let addr = peer.addr;
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    if conn.is_none() {
        match link.connect(&peer, RESPONSE_BYTES_MAX, timeout).await {
            Ok(c) => *conn = Some(c.with_client_id(CLIENT_ID)),
            Err(e) => {
                tracing::warn!(%addr, error = %e, "connecting to a transaction coordinator failed");
                return network(checks);
            }
        }
    }
    let c = conn.as_mut().expect("connected");
    let request = request_of(checks);
    let answer: Result<AddPartitionsToTxnResponse, _> = c
        .call(
            ApiKey::AddPartitionsToTxn,
            ADD_PARTITIONS_TO_TXN_VERSION,
            &request,
            timeout,
        )
        .await;
    match answer {
        Ok(response) => answers_of(checks, &response),
        Err(e) => {
            tracing::warn!(%addr, error = %e, "AddPartitionsToTxn to the coordinator failed");
            *conn = None;
            network(checks)
        }
    }
}

/// One request's result: the coordinator broker and its connection to keep.
type Sent = (i32, Option<LeaderConnection>);

/// Sends queued checks until shutdown.
pub async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let channel = state.txns.checks.clone();
    let mut connections: HashMap<i32, Option<LeaderConnection>> = HashMap::new();
    let mut jobs: JoinSet<Sent> = JoinSet::new();
    loop {
        let batches: Vec<(i32, Vec<Check>)> = {
            let mut q = channel.queue.lock();
            let ready = q.0.ready_brokers();
            ready.into_iter().map(|b| (b, q.0.take_batch(b))).collect()
        };
        if !batches.is_empty() {
            let peers = crate::txn_marker_sender::peers(&state);
            for (broker, checks) in batches {
                let mut conn = connections.remove(&broker).flatten();
                let peer = peers.get(&broker).cloned();
                let link = state.fetchers.link().clone();
                let channel = channel.clone();
                jobs.spawn(async move {
                    let answers = send(link, &mut conn, peer, &checks).await;
                    channel.queue.lock().0.done(broker);
                    channel.answer(answers);
                    (broker, conn)
                });
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = channel.wake.notified() => {}
            Some(done) = jobs.join_next(), if !jobs.is_empty() => {
                if let Ok((broker, conn)) = done {
                    connections.insert(broker, conn);
                }
            }
        }
    }
}

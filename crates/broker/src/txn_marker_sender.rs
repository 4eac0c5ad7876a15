//! The I/O of [`MarkerQueue`]: one task routes queued markers to the partitions' current
//! leaders (from the metadata image), sends one WriteTxnMarkers request per destination broker
//! at a time over a kept connection (the fetcher's `LeaderConnection`), writes markers of
//! partitions led here in-process, and hands finished transactions back to the coordinator,
//! which appends their Complete records. A marker counts as written once the leader has it in
//! its ISR (the WriteTxnMarkers handler waits for replication, as Kafka appends markers with
//! acks=all).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use parking_lot::Mutex;
use streamforge_log::TxnMarker;
use streamforge_protocol::control::ControlType;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::BrokerState;
use crate::fetcher::connection::LeaderConnection;
use crate::inter_broker::{InterBroker, PeerAddr};
use crate::partition::Partition;
use crate::partition::purgatory::ProducePurgatory;
use crate::txn_markers::{Destination, Marker, MarkerQueue, Outcome};

/// How often unrouted markers are routed again (a leader may have been elected meanwhile).
const RETRY_INTERVAL_MS: u64 = 100;
/// Bound of one WriteTxnMarkers round trip (the leader waits up to
/// [`MARKER_REPLICATION_TIMEOUT_MS`] for its ISR).
const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// How long a leader waits for its ISR to have a marker before answering a retriable error.
pub const MARKER_REPLICATION_TIMEOUT_MS: u64 = 10_000;
/// Largest WriteTxnMarkers response read.
const RESPONSE_BYTES_MAX: usize = 4 << 20;
/// WriteTxnMarkers version sent (flexible, as Kafka 4.x brokers send).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// The queue and the wake-up of its sender.
#[derive(Default)]
pub struct MarkerChannel {
    pub(crate) queue: Mutex<MarkerQueue>,
    wake: Notify,
}

impl MarkerChannel {
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Where `topic`-`partition` is led now, per the image.
pub(crate) fn leader_of(
    image: &streamforge_metadata::MetadataImage,
    topic: &str,
    partition: i32,
) -> Destination {
    let Some(t) = image.topic_by_name(topic) else {
        return Destination::Gone;
    };
    match t.partitions.get(&partition) {
        None => Destination::Gone,
        Some(p) if p.leader < 0 || !image.is_unfenced(p.leader) => Destination::NoLeader,
        Some(p) => Destination::Broker(p.leader),
    }
}

fn marker_of(m: &Marker) -> TxnMarker {
    TxnMarker {
        producer_id: m.txn.producer_id,
        producer_epoch: m.txn.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        kind: if m.txn.commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        },
    }
}

/// What a partition's error answer means for its marker.
pub(crate) fn outcome_of(code: i16) -> Outcome {
    match ResponseError::try_from_code(code) {
        None if code == 0 => Outcome::Written,
        Some(ResponseError::TransactionCoordinatorFenced | ResponseError::InvalidProducerEpoch) => {
            Outcome::Fenced
        }
        // Leadership moved, the ISR was short, the topic is being created or deleted: route
        // again from a newer image (a deleted topic shows there as gone).
        _ => Outcome::Retry,
    }
}

/// Writes `markers` (all led here) in-process: every marker appended, then one wait for all
/// their ISRs.
async fn write_here(state: &Arc<BrokerState>, markers: Vec<Marker>) -> Vec<(Marker, Outcome)> {
    let writes: Vec<MarkerWrite> = markers
        .iter()
        .map(|m| MarkerWrite {
            topic: m.topic.clone(),
            partition: m.partition,
            marker: marker_of(m),
            transactional_id: Some(m.txn.transactional_id.clone()),
        })
        .collect();
    let codes = write_markers_here(state, writes).await;
    markers
        .into_iter()
        .zip(codes)
        .map(|(m, code)| (m, outcome_of(code)))
        .collect()
}

/// One marker to write on a partition led here.
pub(crate) struct MarkerWrite {
    pub topic: String,
    pub partition: i32,
    pub marker: TxnMarker,
    /// The transaction's id when the coordinator is this broker (its durable pending offsets).
    pub transactional_id: Option<String>,
}

/// Markers on partitions led here, answered with Kafka's error code per marker, in order: a
/// data partition gets the control batch, a `__consumer_offsets` partition makes the
/// transaction's pending offsets committed (COMMIT) or drops them (ABORT). Every marker is
/// appended first, then all of them wait for their ISRs together, under one deadline
/// ([`MARKER_REPLICATION_TIMEOUT_MS`]) in the produce purgatory, as Kafka appends a
/// WriteTxnMarkers request's markers with acks=all in one go: the answer comes when the slowest
/// partition's followers have its marker, not after each partition's wait in turn.
pub(crate) async fn write_markers_here(
    state: &Arc<BrokerState>,
    writes: Vec<MarkerWrite>,
) -> Vec<i16> {
    let mut appended = append_markers(writes, |topic, index| {
        state
            .replicas
            .lookup_partition(topic, index)
            .map_err(|e| e.kafka_code())
    });
    let offsets = std::mem::take(&mut appended.offsets);
    if !offsets.is_empty() {
        let indexes: Vec<usize> = offsets.iter().map(|(i, ..)| *i).collect();
        let st = state.clone();
        let done = tokio::task::spawn_blocking(move || {
            offsets
                .into_iter()
                .map(|(i, partition, marker, tid)| {
                    (i, write_offsets_marker(&st, partition, marker, tid))
                })
                .collect::<Vec<_>>()
        })
        .await;
        match done {
            Ok(results) => {
                for (i, written) in results {
                    match written {
                        Ok(wait) => {
                            appended.waits.push(wait);
                            appended.waiting.push(i);
                        }
                        Err(code) => appended.codes[i] = code,
                    }
                }
            }
            // Which ones ran is unknown: each is answered retriable (a second marker of the
            // same outcome finds its offsets gone and does nothing).
            Err(e) => {
                tracing::error!(error = %e, "writing `__consumer_offsets` markers failed");
                for i in indexes {
                    appended.codes[i] = ResponseError::CoordinatorLoadInProgress.code();
                }
            }
        }
    }
    let timeout = Duration::from_millis(MARKER_REPLICATION_TIMEOUT_MS);
    appended.wait(&state.produce_purgatory, timeout).await
}

/// A marker on `__consumer_offsets` partition `index` led here: offsets an older data dir
/// held in `__transaction_state` are completed first, then the marker is written through the
/// group coordinator, which commits or drops the transaction's offsets. Returns what the ISR
/// must reach, or the code to answer.
fn write_offsets_marker(
    state: &Arc<BrokerState>,
    index: i32,
    marker: TxnMarker,
    tid: Option<String>,
) -> Result<(Arc<Partition>, i64), i16> {
    if !state
        .txns
        .complete_offsets_here(state, tid.as_deref(), marker, index)
    {
        return Err(ResponseError::CoordinatorLoadInProgress.code());
    }
    let partition = state
        .replicas
        .lookup_partition(streamforge_coordinator::OFFSETS_TOPIC, index)
        .map_err(|e| e.kafka_code())?;
    let info = state
        .groups
        .write_txn_marker(&partition, marker)
        .map_err(|e| e.kafka_code())?;
    Ok((partition, info.last_offset + 1))
}

/// Markers appended, before any wait: each marker's code so far, the (partition, offset) its
/// ISR must reach, and the `__consumer_offsets` markers left to the group side.
pub(crate) struct Appended {
    codes: Vec<i16>,
    waits: Vec<(Arc<Partition>, i64)>,
    /// Which marker each entry of `waits` is.
    waiting: Vec<usize>,
    offsets: Vec<(usize, i32, TxnMarker, Option<String>)>,
}

/// Appends every data partition's marker (`lookup` finds the partition led here, or the error
/// code to answer) and sets the `__consumer_offsets` ones aside.
pub(crate) fn append_markers(
    writes: Vec<MarkerWrite>,
    lookup: impl Fn(&str, i32) -> Result<Arc<Partition>, i16>,
) -> Appended {
    let mut out = Appended {
        codes: vec![0; writes.len()],
        waits: Vec::new(),
        waiting: Vec::new(),
        offsets: Vec::new(),
    };
    for (i, w) in writes.into_iter().enumerate() {
        if w.topic == streamforge_coordinator::OFFSETS_TOPIC {
            out.offsets
                .push((i, w.partition, w.marker, w.transactional_id));
            continue;
        }
        let written = lookup(&w.topic, w.partition).and_then(|p| {
            p.write_txn_marker(w.marker)
                .map(|info| (p, info))
                .map_err(|e| e.kafka_code())
        });
        match written {
            Ok((p, info)) => {
                out.waits.push((p, info.last_offset + 1));
                out.waiting.push(i);
            }
            Err(code) => out.codes[i] = code,
        }
    }
    out
}

impl Appended {
    /// Waits for every appended marker's ISR at once, `timeout` for all of them; each marker
    /// not replicated in time answers its own error (REQUEST_TIMED_OUT, NOT_LEADER...).
    pub(crate) async fn wait(self, purgatory: &ProducePurgatory, timeout: Duration) -> Vec<i16> {
        let mut codes = self.codes;
        if self.waits.is_empty() {
            return codes;
        }
        let waited = purgatory.wait(&self.waits, timeout).await;
        assert_eq!(waited.len(), self.waiting.len(), "one result per wait");
        for (i, result) in self.waiting.into_iter().zip(waited) {
            if let Err(e) = result {
                codes[i] = e.kafka_code();
            }
        }
        codes
    }
}

/// One WriteTxnMarkers request to `addr` with `markers`; a connection error retries them all.
async fn send_remote(
    link: Arc<InterBroker>,
    conn: &mut Option<LeaderConnection>,
    peer: Option<PeerAddr>,
    markers: Vec<Marker>,
) -> Vec<(Marker, Outcome)> {
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    let retry_all =
        |markers: Vec<Marker>| markers.into_iter().map(|m| (m, Outcome::Retry)).collect();
    let Some(peer) = peer else {
        return retry_all(markers);
    };
    let addr = peer.addr;
    if conn.is_none() {
        match link.connect(&peer, RESPONSE_BYTES_MAX, timeout).await {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                tracing::warn!(%addr, error = %e, "connecting to send transaction markers failed");
                return retry_all(markers);
            }
        }
    }
    let request = request_of(&markers);
    let c = conn.as_mut().expect("connected");
    let answer: Result<WriteTxnMarkersResponse, _> = c
        .call(
            ApiKey::WriteTxnMarkers,
            WRITE_TXN_MARKERS_VERSION,
            &request,
            timeout,
        )
        .await;
    let response = match answer {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "WriteTxnMarkers failed; retrying");
            *conn = None;
            return retry_all(markers);
        }
    };
    let mut codes: HashMap<(i64, String, i32), i16> = HashMap::new();
    for r in &response.markers {
        for t in &r.topics {
            for p in &t.partitions {
                codes.insert(
                    (r.producer_id.0, t.name.0.to_string(), p.partition_index),
                    p.error_code,
                );
            }
        }
    }
    markers
        .into_iter()
        .map(|m| {
            let code = codes
                .get(&(m.txn.producer_id, m.topic.clone(), m.partition))
                .copied()
                .unwrap_or(ResponseError::UnknownServerError.code());
            let outcome = outcome_of(code);
            if code != 0 {
                tracing::debug!(topic = %m.topic, partition = m.partition, code, "marker refused");
            }
            (m, outcome)
        })
        .collect()
}

/// One WriteTxnMarkers entry per transaction, its partitions grouped by topic.
fn request_of(markers: &[Marker]) -> WriteTxnMarkersRequest {
    let mut request = WriteTxnMarkersRequest::default();
    for m in markers {
        let same = |w: &WritableTxnMarker| {
            w.producer_id.0 == m.txn.producer_id
                && w.producer_epoch == m.txn.producer_epoch
                && w.transaction_result == m.txn.commit
                && w.coordinator_epoch == m.coordinator_epoch
        };
        if !request.markers.last().is_some_and(same) {
            let mut w = WritableTxnMarker::default();
            w.producer_id = ProducerId(m.txn.producer_id);
            w.producer_epoch = m.txn.producer_epoch;
            w.transaction_result = m.txn.commit;
            w.coordinator_epoch = m.coordinator_epoch;
            request.markers.push(w);
        }
        let w = request.markers.last_mut().expect("pushed");
        if w.topics.last().is_none_or(|t| t.name.0.as_str() != m.topic) {
            let mut t = WritableTxnMarkerTopic::default();
            t.name = crate::handlers::topic_name(&m.topic);
            w.topics.push(t);
        }
        w.topics
            .last_mut()
            .expect("pushed")
            .partition_indexes
            .push(m.partition);
    }
    request
}

/// Other brokers' addresses in `image`, on the inter-broker listener (as the fetchers
/// connect).
fn peers_in(
    image: &streamforge_metadata::MetadataImage,
    state: &BrokerState,
) -> HashMap<i32, PeerAddr> {
    let listener = state.fetchers.link().listener_name();
    crate::replication_wiring::peer_addresses(image, listener, state.node_id()).reachable
}

/// Other brokers' addresses in the current metadata image.
pub(crate) fn peers(state: &BrokerState) -> HashMap<i32, PeerAddr> {
    peers_in(&state.replicas.image(), state)
}

/// One request's answer: the destination, its connection to keep, each marker's outcome.
type Answered = (i32, Option<LeaderConnection>, Vec<(Marker, Outcome)>);

/// Sends queued markers until shutdown.
pub async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let channel = state.txns.markers.clone();
    let me = state.node_id();
    let mut connections: HashMap<i32, Option<LeaderConnection>> = HashMap::new();
    // Brokers whose last request asked for a retry wait RETRY_INTERVAL_MS before the next.
    let mut backoff: HashMap<i32, Instant> = HashMap::new();
    let mut jobs: JoinSet<Answered> = JoinSet::new();
    loop {
        let image = state.replicas.image();
        let now = Instant::now();
        backoff.retain(|_, until| *until > now);
        let batches: Vec<(i32, Vec<Marker>)> = {
            let mut q = channel.queue.lock();
            q.route(|topic, p| leader_of(&image, topic, p));
            metrics::gauge!("streamforge_txn_markers_waiting").set(q.waiting() as f64);
            let ready = q.ready_brokers();
            ready
                .into_iter()
                .filter(|b| !backoff.contains_key(b))
                .map(|b| (b, q.take_batch(b)))
                .collect()
        };
        let peers = peers_in(&image, &state);
        for (broker, markers) in batches {
            if markers.is_empty() {
                continue;
            }
            if broker == me {
                let st = state.clone();
                jobs.spawn(async move { (broker, None, write_here(&st, markers).await) });
                continue;
            }
            let mut conn = connections.remove(&broker).flatten();
            let peer = peers.get(&broker).cloned();
            let link = state.fetchers.link().clone();
            jobs.spawn(async move {
                let results = send_remote(link, &mut conn, peer, markers).await;
                (broker, conn, results)
            });
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = channel.wake.notified() => {}
            Some(done) = jobs.join_next(), if !jobs.is_empty() => {
                if let Ok((broker, conn, results)) = done {
                    tracing::debug!(broker, markers = results.len(), outcomes = ?results.iter().map(|(_, o)| *o).collect::<Vec<_>>(), "transaction markers answered");
                    if broker != me {
                        connections.insert(broker, conn);
                    }
                    if results.iter().any(|(_, o)| *o == Outcome::Retry) {
                        let retry = Duration::from_millis(RETRY_INTERVAL_MS);
                        backoff.insert(broker, Instant::now() + retry);
                    }
                    channel.queue.lock().done(broker, results);
                }
                complete_finished(&state).await;
            }
            _ = tokio::time::sleep(Duration::from_millis(RETRY_INTERVAL_MS)) => {}
        }
    }
}

/// Appends the Complete record of every transaction whose markers are all written.
async fn complete_finished(state: &Arc<BrokerState>) {
    let finished = state.txns.markers.queue.lock().take_finished();
    if finished.is_empty() {
        return;
    }
    let st = state.clone();
    let done = tokio::task::spawn_blocking(move || st.txns.markers_finished(&st, finished)).await;
    if let Err(e) = done {
        tracing::error!(error = %e, "completing transactions failed");
    }
}

#[cfg(test)]
#[path = "txn_marker_sender_tests.rs"]
mod tests;

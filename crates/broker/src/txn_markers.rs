//! The markers of prepared transactions on their way to partition leaders (Kafka's
//! `TransactionMarkerChannelManager`), as a sans-io state machine: transactions are submitted
//! with their partitions, each partition is routed to its current leader (the caller resolves
//! leaders from the metadata image), queued per destination broker (bounded), taken in batches
//! for one WriteTxnMarkers request per broker at a time, and reported back as written, to retry
//! (routed again: the leader may have moved), gone (the topic was deleted) or fenced (a newer
//! coordinator owns the producer). A transaction is finished when every partition is written
//! or gone; the service then appends its Complete record. The I/O is `txn_marker_sender.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Transactions whose markers are outstanding at once (a named bound: more wait for the
/// coordinator's next tick, which submits prepared transactions again).
pub const PENDING_TXNS_MAX: usize = 10_000;
/// Markers queued for one destination broker (more stay unrouted until the queue drains).
pub const QUEUE_PER_BROKER_MAX: usize = 10_000;
/// Markers in one WriteTxnMarkers request.
pub const MARKERS_PER_REQUEST_MAX: usize = 500;

/// Which transaction a marker belongs to: a retried or re-submitted transaction with the same
/// key is the same set of markers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnKey {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
}

/// One partition's marker of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub txn: TxnKey,
    pub coordinator_epoch: i32,
    pub topic: String,
    pub partition: i32,
}

/// Where a partition's marker goes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    Broker(i32),
    /// No leader at the moment: routed again later.
    NoLeader,
    /// The topic or partition no longer exists: nothing there can become visible.
    Gone,
}

/// What writing one marker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Written,
    Retry,
    Gone,
    /// A newer coordinator (or producer epoch) owns the producer: this coordinator stops.
    Fenced,
}

struct Outstanding {
    key: TxnKey,
    remaining: BTreeSet<(String, i32)>,
}

#[derive(Default)]
pub struct MarkerQueue {
    txns: HashMap<String, Outstanding>,
    unrouted: VecDeque<Marker>,
    queues: BTreeMap<i32, VecDeque<Marker>>,
    in_flight: BTreeSet<i32>,
    finished: Vec<TxnKey>,
}

impl MarkerQueue {
    /// Whether `key`'s markers are being sent.
    pub fn is_pending(&self, key: &TxnKey) -> bool {
        self.txns
            .get(&key.transactional_id)
            .is_some_and(|o| &o.key == key)
    }

    /// Sends `partitions`' markers of `key`; false (nothing done) when the transaction is
    /// already pending or the bound is reached. A different transaction of the same id
    /// replaces the old one (the coordinator moved on; its markers are not wanted any more).
    pub fn submit(
        &mut self,
        key: TxnKey,
        coordinator_epoch: i32,
        partitions: &[(String, i32)],
    ) -> bool {
        if self.is_pending(&key) {
            return false;
        }
        if !self.txns.contains_key(&key.transactional_id) && self.txns.len() >= PENDING_TXNS_MAX {
            return false;
        }
        let remaining: BTreeSet<(String, i32)> = partitions.iter().cloned().collect();
        for (topic, partition) in &remaining {
            self.unrouted.push_back(Marker {
                txn: key.clone(),
                coordinator_epoch,
                topic: topic.clone(),
                partition: *partition,
            });
        }
        let tid = key.transactional_id.clone();
        if remaining.is_empty() {
            self.finished.push(key);
            self.txns.remove(&tid);
            return true;
        }
        self.txns.insert(tid, Outstanding { key, remaining });
        true
    }

    /// Forgets the transactions of ids `keep` rejects (their coordinator partition is led
    /// here no more: the new coordinator sends their markers).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.txns.retain(|tid, _| keep(tid));
    }

    fn wanted(&self, m: &Marker) -> bool {
        self.txns.get(&m.txn.transactional_id).is_some_and(|o| {
            o.key == m.txn && o.remaining.contains(&(m.topic.clone(), m.partition))
        })
    }

    /// Routes every unrouted marker to its partition's current leader.
    pub fn route(&mut self, mut leader_of: impl FnMut(&str, i32) -> Destination) {
        for _ in 0..self.unrouted.len() {
            let Some(m) = self.unrouted.pop_front() else {
                break;
            };
            if !self.wanted(&m) {
                continue;
            }
            match leader_of(&m.topic, m.partition) {
                Destination::Gone => self.report(m, Outcome::Gone),
                Destination::NoLeader => self.unrouted.push_back(m),
                Destination::Broker(id) => {
                    let queue = self.queues.entry(id).or_default();
                    if queue.len() >= QUEUE_PER_BROKER_MAX {
                        self.unrouted.push_back(m);
                    } else {
                        queue.push_back(m);
                    }
                }
            }
        }
    }

    /// Brokers with queued markers and no request in flight.
    pub fn ready_brokers(&self) -> Vec<i32> {
        self.queues
            .iter()
            .filter(|(id, q)| !q.is_empty() && !self.in_flight.contains(id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The next request's markers for `broker` (one request in flight per broker).
    pub fn take_batch(&mut self, broker: i32) -> Vec<Marker> {
        if self.in_flight.contains(&broker) {
            return Vec::new();
        }
        let mut batch = Vec::new();
        while batch.len() < MARKERS_PER_REQUEST_MAX {
            let Some(m) = self.queues.get_mut(&broker).and_then(VecDeque::pop_front) else {
                break;
            };
            if self.wanted(&m) {
                batch.push(m);
            }
        }
        if !batch.is_empty() {
            self.in_flight.insert(broker);
        }
        batch
    }

    /// The answers of `broker`'s request (a connection error answers Retry for all).
    pub fn done(&mut self, broker: i32, results: Vec<(Marker, Outcome)>) {
        self.in_flight.remove(&broker);
        for (m, outcome) in results {
            self.report(m, outcome);
        }
    }

    fn report(&mut self, m: Marker, outcome: Outcome) {
        if !self.wanted(&m) {
            return;
        }
        let tid = m.txn.transactional_id.clone();
        match outcome {
            Outcome::Retry => self.unrouted.push_back(m),
            Outcome::Fenced => {
                tracing::warn!(transactional_id = %tid, topic = %m.topic, partition = m.partition, "marker fenced by a newer coordinator; this coordinator stops sending it");
                self.txns.remove(&tid);
            }
            Outcome::Written | Outcome::Gone => {
                let o = self.txns.get_mut(&tid).expect("wanted");
                o.remaining.remove(&(m.topic, m.partition));
                if o.remaining.is_empty() {
                    let o = self.txns.remove(&tid).expect("present");
                    self.finished.push(o.key);
                }
            }
        }
    }

    /// Transactions whose every marker is written (or whose partitions are gone).
    pub fn take_finished(&mut self) -> Vec<TxnKey> {
        std::mem::take(&mut self.finished)
    }

    /// Markers waiting for a leader or queued (not in flight).
    pub fn waiting(&self) -> usize {
        self.unrouted.len() + self.queues.values().map(VecDeque::len).sum::<usize>()
    }
}

#[cfg(test)]
#[path = "txn_markers_tests.rs"]
mod tests;

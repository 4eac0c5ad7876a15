//! One quorum member's metadata plumbing, the same for every [`MetadataQuorum`]: it replays
//! committed batches into the controller (and so the committed image), switches the controller
//! on and off with quorum leadership, proposes what the controller writes, and releases each
//! reply once the batch it waited on is committed.
//!
//! A reply whose batch can no longer commit (leadership moved, or a later batch of ours
//! committed without it) is answered NOT_CONTROLLER, which Kafka clients and brokers retry.

use std::collections::VecDeque;

use kafka_protocol::ResponseError;

use crate::controller::{Controller, ControllerConfig, Event, Reply};
use crate::delta::MetadataDelta;
use crate::image::{ApplyError, MetadataImage};
use crate::quorum::{MetadataQuorum, QuorumError};
use crate::snapshot::SnapshotError;

/// Identifies a request to its sender (chosen by the caller).
pub type RequestId = u64;

/// Batches read from the quorum per [`MetadataNode::poll`] round.
pub const BATCHES_PER_POLL_MAX: usize = 256;
/// Bound on replies waiting for their batch to commit.
pub const AWAITING_REPLIES_MAX: usize = 10_000;

/// Why polling stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("quorum: {0}")]
    Quorum(#[from] QuorumError),
    #[error("a committed record does not apply to the image: {0}")]
    Apply(#[from] ApplyError),
    #[error("snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
}

/// What one poll produced.
#[derive(Debug, Default)]
pub struct Polled {
    /// What the newly committed records changed (for the local replica manager).
    pub delta: MetadataDelta,
    /// Replies now safe to send.
    pub replies: Vec<(RequestId, Reply)>,
}

#[derive(Debug)]
struct Awaiting {
    seq: u64,
    request: RequestId,
    reply: Reply,
}

/// A quorum member: controller, committed image and the replies waiting on commits.
#[derive(Debug)]
pub struct MetadataNode<Q> {
    quorum: Q,
    controller: Controller,
    next_offset: i64,
    awaiting: VecDeque<Awaiting>,
    active_epoch: Option<i32>,
}

impl<Q: MetadataQuorum> MetadataNode<Q> {
    pub fn new(quorum: Q, config: ControllerConfig) -> MetadataNode<Q> {
        MetadataNode {
            quorum,
            controller: Controller::new(config),
            next_offset: 0,
            awaiting: VecDeque::new(),
            active_epoch: None,
        }
    }

    pub fn quorum(&self) -> &Q {
        &self.quorum
    }
    pub fn controller(&self) -> &Controller {
        &self.controller
    }
    /// Everything committed that this node has replayed.
    pub fn image(&self) -> &MetadataImage {
        self.controller.committed()
    }
    pub fn is_active(&self) -> bool {
        self.active_epoch.is_some()
    }

    /// The quorum epoch this node is the active controller in (`None` when it is not).
    pub fn active_epoch(&self) -> Option<i32> {
        self.active_epoch
    }

    /// Replay what committed, release replies, follow leadership.
    pub fn poll(&mut self, now_ms: u64) -> Result<Polled, NodeError> {
        let mut polled = Polled::default();
        loop {
            let batches = match self
                .quorum
                .read_committed(self.next_offset, BATCHES_PER_POLL_MAX)
            {
                Err(QuorumError::Compacted { .. }) => {
                    let image = MetadataImage::load(&self.quorum.snapshot())?;
                    self.next_offset = image.position().offset + 1;
                    self.controller.load_snapshot(image);
                    self.lose_all(&mut polled);
                    self.active_epoch = None;
                    continue;
                }
                other => other?,
            };
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for (record, at) in batch.positioned() {
                    if at.offset >= self.next_offset {
                        polled.delta.merge(self.controller.replay(record, at)?);
                        self.next_offset = at.offset + 1;
                    }
                }
                if batch.proposer == self.quorum.node_id() {
                    self.release_through(batch.seq, &mut polled);
                }
            }
        }
        self.follow_leadership(now_ms, &mut polled);
        Ok(polled)
    }

    fn follow_leadership(&mut self, now_ms: u64, polled: &mut Polled) {
        let ready = self.quorum.is_ready_leader();
        let epoch = self.quorum.leader().epoch;
        match (ready, self.active_epoch) {
            (true, Some(active)) if active == epoch => {}
            (true, _) => {
                self.lose_all(polled);
                self.controller.activate(epoch, now_ms);
                self.active_epoch = Some(epoch);
                tracing::info!(node = self.quorum.node_id(), epoch, "controller active");
            }
            (false, Some(_)) => {
                self.lose_all(polled);
                self.controller.deactivate();
                self.active_epoch = None;
            }
            (false, None) => {}
        }
    }

    /// Our batch `seq` committed: its reply goes out; earlier ones that did not commit are lost.
    fn release_through(&mut self, seq: u64, polled: &mut Polled) {
        while let Some(front) = self.awaiting.front() {
            if front.seq > seq {
                break;
            }
            let Some(a) = self.awaiting.pop_front() else {
                break;
            };
            let reply = if a.seq == seq {
                a.reply
            } else {
                not_controller(&a.reply)
            };
            polled.replies.push((a.request, reply));
        }
    }

    fn lose_all(&mut self, polled: &mut Polled) {
        for a in self.awaiting.drain(..) {
            polled.replies.push((a.request, not_controller(&a.reply)));
        }
    }

    /// Handle a request; returns the replies that can go out now (the ones that wrote nothing).
    pub fn handle(
        &mut self,
        request: RequestId,
        event: Event,
        now_ms: u64,
    ) -> Vec<(RequestId, Reply)> {
        let fx = self.controller.handle(event, now_ms);
        let Some(reply) = fx.reply else {
            self.propose(fx.records);
            return Vec::new();
        };
        if fx.records.is_empty() {
            return vec![(request, reply)];
        }
        if self.awaiting.len() >= AWAITING_REPLIES_MAX {
            return vec![(request, not_controller(&reply))];
        }
        match self.propose(fx.records) {
            Some(seq) => {
                self.awaiting.push_back(Awaiting {
                    seq,
                    request,
                    reply,
                });
                Vec::new()
            }
            None => vec![(request, not_controller(&reply))],
        }
    }

    /// Periodic work (fencing, rebalance): proposes whatever the controller writes.
    pub fn tick(&mut self, now_ms: u64) {
        let fx = self.controller.handle(Event::Tick, now_ms);
        self.propose(fx.records);
    }

    fn propose(&mut self, records: Vec<crate::records::Record>) -> Option<u64> {
        if records.is_empty() {
            return None;
        }
        // Decisions belong to the epoch they were made in: after a new election (even one this
        // node won again) the controller's uncommitted records may have vanished, and proposing
        // what it decided on top of them in the new term would commit a batch decided against
        // the wrong image (the simulator found two producer-id blocks ending at the same id).
        if self.quorum.leader().epoch != self.active_epoch.unwrap_or(-1) {
            self.controller.deactivate();
            self.active_epoch = None;
            return None;
        }
        match self.quorum.propose(records) {
            Ok(seq) => Some(seq),
            Err(error) => {
                // The controller's image now holds records that will never commit: start over
                // from the committed image.
                tracing::debug!(%error, "proposal refused; controller steps down");
                self.controller.deactivate();
                self.active_epoch = None;
                None
            }
        }
    }
}

/// The NOT_CONTROLLER answer of the same request kind.
pub fn not_controller(reply: &Reply) -> Reply {
    let e = ResponseError::NotController;
    match reply {
        Reply::BrokerRegistration(_) => Reply::BrokerRegistration(Err(e)),
        Reply::BrokerHeartbeat(_) => Reply::BrokerHeartbeat(Err(e)),
        Reply::AllocateProducerIds(_) => Reply::AllocateProducerIds(Err(e)),
        Reply::AlterPartition(_) => Reply::AlterPartition(Err(e)),
        Reply::CreateTopics(r) => {
            Reply::CreateTopics(r.iter().map(|(n, _)| (n.clone(), Err(e))).collect())
        }
        Reply::CreatePartitions(r) => {
            Reply::CreatePartitions(r.iter().map(|(n, _)| (n.clone(), Err(e))).collect())
        }
        Reply::DeleteTopics(r) => {
            Reply::DeleteTopics(r.iter().map(|(t, _)| (t.clone(), Err(e))).collect())
        }
        Reply::AlterConfigs(r) => {
            Reply::AlterConfigs(r.iter().map(|(c, _)| (c.clone(), Err(e))).collect())
        }
        Reply::ElectLeaders(r) => {
            Reply::ElectLeaders(r.iter().map(|(p, _)| (p.clone(), Err(e))).collect())
        }
        Reply::AlterPartitionReassignments(r) => {
            Reply::AlterPartitionReassignments(r.iter().map(|(p, _)| (p.clone(), Err(e))).collect())
        }
        // A list has no per-item error: the whole answer is NOT_CONTROLLER.
        Reply::ListPartitionReassignments(_) | Reply::NotController => Reply::NotController,
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;

//! The acks=all wait ("produce purgatory", keyed by partition): a Produce response waits until
//! the high watermark of each partition it appended to passes its batches, or the request's
//! `timeout_ms` ends (REQUEST_TIMED_OUT, never a hang). Each partition's high-watermark watch
//! is its key: a follower's fetch that moves the high watermark wakes exactly the waits on
//! that partition. The number of waiting requests is bounded; past the bound a request waits
//! for a slot within its own deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::replica::Replication;
use super::{Partition, PartitionError};

/// Most Produce requests waiting for their ISR at once (Kafka's purgatory has no bound; ours
/// does, so a stuck follower cannot grow memory without limit).
pub const DELAYED_PRODUCE_MAX: usize = 10_000;

/// Waiting acks=all Produce requests.
pub struct ProducePurgatory {
    slots: Arc<Semaphore>,
}

impl Default for ProducePurgatory {
    fn default() -> Self {
        ProducePurgatory {
            slots: Arc::new(Semaphore::new(DELAYED_PRODUCE_MAX)),
        }
    }
}

/// After an acks=all append made in `leader_epoch`: must its answer wait (in
/// [`ProducePurgatory::wait_in_leadership`])? Only an append already `Done` in that leadership
/// is answered at once. An error here (the partition stopped leading between the append and
/// this check: a leader election, the controller's preferred-leader rebalance) goes through
/// the wait too, which answers it as that error (NOT_LEADER_OR_FOLLOWER), as Kafka's
/// `DelayedProduce` does: taking anything but `Pending` for "no wait" answered such an append
/// as a success, an acknowledgement the ISR never had (the new leader lacked the records, and
/// the producer's next sequence was then out of order).
pub fn must_wait(partition: &Partition, required_offset: i64, leader_epoch: Option<i32>) -> bool {
    !matches!(
        partition.replication_in(required_offset, leader_epoch),
        Ok(Replication::Done)
    )
}

impl ProducePurgatory {
    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        DELAYED_PRODUCE_MAX - self.slots.available_permits()
    }

    /// Wait until every `(partition, required offset)` is replicated to the ISR or `timeout`
    /// passes; one result per entry, in order.
    pub async fn wait(
        &self,
        waits: &[(Arc<Partition>, i64)],
        timeout: Duration,
    ) -> Vec<Result<(), PartitionError>> {
        let waits: Vec<_> = waits.iter().map(|(p, o)| (p.clone(), *o, None)).collect();
        self.wait_epochs(&waits, timeout).await
    }

    /// [`Self::wait`] for appends made in the given leader epochs (a Produce request's): an
    /// entry whose leadership ended meanwhile answers NOT_LEADER_OR_FOLLOWER, even if it came
    /// back here in a later epoch.
    pub async fn wait_in_leadership(
        &self,
        waits: &[(Arc<Partition>, i64, i32)],
        timeout: Duration,
    ) -> Vec<Result<(), PartitionError>> {
        let waits: Vec<_> = waits
            .iter()
            .map(|(p, o, e)| (p.clone(), *o, Some(*e)))
            .collect();
        self.wait_epochs(&waits, timeout).await
    }

    async fn wait_epochs(
        &self,
        waits: &[(Arc<Partition>, i64, Option<i32>)],
        timeout: Duration,
    ) -> Vec<Result<(), PartitionError>> {
        let deadline = Instant::now() + timeout;
        let pending = waits.iter().any(|(p, offset, e)| must_wait(p, *offset, *e));
        // Everything already committed (a lone leader): answer without taking a slot.
        let _slot = if pending {
            match tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await {
                Ok(Ok(slot)) => Some(slot),
                _ => None,
            }
        } else {
            None
        };
        let mut results = Vec::with_capacity(waits.len());
        for (partition, offset, epoch) in waits {
            results.push(wait_one(partition, *offset, *epoch, deadline).await);
        }
        results
    }
}

/// Wait on one partition's high-watermark watch until `required_offset` is committed.
async fn wait_one(
    partition: &Partition,
    required_offset: i64,
    leader_epoch: Option<i32>,
    deadline: Instant,
) -> Result<(), PartitionError> {
    let mut watch = partition.watch_high_watermark();
    loop {
        // Subscribed before the check, so a change in between is not missed.
        match partition.replication_in(required_offset, leader_epoch)? {
            Replication::Done => return Ok(()),
            Replication::NotEnoughReplicasAfterAppend => {
                return Err(PartitionError::NotEnoughReplicasAfterAppend);
            }
            Replication::Pending => {}
        }
        match tokio::time::timeout_at(deadline, watch.changed()).await {
            Ok(Ok(())) => {}
            // The partition went away: the next check says how (never a success unless
            // replicated).
            Ok(Err(_)) => {
                return match partition.replication_in(required_offset, leader_epoch)? {
                    Replication::Done => Ok(()),
                    Replication::NotEnoughReplicasAfterAppend => {
                        Err(PartitionError::NotEnoughReplicasAfterAppend)
                    }
                    Replication::Pending => Err(PartitionError::NotLeaderOrFollower),
                };
            }
            Err(_) => return Err(PartitionError::RequestTimedOut),
        }
    }
}

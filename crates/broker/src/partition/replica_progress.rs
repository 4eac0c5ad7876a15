//! What a partition tells `/metrics` and the dashboard about its replication, read-only: on a
//! leader with followers each follower's progress (log end offset, lag in messages, in sync or
//! not), on a follower its lag to the leader's high watermark, and on every partition how often
//! its ISR shrank and grew here.
//!
//! The counts are plain atomics owned by the partition (no metrics recorder): several brokers
//! run in one test process, and each must count only its own changes.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::replica::BrokerId;
use super::{Partition, PartitionRole};

/// One follower as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    pub id: BrokerId,
    /// The `fetch_offset` of its latest Fetch; `None` before its first in this leader epoch.
    pub log_end_offset: Option<i64>,
    /// Leader log end offset minus the follower's (`None` before its first fetch).
    pub lag_messages: Option<i64>,
    pub in_sync: bool,
    /// Since it last reached the leader's log end (Kafka's `lastCaughtUpTimeMs`).
    pub time_since_caught_up_ms: i64,
}

/// A leader's replication state: what [`Partition::replica_progress`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub partition_epoch: i32,
    /// The leader's log end offset.
    pub log_end_offset: i64,
    /// Kafka's `UnderMinIsr`: the ISR is smaller than the effective `min.insync.replicas`, so
    /// the high watermark waits (KIP-966's strict min ISR).
    pub under_min_isr: bool,
    /// Kafka's `effectiveMinIsr`: `min.insync.replicas`, at most the replica count. An ISR of
    /// exactly this size is Kafka's `AtMinIsr` (one more replica lost and acks=all stops).
    pub effective_min_isr: usize,
    /// Every replica but the leader, in replica-id order.
    pub followers: Vec<FollowerProgress>,
}

impl ReplicaProgress {
    /// Kafka's `UnderReplicatedPartitions` rule: the ISR is smaller than the replica set.
    pub fn under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len()
    }
}

/// ISR changes the controller accepted for this partition while it was hosted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IsrChangeCounts {
    pub shrinks: u64,
    pub expands: u64,
}

/// The partition's replication counters.
#[derive(Debug)]
pub(super) struct ReplicationCounters {
    isr_shrinks: AtomicU64,
    isr_expands: AtomicU64,
    /// The high watermark of the latest leader response a follower applied (-1: none yet).
    leader_high_watermark: AtomicI64,
}

impl Default for ReplicationCounters {
    fn default() -> Self {
        ReplicationCounters {
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            leader_high_watermark: AtomicI64::new(-1),
        }
    }
}

impl ReplicationCounters {
    /// An accepted ISR change from `before` to `after`: a shrink when a member left, an
    /// expansion when one joined (a change can be both, as in Kafka's AlterPartition).
    pub(super) fn count_isr_change(&self, before: &[BrokerId], after: &[BrokerId]) {
        if before.iter().any(|r| !after.contains(r)) {
            self.isr_shrinks.fetch_add(1, Ordering::Relaxed);
        }
        if after.iter().any(|r| !before.contains(r)) {
            self.isr_expands.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn note_leader_high_watermark(&self, high_watermark: i64) {
        self.leader_high_watermark
            .store(high_watermark, Ordering::Relaxed);
    }
}

impl Partition {
    /// How often the controller accepted a shrink or an expansion of this partition's ISR here.
    pub fn isr_change_counts(&self) -> IsrChangeCounts {
        let c = &self.replication_counters;
        IsrChangeCounts {
            shrinks: c.isr_shrinks.load(Ordering::Relaxed),
            expands: c.isr_expands.load(Ordering::Relaxed),
        }
    }

    /// On a follower: the leader's high watermark (from its latest response) minus this log's
    /// end, never below 0 (Kafka's fetcher `ConsumerLag`). `None` on a leader, or before the
    /// first response.
    pub fn replica_fetcher_lag(&self) -> Option<i64> {
        let leader_hw = self
            .replication_counters
            .leader_high_watermark
            .load(Ordering::Relaxed);
        let guard = self.state.lock();
        if guard.serving.role != PartitionRole::Follower || leader_hw < 0 {
            return None;
        }
        let log = guard.log.as_ref()?;
        Some((leader_hw - log.log_end_offset()).max(0))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use streamforge_log::LogConfig;
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

    use super::*;
    use crate::fetcher::replicate_once;
    use crate::partition::replica::{IsrChangeOutcome, LeaderAndIsr, ReplicaConfig};
    use crate::partition::{Acks, AlterPartitionIntent, AppendParams, RemoteTier};

    const LAG_MS: i64 = 1_000;

    fn open(dir: &std::path::Path) -> Arc<Partition> {
        let topic: Arc<str> = Arc::from("t");
        let p = Partition::create(&topic, 0, dir, LogConfig::default(), RemoteTier::default());
        Arc::new(p.unwrap())
    }

    fn produce(p: &Partition, records: usize) {
        let batch = &mut build_simple(BatchSpec::default(), records, 20);
        let acks = AppendParams { acks: Acks::Leader };
        p.append(batch, acks).unwrap();
    }

    #[test]
    fn the_leader_shows_each_followers_lag_and_counts_accepted_isr_changes() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (leader, follower) = (open(a.path()), open(b.path()));
        assert_eq!(
            leader.replica_progress(0),
            None,
            "a lone leader tracks no one"
        );
        let intents = Arc::new(Mutex::new(Vec::<AlterPartitionIntent>::new()));
        let seen = intents.clone();
        let state = LeaderAndIsr {
            leader_epoch: 1,
            partition_epoch: 0,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        let config = ReplicaConfig {
            replica_lag_time_max_ms: LAG_MS,
            min_insync_replicas: 1,
        };
        let sink = Arc::new(move |i| seen.lock().push(i));
        leader
            .make_leader_replicated(1, state, config, sink, 0)
            .unwrap();
        follower.make_follower(1, 1).unwrap();
        let progress = leader.replica_progress(0).unwrap();
        assert_eq!(progress.followers[0].lag_messages, None, "no fetch yet");
        assert_eq!(follower.replica_fetcher_lag(), None, "no response yet");

        produce(&leader, 10);
        replicate_once(&leader, &follower, 2, 1 << 20, 10).unwrap();
        assert_eq!(follower.replica_fetcher_lag(), Some(0), "HW 0, log end 10");
        replicate_once(&leader, &follower, 2, 1 << 20, 20).unwrap();
        let progress = leader.replica_progress(20).unwrap();
        let f = progress.followers[0];
        assert_eq!(
            (f.id, f.log_end_offset, f.lag_messages),
            (2, Some(10), Some(0))
        );
        assert!(f.in_sync && !progress.under_replicated());
        assert_eq!(follower.replica_fetcher_lag(), Some(0));
        assert_eq!(
            leader.replica_fetcher_lag(),
            None,
            "a leader fetches from no one"
        );

        // The follower stops; the leader moves on and drops it after the lag time.
        produce(&leader, 5);
        let progress = leader.replica_progress(30).unwrap();
        assert_eq!(progress.followers[0].lag_messages, Some(5));
        leader.maybe_shrink_isr(20 + LAG_MS + 1);
        let shrink = intents.lock().pop().unwrap();
        assert_eq!(
            leader.isr_change_counts(),
            IsrChangeCounts::default(),
            "not accepted yet"
        );
        leader.complete_isr_change(&shrink.change, IsrChangeOutcome::Refused);
        assert_eq!(
            leader.isr_change_counts(),
            IsrChangeCounts::default(),
            "refused"
        );
        // Proposed again once the refusal's backoff has passed, not before.
        leader.maybe_shrink_isr(20 + LAG_MS + 2);
        assert!(intents.lock().pop().is_none(), "backing off");
        leader.maybe_shrink_isr(
            20 + LAG_MS + 3 + crate::partition::replica::ISR_CHANGE_RETRY_BACKOFF_MS,
        );
        let shrink_again = intents.lock().pop().unwrap();
        assert_eq!(shrink_again.change.new_isr, shrink.change.new_isr);
        leader.complete_isr_change(
            &shrink.change,
            IsrChangeOutcome::Committed(shrink.change.new_isr.clone(), 1),
        );
        let counts = IsrChangeCounts {
            shrinks: 1,
            expands: 0,
        };
        assert_eq!(leader.isr_change_counts(), counts);
        let progress = leader.replica_progress(40).unwrap();
        assert!(progress.under_replicated() && !progress.followers[0].in_sync);
        // A stale answer (an older partition epoch) counts nothing.
        leader.complete_isr_change(&shrink.change, IsrChangeOutcome::Committed(vec![1, 2], 1));
        assert_eq!(leader.isr_change_counts(), counts);

        // It comes back one batch at a time (the leader, alone in the ISR, committed 20),
        // catches up and is added again.
        produce(&leader, 5);
        replicate_once(&leader, &follower, 2, 1, 2 * LAG_MS).unwrap();
        assert_eq!(follower.replica_fetcher_lag(), Some(5), "HW 20, log end 15");
        for now in 1..4 {
            replicate_once(&leader, &follower, 2, 1 << 20, 2 * LAG_MS + now).unwrap();
        }
        let expand = intents.lock().pop().unwrap();
        leader.complete_isr_change(
            &expand.change,
            IsrChangeOutcome::Committed(expand.change.new_isr.clone(), 2),
        );
        let counts = IsrChangeCounts {
            shrinks: 1,
            expands: 1,
        };
        assert_eq!(leader.isr_change_counts(), counts);
        assert!(!leader.replica_progress(50).unwrap().under_replicated());
    }

    #[test]
    fn a_removed_member_is_a_shrink_and_an_added_one_an_expansion() {
        let c = ReplicationCounters::default();
        c.count_isr_change(&[1, 2, 3], &[1, 3]);
        c.count_isr_change(&[1, 3], &[1, 3, 2]);
        c.count_isr_change(&[1, 2], &[1, 3]);
        c.count_isr_change(&[1, 2], &[2, 1]);
        assert_eq!(c.isr_shrinks.load(Ordering::Relaxed), 2);
        assert_eq!(c.isr_expands.load(Ordering::Relaxed), 2);
    }
}

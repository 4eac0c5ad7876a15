//! The leader's view of its followers, as a sans-io state machine (Kafka's `Partition` ISR
//! and high-watermark rules): events in (a follower fetched, the leader appended, time passed,
//! the controller answered an ISR change), decisions out (a new high watermark, an ISR change
//! to propose). It never reads a clock and does no I/O; [`super::Partition`] feeds it under
//! the partition lock and carries out what it returns.
//!
//! Rules (each has a unit test below):
//! - a follower's log end offset is the `fetch_offset` of its latest Fetch;
//! - a follower is caught up at a fetch that reaches the leader's log end offset, or one that
//!   reaches the log end offset the leader had at the follower's previous fetch (Kafka's
//!   `lastCaughtUpTimeMs`);
//! - the high watermark is the smallest log end offset over the *maximal* ISR (the committed
//!   ISR plus a pending expansion), and never moves backwards;
//! - an ISR member that is not at the leader's log end and has not caught up for
//!   `replica.lag.time.max.ms` is proposed for removal; a replica outside the ISR whose log end
//!   reaches the high watermark (and the start of this leader epoch) is proposed for addition;
//! - the ISR changes only when the controller accepts the proposal (partition epoch checked
//!   there); one proposal is in flight at a time;
//! - a proposal whose fate is unknown (no answer, no controller, a newer partition epoch at the
//!   controller) stays in the maximal ISR until the metadata or a definite answer settles it:
//!   the controller may have committed it, and a member it added may then be elected with
//!   only what it had (Kafka's AlterPartitionManager retries the same way); an unanswered one
//!   is sent again after the backoff;
//! - KIP-966's strict min ISR (Kafka's `maybeIncrementLeaderHW` / `isUnderMinIsr`): the high
//!   watermark does not move while the committed ISR is smaller than the effective min ISR
//!   (`min.insync.replicas`, the topic's else the broker's, at most the replica count, so an
//!   RF=1 partition is never under it). Appends (acks=0/1) still land, but consumers see them
//!   only once the ISR is back at min ISR; the replicas that left the ISR meanwhile (the
//!   controller's ELR) therefore hold every record a consumer can have read;
//! - acks=all needs the effective min ISR in the committed ISR before the append
//!   (NOT_ENOUGH_REPLICAS) and in the maximal ISR when the high watermark passes it
//!   (NOT_ENOUGH_REPLICAS_AFTER_APPEND), as Kafka's `appendRecordsToLeader` and
//!   `checkEnoughReplicasReachOffset` do.

use std::collections::BTreeMap;

/// A broker id.
pub type BrokerId = i32;

/// Kafka's default `replica.lag.time.max.ms`.
pub const REPLICA_LAG_TIME_MAX_MS_DEFAULT: i64 = 30_000;
/// Most replicas of one partition (a named bound on every per-partition list here).
pub const REPLICAS_MAX: usize = 64;
/// After the controller refused an ISR change (a replica still fenced: INELIGIBLE_REPLICA; no
/// controller; a stale partition epoch), wait this long before proposing again: a follower
/// fetches every few milliseconds, and each fetch would otherwise send the same refused
/// change straight back.
pub const ISR_CHANGE_RETRY_BACKOFF_MS: i64 = 250;

/// Settings of the leader-side rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: i64,
    /// `min.insync.replicas`: the topic's, else the broker's. The rules use it capped by the
    /// replica count ([`LeaderState::effective_min_isr`]).
    pub min_insync_replicas: usize,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            replica_lag_time_max_ms: REPLICA_LAG_TIME_MAX_MS_DEFAULT,
            min_insync_replicas: 1,
        }
    }
}

impl ReplicaConfig {
    /// `min.insync.replicas` from a topic's config overrides (1 when unset or invalid).
    pub fn with_topic_configs(
        mut self,
        configs: &std::collections::BTreeMap<String, String>,
    ) -> ReplicaConfig {
        if let Some(v) = configs.get("min.insync.replicas")
            && let Ok(n) = v.trim().parse::<usize>()
        {
            self.min_insync_replicas = n.max(1);
        }
        self
    }
}

/// What the metadata says about a partition this broker leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader_epoch: i32,
    /// Bumped by the controller on every change; an ISR change must name the current one.
    pub partition_epoch: i32,
    /// The assignment (this broker included).
    pub replicas: Vec<BrokerId>,
    /// The committed in-sync replicas (this broker included).
    pub isr: Vec<BrokerId>,
}

/// What became of an ISR change the leader proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrChangeOutcome {
    /// The controller committed this ISR with this partition epoch.
    Committed(Vec<BrokerId>, i32),
    /// The controller refused it and changed nothing (INELIGIBLE_REPLICA, INVALID_REQUEST):
    /// propose again after the backoff.
    Refused,
    /// The controller holds a newer partition or leader epoch (INVALID_UPDATE_VERSION,
    /// FENCED_LEADER_EPOCH): possibly this very change, committed by an earlier try. The
    /// proposal stays in the maximal ISR until the metadata brings that newer epoch.
    Superseded,
    /// No answer (no controller, the request timed out): it may have committed. The proposal
    /// stays in the maximal ISR and is sent again after the backoff.
    Unknown,
}

/// An ISR change the leader asks the controller for (AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub new_isr: Vec<BrokerId>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// How far an acks=all append is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The high watermark has not reached the batch yet.
    Pending,
    /// Every ISR member has it, and the ISR is large enough.
    Done,
    /// Committed, but the ISR shrank below `min.insync.replicas` meanwhile.
    NotEnoughReplicasAfterAppend,
}

/// Why the leader refused a follower's fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    #[error("broker {0} is not a replica of this partition")]
    NotAReplica(BrokerId),
    #[error("the ISR has {isr} members, fewer than min.insync.replicas {min}")]
    NotEnoughReplicas { isr: usize, min: usize },
}

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// -1 until its first fetch in this leader epoch.
    pub log_end_offset: i64,
    pub last_caught_up_ms: i64,
    pub last_fetch_ms: i64,
    /// The leader's log end offset when this follower last fetched.
    pub leader_end_at_last_fetch: i64,
    /// The `log_start_offset` of its latest Fetch (-1 until it sends one): a consumer asking
    /// for less is not sent to it (KIP-392).
    pub log_start_offset: i64,
}

/// What a follower's fetch changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchOutcome {
    /// The high watermark moved to this offset.
    pub high_watermark: Option<i64>,
    /// Propose this ISR change (expansion).
    pub isr_change: Option<IsrChange>,
}

/// The leader-side replica state of one partition.
#[derive(Debug, Clone)]
pub struct LeaderState {
    local_id: BrokerId,
    config: ReplicaConfig,
    leader_epoch: i32,
    partition_epoch: i32,
    /// The log end offset when this leader epoch began: a replica joins the ISR only once it
    /// has everything of earlier epochs.
    epoch_start_offset: i64,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    /// The ISR change proposed to the controller and not settled yet (no answer, or one that
    /// leaves its fate open): its ISR counts in the maximal ISR.
    pending: Option<IsrChange>,
    /// The pending proposal got no answer: send it again after the backoff (otherwise it
    /// waits for its answer or the metadata).
    pending_unanswered: bool,
    /// The last proposal was refused; the next rule that runs starts the backoff.
    isr_change_refused: bool,
    /// No ISR change is proposed before this time (after a refusal).
    isr_change_retry_at_ms: i64,
    followers: BTreeMap<BrokerId, FollowerState>,
    high_watermark: i64,
    local_end_offset: i64,
}

impl LeaderState {
    /// Become leader: followers are unknown until they fetch; ISR members count as caught up
    /// now (Kafka resets their state to the leadership's start).
    pub fn new(
        local_id: BrokerId,
        state: LeaderAndIsr,
        config: ReplicaConfig,
        log_end_offset: i64,
        high_watermark: i64,
        now_ms: i64,
    ) -> LeaderState {
        let mut replicas = state.replicas;
        replicas.truncate(REPLICAS_MAX);
        if !replicas.contains(&local_id) {
            replicas.push(local_id);
        }
        let mut isr: Vec<BrokerId> = state
            .isr
            .into_iter()
            .filter(|r| replicas.contains(r))
            .collect();
        if !isr.contains(&local_id) {
            isr.push(local_id);
        }
        let followers = replicas
            .iter()
            .filter(|&&r| r != local_id)
            .map(|&r| {
                let in_isr = isr.contains(&r);
                let state = FollowerState {
                    log_end_offset: -1,
                    last_caught_up_ms: if in_isr { now_ms } else { 0 },
                    last_fetch_ms: 0,
                    leader_end_at_last_fetch: -1,
                    log_start_offset: -1,
                };
                (r, state)
            })
            .collect();
        let mut leader = LeaderState {
            local_id,
            config,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            epoch_start_offset: log_end_offset,
            replicas,
            isr,
            pending: None,
            pending_unanswered: false,
            isr_change_refused: false,
            isr_change_retry_at_ms: 0,
            followers,
            high_watermark: high_watermark.min(log_end_offset),
            local_end_offset: log_end_offset,
        };
        leader.advance_high_watermark();
        leader
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }
    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }
    pub fn pending_isr(&self) -> Option<&[BrokerId]> {
        self.pending.as_ref().map(|c| &c.new_isr[..])
    }
    pub fn follower(&self, id: BrokerId) -> Option<&FollowerState> {
        self.followers.get(&id)
    }
    pub fn config(&self) -> ReplicaConfig {
        self.config
    }

    /// Kafka's `effectiveMinIsr`: `min.insync.replicas`, at most the replica count (a topic may
    /// set more than it has replicas; RF=1 is then never under min ISR).
    pub fn effective_min_isr(&self) -> usize {
        self.config
            .min_insync_replicas
            .min(self.replicas.len())
            .max(1)
    }

    /// Kafka's `isUnderMinIsr`: the committed ISR is smaller than the effective min ISR. The
    /// high watermark stays where it is until it is not (KIP-966's strict min ISR).
    pub fn is_under_min_isr(&self) -> bool {
        self.isr.len() < self.effective_min_isr()
    }

    /// New settings (a topic's or the broker's `min.insync.replicas` changed). Returns a high
    /// watermark that moved: a lower min ISR can release it at once.
    pub fn set_config(&mut self, config: ReplicaConfig) -> Option<i64> {
        self.config = config;
        self.advance_high_watermark()
    }

    /// The committed ISR plus a pending expansion: the replicas the high watermark waits for.
    fn maximal_isr(&self) -> impl Iterator<Item = BrokerId> + '_ {
        let extra = self
            .pending
            .iter()
            .flat_map(|c| c.new_isr.iter())
            .filter(|r| !self.isr.contains(r));
        self.isr.iter().chain(extra).copied()
    }

    fn end_offset_of(&self, id: BrokerId) -> i64 {
        if id == self.local_id {
            self.local_end_offset
        } else {
            self.followers.get(&id).map_or(-1, |f| f.log_end_offset)
        }
    }

    /// Move the high watermark to the smallest log end offset of the maximal ISR, forward only,
    /// and not at all while the committed ISR is under min ISR (KIP-966): every record a
    /// consumer can read is then on at least min ISR replicas, so on every replica that left
    /// the ISR below min ISR (the ELR), whichever of them the controller elects.
    fn advance_high_watermark(&mut self) -> Option<i64> {
        if self.is_under_min_isr() {
            return None;
        }
        let min_end = self
            .maximal_isr()
            .map(|r| self.end_offset_of(r))
            .min()
            .unwrap_or(self.local_end_offset);
        let candidate = min_end.min(self.local_end_offset);
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            Some(candidate)
        } else {
            None
        }
    }

    /// acks=all, before the append: is the committed ISR at the effective min ISR?
    pub fn check_enough_replicas(&self) -> Result<(), ReplicaError> {
        let (isr, min) = (self.isr.len(), self.effective_min_isr());
        if isr < min {
            return Err(ReplicaError::NotEnoughReplicas { isr, min });
        }
        Ok(())
    }

    /// acks=all, after the append: has every ISR member got `required_offset - 1`? Once the
    /// high watermark passed it, the maximal ISR must still be at the effective min ISR (it
    /// can have shrunk since the high watermark moved).
    pub fn replication(&self, required_offset: i64) -> Replication {
        if self.high_watermark < required_offset {
            Replication::Pending
        } else if self.maximal_isr().count() < self.effective_min_isr() {
            Replication::NotEnoughReplicasAfterAppend
        } else {
            Replication::Done
        }
    }

    /// The leader appended: its log end offset is now `log_end_offset`.
    pub fn on_local_append(&mut self, log_end_offset: i64) -> Option<i64> {
        debug_assert!(log_end_offset >= self.local_end_offset, "leader log shrank");
        self.local_end_offset = log_end_offset;
        self.advance_high_watermark()
    }

    /// A follower fetched from `fetch_offset` while the leader's log ends at
    /// `leader_end_offset`.
    pub fn on_follower_fetch(
        &mut self,
        id: BrokerId,
        fetch_offset: i64,
        leader_end_offset: i64,
        now_ms: i64,
    ) -> Result<FetchOutcome, ReplicaError> {
        self.local_end_offset = leader_end_offset;
        let f = self
            .followers
            .get_mut(&id)
            .ok_or(ReplicaError::NotAReplica(id))?;
        if fetch_offset >= leader_end_offset {
            f.last_caught_up_ms = now_ms;
        } else if fetch_offset >= f.leader_end_at_last_fetch && f.leader_end_at_last_fetch >= 0 {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = fetch_offset.min(leader_end_offset);
        f.last_fetch_ms = now_ms;
        f.leader_end_at_last_fetch = leader_end_offset;
        let high_watermark = self.advance_high_watermark();
        let isr_change = self.maybe_expand(id, now_ms);
        // An expansion counts for the high watermark at once (maximal ISR).
        let high_watermark = self.advance_high_watermark().or(high_watermark);
        Ok(FetchOutcome {
            high_watermark,
            isr_change,
        })
    }

    /// A follower's Fetch said where its log starts (`log_start_offset`, Fetch v5+; -1 when
    /// it did not say). Kept for the read-replica selector only: the high watermark and ISR
    /// depend on log ends alone.
    pub fn on_follower_log_start(&mut self, id: BrokerId, log_start_offset: i64) {
        if let Some(f) = self.followers.get_mut(&id) {
            f.log_start_offset = log_start_offset;
        }
    }

    /// Propose adding `id` once its log reaches the high watermark and this epoch's start.
    fn maybe_expand(&mut self, id: BrokerId, now_ms: i64) -> Option<IsrChange> {
        if self.pending.is_some() || self.isr.contains(&id) || self.backing_off(now_ms) {
            return None;
        }
        let end = self.end_offset_of(id);
        if end < self.high_watermark || end < self.epoch_start_offset {
            return None;
        }
        let mut new_isr = self.isr.clone();
        new_isr.push(id);
        Some(self.propose(new_isr))
    }

    /// Time passed: propose removing ISR members that lag more than `replica.lag.time.max.ms`.
    /// A proposal whose answer never came is sent again here, after the backoff.
    pub fn maybe_shrink(&mut self, now_ms: i64) -> Option<IsrChange> {
        if self.pending_unanswered && !self.backing_off(now_ms) {
            self.pending_unanswered = false;
            return self.pending.clone();
        }
        if self.pending.is_some() || self.backing_off(now_ms) {
            return None;
        }
        let lag_max = self.config.replica_lag_time_max_ms;
        let out_of_sync = |id: &BrokerId| {
            self.followers.get(id).is_some_and(|f| {
                f.log_end_offset != self.local_end_offset && now_ms - f.last_caught_up_ms > lag_max
            })
        };
        if !self.isr.iter().any(out_of_sync) {
            return None;
        }
        let new_isr: Vec<BrokerId> = self
            .isr
            .iter()
            .copied()
            .filter(|r| !out_of_sync(r))
            .collect();
        Some(self.propose(new_isr))
    }

    /// Whether a refused change is still backing off at `now_ms` (the first call after a
    /// refusal starts the backoff: the answer itself carries no time).
    fn backing_off(&mut self, now_ms: i64) -> bool {
        if self.isr_change_refused {
            self.isr_change_refused = false;
            self.isr_change_retry_at_ms = now_ms + ISR_CHANGE_RETRY_BACKOFF_MS;
        }
        now_ms < self.isr_change_retry_at_ms
    }

    fn propose(&mut self, new_isr: Vec<BrokerId>) -> IsrChange {
        debug_assert!(new_isr.contains(&self.local_id), "the leader left its ISR");
        let change = IsrChange {
            new_isr,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
        };
        self.pending = Some(change.clone());
        self.pending_unanswered = false;
        change
    }

    /// What became of the proposed ISR change `answered`. An answer that leaves the change's
    /// fate open keeps it pending; one to an earlier proposal than the pending one changes
    /// nothing but a committed ISR (checked by its partition epoch). Returns a high watermark
    /// that moved (a shrink can let it advance).
    pub fn on_isr_change_result(
        &mut self,
        answered: &IsrChange,
        outcome: IsrChangeOutcome,
    ) -> Option<i64> {
        let current = self.pending.as_ref() == Some(answered);
        let (isr, partition_epoch) = match outcome {
            IsrChangeOutcome::Committed(isr, epoch) => (isr, epoch),
            _ if !current => return None,
            IsrChangeOutcome::Refused => {
                self.pending = None;
                self.pending_unanswered = false;
                self.isr_change_refused = true;
                return None;
            }
            // Kept pending, not sent again: the metadata's newer epoch settles it.
            IsrChangeOutcome::Superseded => {
                self.pending_unanswered = false;
                return None;
            }
            IsrChangeOutcome::Unknown => {
                self.pending_unanswered = true;
                self.isr_change_refused = true;
                return None;
            }
        };
        self.settle(isr, partition_epoch)
    }

    /// A committed ISR: take it when newer than what this leader knows, and end the pending
    /// proposal (it named an older epoch, so it is either this commit or can no longer
    /// commit).
    fn settle(&mut self, isr: Vec<BrokerId>, partition_epoch: i32) -> Option<i64> {
        if partition_epoch <= self.partition_epoch {
            // Older than what we know (the metadata brought it first): a proposal pending now
            // names the current epoch and is not settled by it.
            return None;
        }
        self.pending = None;
        self.pending_unanswered = false;
        self.isr_change_refused = false;
        self.isr_change_retry_at_ms = 0;
        self.isr = isr
            .into_iter()
            .filter(|r| self.replicas.contains(r))
            .collect();
        if !self.isr.contains(&self.local_id) {
            self.isr.push(self.local_id);
        }
        self.partition_epoch = partition_epoch;
        self.advance_high_watermark()
    }

    /// The metadata changed the assignment within this leadership (a reassignment added
    /// replicas, KIP-455): an added replica is a follower outside the ISR, unknown until it
    /// fetches, and joins the ISR by the usual rule once caught up; a replica that left is
    /// forgotten (that also bumps the leader epoch, so it normally comes as a new leadership).
    /// Returns a high watermark that moved.
    pub fn on_metadata_replicas(&mut self, replicas: &[BrokerId]) -> Option<i64> {
        let mut replicas = replicas.to_vec();
        replicas.truncate(REPLICAS_MAX);
        if !replicas.contains(&self.local_id) {
            replicas.push(self.local_id);
        }
        if replicas == self.replicas {
            return None;
        }
        self.followers.retain(|id, _| replicas.contains(id));
        for &r in replicas.iter().filter(|&&r| r != self.local_id) {
            self.followers.entry(r).or_insert(FollowerState {
                log_end_offset: -1,
                last_caught_up_ms: 0,
                last_fetch_ms: 0,
                leader_end_at_last_fetch: -1,
                log_start_offset: -1,
            });
        }
        self.isr.retain(|r| replicas.contains(r));
        self.replicas = replicas;
        self.advance_high_watermark()
    }

    /// The metadata committed a newer partition epoch for this leadership (an accepted
    /// AlterPartition, or the controller taking a fenced broker out of the ISR): take its ISR.
    /// A proposal still pending named the older epoch: the new ISR is either its commit or
    /// made it moot, so it is dropped here and the rules propose again from the new ISR. An
    /// older or equal epoch changes nothing. Returns a high watermark that moved.
    pub fn on_metadata_isr(&mut self, isr: Vec<BrokerId>, partition_epoch: i32) -> Option<i64> {
        if partition_epoch <= self.partition_epoch {
            return None;
        }
        self.settle(isr, partition_epoch)
    }
}

/// Where a follower truncates to when the leader says its log diverges: Kafka's
/// `getOffsetTruncationState`. `leader` is the leader's `(epoch, end offset)` for the
/// follower's epoch (OffsetForLeaderEpoch, or Fetch's `diverging_epoch`); `local_end_for`
/// gives the follower's own `(epoch, end offset)` for an epoch. Returns the offset to truncate
/// to and whether truncation is complete (else ask again with the smaller epoch).
pub fn truncation_offset(
    leader: (i32, i64),
    local_end_for: impl Fn(i32) -> Option<(i32, i64)>,
    local_end_offset: i64,
    high_watermark: i64,
) -> (i64, bool) {
    let (leader_epoch, leader_end) = leader;
    if leader_end < 0 {
        // The leader knows no epochs: keep what is committed.
        return (high_watermark.min(local_end_offset), true);
    }
    if leader_epoch < 0 {
        return (leader_end.min(local_end_offset), true);
    }
    match local_end_for(leader_epoch) {
        Some((epoch, end)) if epoch != leader_epoch => (end.min(local_end_offset), false),
        Some((_, end)) => (leader_end.min(end).min(local_end_offset), true),
        None => (leader_end.min(local_end_offset), true),
    }
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;

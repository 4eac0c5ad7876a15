//! Replication inside `Partition`: the leader's follower tracking (fed to the sans-io
//! [`LeaderState`] under the partition lock), the ISR changes it asks the controller for, the
//! reads followers make, and the follower side (append the leader's batches, truncate a
//! divergent tail, take the leader's high watermark).
//!
//! Contract with the controller wiring: an [`AlterPartitionIntent`] goes to the
//! [`IsrChangeSink`] given to `make_leader_replicated`; whoever sends it answers with
//! [`Partition::complete_isr_change`] (an [`IsrChangeOutcome`]: committed, refused, or
//! left open). The ISR a leader uses changes only on a commit (or the metadata's), and a
//! change whose fate is open keeps counting for the high watermark.

use std::sync::Arc;

use streamforge_log::{Log, ReadInfo};

use super::replica::{
    BrokerId, IsrChange, IsrChangeOutcome, LeaderAndIsr, LeaderState, ReplicaConfig, Replication,
    truncation_offset,
};
use super::replica_progress::{FollowerProgress, ReplicaProgress};
use super::replica_selector::ReplicaCandidate;
use super::{
    FetchParams, Partition, PartitionError, PartitionRole, ReadResult, check_leader_epoch,
    local_offsets,
};

/// Where a partition's high watermark starts when its log is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenHighWatermark {
    /// The log end: this broker is alone in the ISR (a single broker, every new partition),
    /// so everything its log holds is committed.
    LogEnd,
    /// The partition has other replicas: the high watermark from the
    /// `replication-offset-checkpoint` (`None`: no entry, so the log start), never past the log
    /// end (Kafka's `min(checkpoint, LEO)`). A leader's then advances by the ISR rules, a
    /// follower's with the leader's.
    Checkpointed(Option<i64>),
}

impl OpenHighWatermark {
    /// The high watermark a log with these offsets opens with.
    pub fn resolve(self, log_start_offset: i64, log_end_offset: i64) -> i64 {
        let hw = match self {
            OpenHighWatermark::LogEnd => log_end_offset,
            OpenHighWatermark::Checkpointed(hw) => hw.unwrap_or(log_start_offset),
        };
        hw.clamp(log_start_offset, log_end_offset)
    }
}

/// An ISR change this leader wants (AlterPartition), for the controller wiring to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionIntent {
    pub topic: Arc<str>,
    pub partition: i32,
    pub leader_id: BrokerId,
    pub change: IsrChange,
}

/// Where a leader's ISR changes go. Called outside the partition lock.
pub type IsrChangeSink = Arc<dyn Fn(AlterPartitionIntent) + Send + Sync>;

/// The follower tracking of a leader with followers.
pub(super) struct ReplicaSet {
    local_id: BrokerId,
    leader: LeaderState,
    sink: IsrChangeSink,
    /// What was last logged of KIP-966's strict min ISR (the high watermark held).
    under_min_isr: bool,
}

impl ReplicaSet {
    pub(super) fn check_enough_replicas(&self) -> Result<(), PartitionError> {
        self.leader.check_enough_replicas().map_err(|e| match e {
            super::replica::ReplicaError::NotEnoughReplicas { isr, min } => {
                PartitionError::NotEnoughReplicas { isr, min }
            }
            super::replica::ReplicaError::NotAReplica(_) => PartitionError::NotLeaderOrFollower,
        })
    }

    pub(super) fn on_local_append(&mut self, log: &mut Log, log_end_offset: i64) {
        if let Some(hw) = self.leader.on_local_append(log_end_offset) {
            log.set_high_watermark(hw);
        }
    }

    /// Log when the ISR goes under min ISR (the high watermark stops: acks=0/1 records are not
    /// visible to consumers) and when it is back. Call after anything that changes the ISR,
    /// the replicas or the config.
    pub(super) fn note_min_isr(&mut self, topic: &str, partition: i32) {
        let under = self.leader.is_under_min_isr();
        if under == self.under_min_isr {
            return;
        }
        self.under_min_isr = under;
        let (isr, min_isr) = (self.leader.isr(), self.leader.effective_min_isr());
        let high_watermark = self.leader.high_watermark();
        if under {
            tracing::warn!(
                topic,
                partition,
                ?isr,
                min_isr,
                high_watermark,
                "ISR under min.insync.replicas: the high watermark waits until it is back (KIP-966); new records are not visible to consumers"
            );
        } else {
            tracing::info!(
                topic,
                partition,
                ?isr,
                min_isr,
                high_watermark,
                "ISR back at min.insync.replicas: the high watermark moves again"
            );
        }
    }

    /// The topic's effective `min.insync.replicas` changed (AlterConfigs on the topic, or the
    /// broker default it inherits). Returns a high watermark a lower min ISR released.
    pub(super) fn set_min_insync_replicas(&mut self, log: &mut Log, min: usize) -> Option<i64> {
        let config = ReplicaConfig {
            min_insync_replicas: min.max(1),
            ..self.leader.config()
        };
        if config == self.leader.config() {
            return None;
        }
        let hw = self.leader.set_config(config)?;
        log.set_high_watermark(hw);
        Some(hw)
    }
}

/// A Fetch from a follower (replica id >= 0), as Fetch v12 describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetch {
    pub replica_id: BrokerId,
    /// The leader epoch the follower follows (-1 = not checked).
    pub current_leader_epoch: i32,
    /// The epoch of the last batch the follower has (-1 = unknown).
    pub last_fetched_epoch: i32,
    /// Where the follower's log starts (-1 = not said): what the read-replica selector checks.
    pub log_start_offset: i64,
    /// The leader's replication quota is exceeded and throttles this partition: a follower
    /// outside the ISR gets no records (its position still counts). Kafka's
    /// `shouldLeaderThrottle`; an in-sync follower is never throttled, so the ISR does not thrash.
    pub throttled: bool,
}

/// A follower's read: the batches, or the epoch its log diverges at.
#[derive(Debug)]
pub struct FollowerRead {
    pub read: ReadResult,
    /// `(epoch, end offset)` to truncate by (Fetch v12 `diverging_epoch`).
    pub diverging_epoch: Option<(i32, i64)>,
}

/// A follower read under the lock: the read, a divergence, an ISR intent and a moved HW.
type LockedFollowerRead = (
    ReadResult,
    Option<(i32, i64)>,
    Option<(AlterPartitionIntent, IsrChangeSink)>,
    Option<i64>,
);

/// Where a follower is: what its next Fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerPosition {
    pub fetch_offset: i64,
    /// The first offset this replica serves to consumers (its log start, remote tier
    /// included): sent to the leader as the Fetch's `log_start_offset`.
    pub log_start_offset: i64,
    pub last_fetched_epoch: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
}

impl Partition {
    /// Lead from `state.leader_epoch` on with followers (Kafka's `makeLeader` with an ISR):
    /// the high watermark stays where it was until the ISR has more.
    pub fn make_leader_replicated(
        &self,
        local_id: BrokerId,
        state: LeaderAndIsr,
        config: ReplicaConfig,
        sink: IsrChangeSink,
        now_ms: i64,
    ) -> Result<(), PartitionError> {
        let hw = self.with_state(|serving, log| {
            if state.leader_epoch < serving.leader_epoch {
                return Err(PartitionError::FencedLeaderEpoch {
                    requested: state.leader_epoch,
                    current: serving.leader_epoch,
                });
            }
            log.assign_epoch_start_offset(state.leader_epoch)?;
            serving.role = PartitionRole::Leader;
            serving.leader_epoch = state.leader_epoch;
            serving.leader_id = None;
            let leo = log.log_end_offset();
            let leader =
                LeaderState::new(local_id, state, config, leo, log.high_watermark(), now_ms);
            log.set_high_watermark(leader.high_watermark());
            let mut replica = ReplicaSet {
                local_id,
                leader,
                sink,
                under_min_isr: false,
            };
            replica.note_min_isr(&self.topic, self.index);
            serving.replica = Some(replica);
            Ok(log.high_watermark())
        })??;
        self.hw_tx.send_replace(hw);
        Ok(())
    }

    /// Lead as the metadata says, with followers: the same leadership (epoch) already led
    /// with followers takes the committed assignment (a reassignment adds replicas within a
    /// leadership) and ISR in place, keeping what it knows of its followers; any other becomes a new leadership ([`Self::make_leader_replicated`]).
    pub fn lead_replicated(
        &self,
        local_id: BrokerId,
        state: LeaderAndIsr,
        config: ReplicaConfig,
        sink: IsrChangeSink,
        now_ms: i64,
    ) -> Result<(), PartitionError> {
        let updated = self.with_state(|serving, log| {
            let same =
                serving.role == PartitionRole::Leader && serving.leader_epoch == state.leader_epoch;
            let replica = serving.replica.as_mut().filter(|_| same)?;
            // Replicas first: the committed ISR is read against the new assignment.
            let moved = replica.leader.on_metadata_replicas(&state.replicas);
            let settled = replica
                .leader
                .on_metadata_isr(state.isr.clone(), state.partition_epoch);
            let configured = (replica.leader.config() != config)
                .then(|| replica.leader.set_config(config))
                .flatten();
            if let Some(hw) = configured.or(settled).or(moved) {
                log.set_high_watermark(hw);
            }
            replica.note_min_isr(&self.topic, self.index);
            Some(log.high_watermark())
        })?;
        match updated {
            Some(hw) => {
                self.hw_tx.send_replace(hw);
                Ok(())
            }
            None => self.make_leader_replicated(local_id, state, config, sink, now_ms),
        }
    }

    /// What became of this leader's ISR change `answered`.
    pub fn complete_isr_change(&self, answered: &IsrChange, outcome: IsrChangeOutcome) {
        let hw = self.with_state(|serving, log| {
            let replica = serving.replica.as_mut()?;
            let (before, epoch) = (
                replica.leader.isr().to_vec(),
                replica.leader.partition_epoch(),
            );
            let hw = replica.leader.on_isr_change_result(answered, outcome);
            if replica.leader.partition_epoch() != epoch {
                self.replication_counters
                    .count_isr_change(&before, replica.leader.isr());
                replica.note_min_isr(&self.topic, self.index);
            }
            let hw = hw?;
            log.set_high_watermark(hw);
            Some(hw)
        });
        if let Ok(Some(hw)) = hw {
            self.hw_tx.send_replace(hw);
        }
    }

    /// Time passed: propose dropping followers that lag more than `replica.lag.time.max.ms`.
    pub fn maybe_shrink_isr(&self, now_ms: i64) {
        let intent = self.with_state(|serving, _| {
            let replica = serving.replica.as_mut()?;
            let change = replica.leader.maybe_shrink(now_ms)?;
            Some((self.intent(replica, change), replica.sink.clone()))
        });
        if let Ok(Some((intent, sink))) = intent {
            tracing::info!(topic = %self.topic, partition = self.index, new_isr = ?intent.change.new_isr, "proposing ISR shrink");
            sink(intent);
        }
    }

    fn intent(&self, replica: &ReplicaSet, change: IsrChange) -> AlterPartitionIntent {
        AlterPartitionIntent {
            topic: self.topic.clone(),
            partition: self.index,
            leader_id: replica.local_id,
            change,
        }
    }

    /// `(replicas, ISR, partition epoch)` while this broker leads with followers.
    pub fn replica_status(&self) -> Option<(Vec<BrokerId>, Vec<BrokerId>, i32)> {
        let guard = self.state.lock();
        let leader = &guard.serving.replica.as_ref()?.leader;
        Some((
            leader.replicas().to_vec(),
            leader.isr().to_vec(),
            leader.partition_epoch(),
        ))
    }

    /// KIP-392 on a leader with followers: itself and the in-sync followers (Kafka, since
    /// KAFKA-14372, leaves out those outside the ISR) with their log start and end offsets,
    /// racks not filled in; the selector keeps those whose log holds the fetch offset.
    /// `None` otherwise: a lone leader or a non-leader names no preferred replica.
    pub fn read_replica_candidates(
        &self,
        now_ms: i64,
    ) -> Option<(ReplicaCandidate, Vec<ReplicaCandidate>)> {
        let guard = self.state.lock();
        let log = guard.log.as_ref()?;
        if guard.serving.role != PartitionRole::Leader {
            return None;
        }
        let replica = guard.serving.replica.as_ref()?;
        let leader = ReplicaCandidate {
            id: replica.local_id,
            rack: None,
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            time_since_caught_up_ms: 0,
        };
        let followers = replica
            .leader
            .isr()
            .iter()
            .filter(|id| **id != replica.local_id)
            .filter_map(|id| {
                let f = replica.leader.follower(*id)?;
                Some(ReplicaCandidate {
                    id: *id,
                    rack: None,
                    log_start_offset: f.log_start_offset,
                    log_end_offset: f.log_end_offset,
                    time_since_caught_up_ms: now_ms.saturating_sub(f.last_caught_up_ms).max(0),
                })
            })
            .collect();
        Some((leader, followers))
    }

    /// acks=all: has every ISR member got everything below `required_offset`?
    pub fn replication(&self, required_offset: i64) -> Result<Replication, PartitionError> {
        self.replication_in(required_offset, None)
    }

    /// [`Self::replication`] of an append made in `leader_epoch` (when given): a leadership
    /// that moved away since, even one back here in a later epoch, answers
    /// NOT_LEADER_OR_FOLLOWER (the log may have been truncated and refilled in between).
    pub fn replication_in(
        &self,
        required_offset: i64,
        leader_epoch: Option<i32>,
    ) -> Result<Replication, PartitionError> {
        self.with_state(|serving, log| {
            if serving.role != PartitionRole::Leader
                || leader_epoch.is_some_and(|e| e != serving.leader_epoch)
            {
                return Err(PartitionError::NotLeaderOrFollower);
            }
            Ok(match &serving.replica {
                Some(r) => r.leader.replication(required_offset),
                None if log.high_watermark() >= required_offset => Replication::Done,
                None => Replication::Pending,
            })
        })?
    }

    /// A follower's Fetch: checks its epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), answers
    /// a divergent log with the epoch to truncate by, else records its position (moving the
    /// high watermark, maybe proposing it for the ISR) and reads to the log end.
    pub fn read_for_follower(
        &self,
        params: FetchParams,
        fetch: FollowerFetch,
        now_ms: i64,
    ) -> Result<FollowerRead, PartitionError> {
        let (read, diverging, intent, hw_moved) = {
            let mut guard = self.state.lock();
            let super::State { log, serving } = &mut *guard;
            check_leader_epoch(fetch.current_leader_epoch, serving.leader_epoch)?;
            let Some(log) = log.as_mut() else {
                return Err(self.missing());
            };
            if serving.role != PartitionRole::Leader {
                return Err(PartitionError::NotLeaderOrFollower);
            }
            let Some(replica) = serving.replica.as_mut() else {
                return Err(PartitionError::NotLeaderOrFollower);
            };
            self.follower_read_locked(log, replica, params, fetch, now_ms)?
        };
        if let Some(hw) = hw_moved {
            self.hw_tx.send_replace(hw);
        }
        if let Some((intent, sink)) = intent {
            tracing::info!(topic = %self.topic, partition = self.index, new_isr = ?intent.change.new_isr, "proposing ISR expansion");
            sink(intent);
        }
        Ok(FollowerRead {
            read: ReadResult {
                offsets: self.with_remote_start(read.offsets),
                records: read.records,
                aborted: read.aborted,
            },
            diverging_epoch: diverging,
        })
    }

    /// The part of [`Self::read_for_follower`] under the partition lock.
    fn follower_read_locked(
        &self,
        log: &mut Log,
        replica: &mut ReplicaSet,
        params: FetchParams,
        fetch: FollowerFetch,
        now_ms: i64,
    ) -> Result<LockedFollowerRead, PartitionError> {
        if let Some(diverging) = diverging_epoch(log, params.fetch_offset, fetch) {
            let read = ReadResult {
                offsets: local_offsets(log),
                records: Ok(ReadInfo::default()),
                aborted: Vec::new(),
            };
            Ok((read, Some(diverging), None, None))
        } else if params.fetch_offset < log.log_start_offset() && self.remote_enabled() {
            let read = ReadResult {
                offsets: local_offsets(log),
                records: Err(PartitionError::OffsetMovedToTieredStorage {
                    offset: params.fetch_offset,
                    local_log_start: log.log_start_offset(),
                }),
                aborted: Vec::new(),
            };
            Ok((read, None, None, None))
        } else if params.fetch_offset > log.log_end_offset()
            || params.fetch_offset < log.log_start_offset()
        {
            let records = Err(PartitionError::Log(
                streamforge_log::LogError::OffsetOutOfRange {
                    offset: params.fetch_offset,
                    log_start: log.log_start_offset(),
                    log_end: log.log_end_offset(),
                },
            ));
            let read = ReadResult {
                offsets: local_offsets(log),
                records,
                // A follower reads uncommitted data: it replicates the markers themselves.
                aborted: Vec::new(),
            };
            Ok((read, None, None, None))
        } else {
            replica
                .leader
                .on_follower_log_start(fetch.replica_id, fetch.log_start_offset);
            let outcome = replica
                .leader
                .on_follower_fetch(
                    fetch.replica_id,
                    params.fetch_offset,
                    log.log_end_offset(),
                    now_ms,
                )
                .map_err(|_| PartitionError::NotLeaderOrFollower)?;
            if let Some(hw) = outcome.high_watermark {
                log.set_high_watermark(hw);
            }
            let intent = outcome
                .isr_change
                .map(|c| (self.intent(replica, c), replica.sink.clone()));
            let offsets = local_offsets(log);
            let records = if fetch.throttled && !replica.leader.isr().contains(&fetch.replica_id) {
                Ok(ReadInfo::default())
            } else {
                log.read(
                    params.fetch_offset,
                    params.max_bytes,
                    offsets.log_end_offset,
                    params.min_one_message,
                )
                .map_err(PartitionError::Log)
            };
            let read = ReadResult {
                offsets,
                records,
                aborted: Vec::new(),
            };
            Ok((read, None, intent, outcome.high_watermark))
        }
    }

    /// Run `f` on the log if this broker follows in `leader_epoch` (a fetcher's answer from
    /// an older leadership is dropped: FENCED_LEADER_EPOCH).
    pub(super) fn with_follower_log<R>(
        &self,
        leader_epoch: i32,
        f: impl FnOnce(&mut Log) -> Result<R, PartitionError>,
    ) -> Result<R, PartitionError> {
        self.with_state(|serving, log| {
            if serving.role != PartitionRole::Follower {
                return Err(PartitionError::NotLeaderOrFollower);
            }
            if serving.leader_epoch != leader_epoch {
                return Err(PartitionError::FencedLeaderEpoch {
                    requested: leader_epoch,
                    current: serving.leader_epoch,
                });
            }
            f(log)
        })?
    }

    /// What this follower's next Fetch asks for.
    pub fn follower_position(&self) -> Result<FollowerPosition, PartitionError> {
        let position = self.with_state(|serving, log| FollowerPosition {
            fetch_offset: log.log_end_offset(),
            log_start_offset: log.log_start_offset(),
            last_fetched_epoch: log.latest_epoch().unwrap_or(-1),
            leader_epoch: serving.leader_epoch,
            high_watermark: log.high_watermark(),
        });
        let mut position = position?;
        // What it serves consumers starts in the remote tier when there is one.
        if let Some(tiering) = self.tiering() {
            position.log_start_offset =
                tiering.log_start_offset(&self.topic, self.index, position.log_start_offset);
        }
        Ok(position)
    }

    /// Append the leader's batches (offsets and epochs as the leader assigned them) and take
    /// its high watermark (never past this log's end). Returns the new log end offset.
    pub fn append_as_follower(
        &self,
        leader_epoch: i32,
        batches: &[u8],
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) -> Result<i64, PartitionError> {
        self.replication_counters
            .note_leader_high_watermark(leader_high_watermark);
        let hw = self.with_follower_log(leader_epoch, |log| {
            // One call per run of batches with the same leader epoch: the log records one
            // epoch start per call (the simulation found epochs lost when a fetch spanned two).
            for run in epoch_runs(batches) {
                log.append_as_follower(run)?;
            }
            let hw = leader_high_watermark.min(log.log_end_offset());
            if hw > log.high_watermark() {
                log.set_high_watermark(hw);
            }
            // The leader's log start moved (DeleteRecords, retention): follow it, as Kafka's
            // follower does (`maybeIncrementLogStartOffset`, LeaderOffsetIncremented), never
            // past what this replica knows is committed. Consumers reading from this replica
            // (KIP-392) then see the leader's low watermark, not records deleted there.
            let start = leader_log_start_offset.min(log.high_watermark());
            if start > log.log_start_offset() {
                tracing::debug!(topic = %self.topic, partition = self.index, from = log.log_start_offset(), to = start, "log start follows the leader's");
                log.delete_records_before(start)?;
            }
            Ok((log.log_end_offset(), log.high_watermark()))
        })?;
        self.hw_tx.send_replace(hw.1);
        Ok(hw.0)
    }

    /// The leader answered `(epoch, end offset)` for this follower's epoch: truncate the
    /// divergent tail. Returns the new log end offset and whether truncation is complete.
    pub fn truncate_by_epoch(
        &self,
        leader_epoch: i32,
        leader_end: (i32, i64),
    ) -> Result<(i64, bool), PartitionError> {
        self.with_follower_log(leader_epoch, |log| {
            let (offset, done) = truncation_offset(
                leader_end,
                |e| log.end_offset_for_epoch(e),
                log.log_end_offset(),
                log.high_watermark(),
            );
            if offset < log.log_end_offset() {
                tracing::info!(topic = %self.topic, partition = self.index, from = log.log_end_offset(), to = offset, "truncating divergent tail");
            }
            // Also at the log end: that drops an epoch this replica began as leader without
            // appending anything (`Log::truncate_to`).
            log.truncate_to(offset)?;
            Ok((log.log_end_offset(), done))
        })
    }

    /// The leader no longer has this follower's offsets (retention moved its log start past
    /// them): start again empty at the leader's log start.
    pub fn restart_follower_at(
        &self,
        leader_epoch: i32,
        offset: i64,
    ) -> Result<(), PartitionError> {
        self.with_follower_log(leader_epoch, |log| {
            log.truncate_fully_and_start_at(offset)?;
            Ok(())
        })
    }
}

impl Partition {
    /// Read-only, for `/metrics` and the dashboard: each follower's progress while this broker
    /// leads with followers (`None` otherwise: a lone leader or not the leader).
    pub fn replica_progress(&self, now_ms: i64) -> Option<ReplicaProgress> {
        let guard = self.state.lock();
        let log = guard.log.as_ref()?;
        if guard.serving.role != PartitionRole::Leader {
            return None;
        }
        let replica = guard.serving.replica.as_ref()?;
        let leader = &replica.leader;
        let log_end_offset = log.log_end_offset();
        let followers = leader
            .replicas()
            .iter()
            .filter(|id| **id != replica.local_id)
            .filter_map(|id| {
                let f = leader.follower(*id)?;
                let fetched = (f.log_end_offset >= 0).then_some(f.log_end_offset);
                Some(FollowerProgress {
                    id: *id,
                    log_end_offset: fetched,
                    lag_messages: fetched.map(|leo| (log_end_offset - leo).max(0)),
                    in_sync: leader.isr().contains(id),
                    time_since_caught_up_ms: now_ms.saturating_sub(f.last_caught_up_ms).max(0),
                })
            })
            .collect();
        Some(ReplicaProgress {
            replicas: leader.replicas().to_vec(),
            isr: leader.isr().to_vec(),
            partition_epoch: leader.partition_epoch(),
            log_end_offset,
            under_min_isr: leader.is_under_min_isr(),
            effective_min_isr: leader.effective_min_isr(),
            followers,
        })
    }

    /// `(base offset, last offset, leader epoch, CRC)` of every batch below `up_to`, whatever
    /// the role: how tests check that replicas agree up to the high watermark. Bounded by
    /// [`BATCH_IDS_MAX`].
    pub fn batch_ids(&self, up_to: i64) -> Result<Vec<(i64, i64, i32, u32)>, PartitionError> {
        self.with_log(|log| {
            let mut out = Vec::new();
            let mut offset = log.log_start_offset();
            while offset < up_to.min(log.log_end_offset()) && out.len() < BATCH_IDS_MAX {
                let read = log.read(offset, 1 << 20, up_to, true)?;
                if read.bytes == 0 {
                    break;
                }
                for slice in &read.slices {
                    let mut pos = 0;
                    while pos < slice.len() {
                        let h =
                            streamforge_protocol::batch::RecordBatchHeader::parse(&slice[pos..])
                                .map_err(|e| PartitionError::InvalidRequest(e.to_string()))?;
                        out.push((
                            h.base_offset(),
                            h.last_offset(),
                            h.partition_leader_epoch(),
                            h.crc(),
                        ));
                        offset = h.last_offset() + 1;
                        pos += h.total_bytes();
                    }
                }
            }
            Ok(out)
        })?
    }
}

/// Split whole batches into runs that share a `partitionLeaderEpoch`.
fn epoch_runs(batches: &[u8]) -> Vec<&[u8]> {
    use streamforge_protocol::batch::RecordBatchHeader;
    let mut runs = Vec::new();
    let (mut start, mut pos, mut epoch) = (0usize, 0usize, None);
    while pos < batches.len() {
        let Ok(h) = RecordBatchHeader::parse(&batches[pos..]) else {
            break;
        };
        if epoch.is_some_and(|e| e != h.partition_leader_epoch()) {
            runs.push(&batches[start..pos]);
            start = pos;
        }
        epoch = Some(h.partition_leader_epoch());
        pos += h.total_bytes();
    }
    // The rest (or a malformed tail, which the log's validation refuses).
    if start < batches.len() {
        runs.push(&batches[start..]);
    }
    runs
}

/// Most batches [`Partition::batch_ids`] lists.
pub const BATCH_IDS_MAX: usize = 100_000;

/// Kafka's check: the follower's last fetched epoch ends on the leader before its fetch
/// offset, or the leader never had that epoch, so its log diverges.
fn diverging_epoch(log: &Log, fetch_offset: i64, fetch: FollowerFetch) -> Option<(i32, i64)> {
    if fetch.last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end) = log
        .end_offset_for_epoch(fetch.last_fetched_epoch)
        .unwrap_or((-1, -1));
    (end < fetch_offset || epoch < fetch.last_fetched_epoch).then_some((epoch, end))
}

#[cfg(test)]
#[path = "throttle_tests.rs"]
mod throttle_tests;

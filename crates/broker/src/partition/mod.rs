//! `Partition`: the one owner of a partition's state on this broker — its log, its role
//! (leader / follower / none), its leader epoch, its high watermark and the wake-ups of fetches
//! waiting on it, and the tiered (remote) data below its local log start.
//!
//! Handlers, the group service, the tiering pass and the dashboard ask a `Partition` for what
//! they need (`append`, `read`, `list_offsets`, `delete_records`, `offsets`, ...) and never see
//! the `Log`: the rules for the high watermark, leader epochs, tiered reads and (with
//! replication) the ISR live here, in one place. `ReplicaManager` decides which partitions are
//! hosted and moves them between roles (`make_leader`, `make_follower`, `stop`).
//!
//! One lock guards the log together with the role and epoch, so an append or a read sees one
//! consistent role: a partition that becomes a follower cannot take a leader append halfway.

mod maintenance;
mod offsets;
pub mod purgatory;
mod read;
pub mod replica;
mod replica_progress;
pub mod replica_selector;
mod replication;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tiered_restart_tests;
mod txn;
#[cfg(test)]
mod txn_tiered_tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use streamforge_log::{AppendInfo, Log, LogConfig, LogError, ProducerEntry};
use streamforge_tiered::{TieredError, TieringManager};
use tokio::sync::watch;

use crate::util::now_ms;

pub use offsets::{DELETE_TO_HIGH_WATERMARK, FoundOffset, OffsetSpec};
pub use read::{ConsumerFetch, FetchIsolation, FetchParams, ReadResult};
pub use replica_progress::{FollowerProgress, IsrChangeCounts, ReplicaProgress};
pub use replication::{
    AlterPartitionIntent, FollowerFetch, FollowerPosition, FollowerRead, IsrChangeSink,
    OpenHighWatermark,
};
pub use txn::MarkerResult;

/// Leader epoch of a partition this broker leads from its creation (no elections yet).
pub const LEADER_EPOCH: i32 = 0;

/// What this broker is for a partition (Kafka's `Partition` leader / follower state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRole {
    /// Takes produce, serves consumers and followers, owns the high watermark.
    Leader,
    /// Replicates from the leader; clients get NOT_LEADER_OR_FOLLOWER.
    Follower,
    /// Stopped (deleted, moved away, broker shutting down), or a replicated partition just
    /// reopened whose role the metadata has not set yet: nothing is served.
    None,
}

/// `acks` of a Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0: no response.
    None,
    /// acks=1: the leader's log has it.
    Leader,
    /// acks=-1 (all): every in-sync replica has it (on one broker: this one).
    All,
}

impl Acks {
    /// The Produce request's `acks` field; `None` for a value Kafka rejects
    /// (INVALID_REQUIRED_ACKS).
    pub fn from_kafka(acks: i16) -> Option<Acks> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

/// How an append is to be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendParams {
    /// What the producer waits for. With one replica (the ISR is this broker) acks=all is
    /// satisfied by the local append; `min.insync.replicas` and the acks=all wait for
    /// followers belong here once replication exists.
    pub acks: Acks,
}

/// A consistent snapshot of a partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The first offset clients can read: the remote start when tiered data reaches the
    /// local log, else the local log start.
    pub log_start_offset: i64,
    /// The first offset held in the local log.
    pub local_log_start_offset: i64,
    /// Offsets below it are committed (readable by consumers).
    pub high_watermark: i64,
    /// The offset the next append gets.
    pub log_end_offset: i64,
    /// The end of what read_committed consumers may read (= the high watermark: no
    /// transactions yet).
    pub last_stable_offset: i64,
}

/// Errors of partition operations, each with the Kafka error code a client gets.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("partition is no longer hosted here")]
    Gone,
    #[error("partition is offline: {0}")]
    Offline(String),
    #[error("this broker is not the leader of the partition")]
    NotLeaderOrFollower,
    #[error("leader epoch {requested} is older than the current leader epoch {current}")]
    FencedLeaderEpoch { requested: i32, current: i32 },
    #[error("leader epoch {requested} is newer than the current leader epoch {current}")]
    UnknownLeaderEpoch { requested: i32, current: i32 },
    #[error("offset {offset} is out of range [{log_start}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        high_watermark: i64,
    },
    /// A follower fetch below the leader's local log start of a tiered partition (KIP-405):
    /// the follower takes the remote part from the manifest and fetches from the leader's
    /// local log start.
    #[error("offset {offset} is below the local log start {local_log_start}: in tiered storage")]
    OffsetMovedToTieredStorage { offset: i64, local_log_start: i64 },
    /// ListOffsets on a new leader whose high watermark is still below the start of its
    /// epoch (retriable: the followers' next fetches move it).
    #[error(
        "the high watermark {high_watermark} lags the start {epoch_start} of this leader's epoch"
    )]
    OffsetNotAvailable {
        high_watermark: i64,
        epoch_start: i64,
    },
    #[error("{0}")]
    InvalidRequest(String),
    /// acks=all before the append: the ISR is smaller than `min.insync.replicas`.
    #[error("the ISR has {isr} members, fewer than min.insync.replicas {min}")]
    NotEnoughReplicas { isr: usize, min: usize },
    /// acks=all: appended and committed, but the ISR shrank below `min.insync.replicas`.
    #[error("the ISR shrank below min.insync.replicas after the append")]
    NotEnoughReplicasAfterAppend,
    /// acks=all: the ISR did not get the batch within the request's `timeout_ms`.
    #[error("the in-sync replicas did not acknowledge within the request timeout")]
    RequestTimedOut,
    /// A tiered partition whose remote state is not loaded yet (store unreachable since
    /// start-up): retriable, so a consumer waits instead of resetting its offset.
    #[error("the remote storage of this tiered partition is not loaded yet")]
    RemoteNotLoaded,
    /// A transactional batch of a producer with no open transaction here, for a partition
    /// its transaction coordinator has not got (KIP-890 part 1 verification).
    #[error("the partition was not added to the transaction")]
    NotInTransaction,
    /// A transactional batch checked with the coordinator whose verification guard no longer
    /// holds (a marker of the producer landed between the check and the append: Kafka's
    /// InvalidTxnStateException, with its message).
    #[error("Record was not part of an ongoing transaction")]
    TxnNotVerified,
    #[error(transparent)]
    Remote(#[from] TieredError),
    #[error(transparent)]
    Log(#[from] LogError),
}

impl PartitionError {
    pub fn kafka_code(&self) -> i16 {
        match self {
            PartitionError::Gone => ResponseError::UnknownTopicOrPartition.code(),
            PartitionError::Offline(_) | PartitionError::RemoteNotLoaded => {
                ResponseError::KafkaStorageError.code()
            }
            PartitionError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower.code(),
            PartitionError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch.code(),
            PartitionError::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch.code(),
            PartitionError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
            PartitionError::OffsetMovedToTieredStorage { .. } => {
                ResponseError::OffsetMovedToTieredStorage.code()
            }
            PartitionError::InvalidRequest(_) => ResponseError::InvalidRequest.code(),
            PartitionError::OffsetNotAvailable { .. } => ResponseError::OffsetNotAvailable.code(),
            PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas.code(),
            PartitionError::NotEnoughReplicasAfterAppend => {
                ResponseError::NotEnoughReplicasAfterAppend.code()
            }
            PartitionError::RequestTimedOut => ResponseError::RequestTimedOut.code(),
            PartitionError::NotInTransaction | PartitionError::TxnNotVerified => {
                ResponseError::InvalidTxnState.code()
            }
            PartitionError::Remote(e) => e.kafka_code(),
            PartitionError::Log(e) => e.kafka_code(),
        }
    }

    /// A read below the log start or past the log end.
    fn is_offset_out_of_range(&self) -> bool {
        matches!(
            self,
            PartitionError::Log(LogError::OffsetOutOfRange { .. })
                | PartitionError::OffsetOutOfRange { .. }
        )
    }
}

/// How a partition reaches its remote (tiered) data.
#[derive(Clone, Default)]
pub struct RemoteTier {
    /// The broker's tiering service (`None` in tests without one).
    pub tiering: Option<Arc<TieringManager>>,
    /// The topic config `remote.storage.enable`.
    pub enabled: bool,
}

/// What the partition lock guards: the log with the role and epoch it is served under.
struct State {
    /// `None` once the partition was stopped, or if it is offline.
    log: Option<Log>,
    serving: Serving,
}

/// The role this broker has for the partition, and in which leader epoch.
struct Serving {
    role: PartitionRole,
    leader_epoch: i32,
    /// The leader's broker id while this broker follows.
    leader_id: Option<i32>,
    /// The followers this leader tracks (`None`: the ISR is this broker alone).
    replica: Option<replication::ReplicaSet>,
}

/// One partition hosted by this broker.
pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    pub dir: PathBuf,
    state: Mutex<State>,
    /// Why the log could not be opened at start-up (damaged flushed data, I/O error): the
    /// partition is offline and every operation on it answers KAFKA_STORAGE_ERROR.
    offline: Option<String>,
    /// Latest high watermark; fetches wait on it (-1 once the partition stopped).
    hw_tx: watch::Sender<i64>,
    /// Weak: the tiering service holds this partition (as its `LocalLog`) while it is
    /// registered, and the two must not keep each other alive.
    tiering: Option<Weak<TieringManager>>,
    remote_enabled: AtomicBool,
    /// ISR shrinks / expansions counted here, and a follower's view of the leader's HW.
    replication_counters: replica_progress::ReplicationCounters,
}

impl Partition {
    /// Open the log in `<data_dir>/<topic>-<index>` with its high watermark where `hw` says.
    /// Alone in its ISR it leads with the epoch its leader-epoch cache holds (a single broker
    /// never changes it). A replicated partition serves nothing (`PartitionRole::None`) until
    /// the metadata makes it leader or follower: leading from its own epoch cache, it would
    /// take appends as if alone in the ISR and commit them at once.
    fn open(
        topic: &Arc<str>,
        index: i32,
        data_dir: &Path,
        config: LogConfig,
        remote: RemoteTier,
        hw: OpenHighWatermark,
    ) -> Result<Partition, LogError> {
        let dir = data_dir.join(format!("{topic}-{index}"));
        let mut log = Log::open(&dir, config, now_ms())?;
        let leo = log.log_end_offset();
        log.set_high_watermark(hw.resolve(log.log_start_offset(), leo));
        let opened = log.high_watermark();
        assert!(
            opened <= leo && opened >= log.log_start_offset(),
            "{topic}-{index}: opened with HW {opened} outside [{}, {leo}]",
            log.log_start_offset()
        );
        let leader_epoch = log.latest_epoch().unwrap_or(LEADER_EPOCH).max(LEADER_EPOCH);
        let role = match hw {
            OpenHighWatermark::LogEnd => PartitionRole::Leader,
            OpenHighWatermark::Checkpointed(_) => PartitionRole::None,
        };
        let hw = log.high_watermark();
        let (hw_tx, _) = watch::channel(hw);
        Ok(Partition {
            topic: topic.clone(),
            index,
            dir,
            state: Mutex::new(State {
                log: Some(log),
                serving: Serving {
                    role,
                    leader_epoch,
                    leader_id: None,
                    replica: None,
                },
            }),
            offline: None,
            hw_tx,
            tiering: remote.tiering.as_ref().map(Arc::downgrade),
            remote_enabled: AtomicBool::new(remote.enabled),
            replication_counters: Default::default(),
        })
    }

    /// Open a partition at start-up; a log that cannot be opened makes this partition offline
    /// (logged at ERROR with its path) instead of stopping the broker: every other partition
    /// serves, as docs/STORAGE.md promises.
    pub(crate) fn open_or_offline(
        topic: &Arc<str>,
        index: i32,
        data_dir: &Path,
        config: LogConfig,
        remote: RemoteTier,
        hw: OpenHighWatermark,
    ) -> Self {
        match Partition::open(topic, index, data_dir, config, remote.clone(), hw) {
            Ok(p) => p,
            Err(e) => {
                let dir = data_dir.join(format!("{topic}-{index}"));
                tracing::error!(
                    path = %dir.display(),
                    error = %e,
                    "cannot open partition log; the partition is offline (KAFKA_STORAGE_ERROR) until repaired"
                );
                Partition {
                    topic: topic.clone(),
                    index,
                    dir,
                    state: Mutex::new(State {
                        log: None,
                        serving: Serving {
                            role: PartitionRole::Leader,
                            leader_epoch: LEADER_EPOCH,
                            leader_id: None,
                            replica: None,
                        },
                    }),
                    offline: Some(e.to_string()),
                    hw_tx: watch::channel(0).0,
                    tiering: remote.tiering.as_ref().map(Arc::downgrade),
                    remote_enabled: AtomicBool::new(remote.enabled),
                    replication_counters: Default::default(),
                }
            }
        }
    }

    /// A new partition (topic creation, CreatePartitions): this broker leads it from now on, so
    /// the leader epoch starts at the log end offset here (Kafka's `makeLeader`), not in the
    /// first Produce request, which would otherwise write and fsync the leader-epoch checkpoint.
    /// Partitions loaded at startup assign it on their first append, as before: an empty log's
    /// epoch entry does not survive recovery (Kafka truncates entries at or past the log end),
    /// and re-adding it for every idle partition would slow every restart down.
    pub(crate) fn create(
        topic: &Arc<str>,
        index: i32,
        data_dir: &Path,
        config: LogConfig,
        remote: RemoteTier,
    ) -> Result<Partition, LogError> {
        let partition = Partition::open(
            topic,
            index,
            data_dir,
            config,
            remote,
            OpenHighWatermark::LogEnd,
        )?;
        if let Ok(assigned) =
            partition.with_state(|serving, log| log.assign_epoch_start_offset(serving.leader_epoch))
        {
            assigned?;
        }
        Ok(partition)
    }

    /// Why this partition is offline, if it is.
    pub fn offline_reason(&self) -> Option<&str> {
        self.offline.as_deref()
    }

    pub fn role(&self) -> PartitionRole {
        self.state.lock().serving.role
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state.lock().serving.leader_epoch
    }

    /// The largest batch the log takes (`max.message.bytes`); `None` when the log is gone.
    pub fn max_message_bytes(&self) -> Option<u64> {
        self.with_log(|log| log.config().max_message_bytes).ok()
    }

    /// The leader this broker follows (`None` unless the role is `Follower`).
    pub fn leader_id(&self) -> Option<i32> {
        self.state.lock().serving.leader_id
    }

    /// Lead the partition from `leader_epoch` on (Kafka's `makeLeader`): record the epoch's
    /// start at the log end offset. An epoch older than the current one is refused (a stale
    /// decision must not take leadership back).
    pub fn make_leader(&self, leader_epoch: i32) -> Result<(), PartitionError> {
        let hw = self.with_state(|serving, log| {
            if leader_epoch < serving.leader_epoch {
                return Err(PartitionError::FencedLeaderEpoch {
                    requested: leader_epoch,
                    current: serving.leader_epoch,
                });
            }
            log.assign_epoch_start_offset(leader_epoch)?;
            serving.role = PartitionRole::Leader;
            serving.leader_epoch = leader_epoch;
            serving.leader_id = None;
            serving.replica = None;
            // Alone in the ISR: everything this log holds is committed.
            let leo = log.log_end_offset();
            log.set_high_watermark(leo);
            Ok(log.high_watermark())
        })??;
        self.hw_tx.send_replace(hw);
        Ok(())
    }

    /// Follow `leader_id` from `leader_epoch` on (Kafka's `makeFollower`). Only the role
    /// changes here; truncation and the fetcher come with replication. Waiting fetches wake
    /// and get NOT_LEADER_OR_FOLLOWER.
    pub fn make_follower(&self, leader_epoch: i32, leader_id: i32) -> Result<(), PartitionError> {
        let hw = self.with_state(|serving, log| {
            if leader_epoch < serving.leader_epoch {
                return Err(PartitionError::FencedLeaderEpoch {
                    requested: leader_epoch,
                    current: serving.leader_epoch,
                });
            }
            serving.role = PartitionRole::Follower;
            serving.leader_epoch = leader_epoch;
            serving.leader_id = Some(leader_id);
            serving.replica = None;
            Ok(log.high_watermark())
        })??;
        self.hw_tx.send_replace(hw);
        Ok(())
    }

    /// Stop serving the partition: close its log (flushing it and writing the clean-shutdown
    /// marker), or with `delete` drop it and remove its directory. Waiting fetches wake and see
    /// it is gone.
    pub fn stop(&self, delete: bool) -> Result<(), PartitionError> {
        let log = {
            let mut state = self.state.lock();
            state.serving.role = PartitionRole::None;
            state.serving.leader_id = None;
            state.serving.replica = None;
            state.log.take()
        };
        self.hw_tx.send_replace(-1);
        if delete {
            drop(log);
            std::fs::remove_dir_all(&self.dir).map_err(LogError::from)?;
        } else if let Some(log) = log {
            log.close()?;
        }
        Ok(())
    }

    /// Run `f` with the log locked, whatever the role.
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> Result<R, PartitionError> {
        self.with_state(|_, log| f(log))
    }

    /// Run `f` with the role, epoch and log locked.
    fn with_state<R>(
        &self,
        f: impl FnOnce(&mut Serving, &mut Log) -> R,
    ) -> Result<R, PartitionError> {
        let mut guard = self.state.lock();
        let State { log, serving } = &mut *guard;
        let Some(log) = log.as_mut() else {
            return Err(self.missing());
        };
        Ok(f(serving, log))
    }

    /// Run `f` with the log locked if this broker leads the partition in the epoch the client
    /// knows (`current_leader_epoch`, -1 = not checked).
    fn with_leader_log<R>(
        &self,
        current_leader_epoch: i32,
        f: impl FnOnce(&mut Log) -> R,
    ) -> Result<R, PartitionError> {
        self.with_leader_log_epoch(current_leader_epoch, |log, _| f(log))
    }

    /// Like [`Self::with_leader_log`], also passing the leader epoch. The client's epoch is
    /// checked first, then whether the log is here, then the role (the order clients saw so
    /// far).
    fn with_leader_log_epoch<R>(
        &self,
        current_leader_epoch: i32,
        f: impl FnOnce(&mut Log, i32) -> R,
    ) -> Result<R, PartitionError> {
        let mut guard = self.state.lock();
        let State { log, serving } = &mut *guard;
        check_leader_epoch(current_leader_epoch, serving.leader_epoch)?;
        let Some(log) = log.as_mut() else {
            return Err(self.missing());
        };
        if serving.role != PartitionRole::Leader {
            return Err(PartitionError::NotLeaderOrFollower);
        }
        Ok(f(log, serving.leader_epoch))
    }

    /// Why there is no log: offline since start-up, or stopped.
    fn missing(&self) -> PartitionError {
        match &self.offline {
            Some(why) => PartitionError::Offline(why.clone()),
            None => PartitionError::Gone,
        }
    }

    /// Append as leader, advance the high watermark, wake waiting fetches.
    pub fn append(
        &self,
        batches: &mut [u8],
        params: AppendParams,
    ) -> Result<AppendInfo, PartitionError> {
        self.append_checked(batches, params, |_| Ok(()))
    }

    /// `append`, with `precheck` run on the log under the partition's lock first (the
    /// transaction check of a transactional batch: nothing can end a transaction between it
    /// and the append).
    pub(crate) fn append_checked(
        &self,
        batches: &mut [u8],
        params: AppendParams,
        precheck: impl FnOnce(&Log) -> Result<(), PartitionError>,
    ) -> Result<AppendInfo, PartitionError> {
        // Without followers the ISR is this broker, so every `acks` is met by the local
        // append; with followers acks=all first needs `min.insync.replicas` in the ISR, and
        // the caller waits in the purgatory for the high watermark.
        let AppendParams { acks } = params;
        let appended = self.with_state(|serving, log| {
            if serving.role != PartitionRole::Leader {
                return Err(PartitionError::NotLeaderOrFollower);
            }
            precheck(log)?;
            if acks == Acks::All
                && let Some(replica) = &serving.replica
            {
                replica.check_enough_replicas()?;
            }
            let info = log
                .append_as_leader(batches, serving.leader_epoch, now_ms())
                .map_err(PartitionError::Log)?;
            let leo = log.log_end_offset();
            match &mut serving.replica {
                // One replica: the high watermark follows the log end.
                None => log.set_high_watermark(leo),
                Some(replica) => replica.on_local_append(log, leo),
            }
            debug_assert!(
                serving.replica.is_some() || info.last_offset < leo || info.duplicate,
                "appended below the HW"
            );
            Ok((info, log.high_watermark()))
        })?;
        if let Err(PartitionError::Log(e)) = &appended
            && matches!(e, LogError::Io(_) | LogError::Corrupted(_))
        {
            crate::storage_errors::record(&self.topic, self.index, e);
        }
        let (info, hw) = appended?;
        // Also wakes followers' long polls (the log end moved even when the HW did not).
        self.hw_tx.send_replace(hw);
        Ok(info)
    }

    /// Flush to disk (acks=all with a flush policy, shutdown).
    pub fn flush(&self) -> Result<(), PartitionError> {
        self.with_log(|log| log.flush())??;
        Ok(())
    }

    /// The high watermark now (what the `replication-offset-checkpoint` records).
    pub fn high_watermark(&self) -> Result<i64, PartitionError> {
        self.with_log(|log| log.high_watermark())
    }

    /// Watch the high watermark: a long-polling fetch waits for it to change (it also wakes
    /// when records are deleted, the role changes or the partition stops, -1).
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.hw_tx.subscribe()
    }

    /// Publish the high watermark after a change to the log (retention, DeleteRecords).
    fn publish_high_watermark(&self) {
        if let Ok(hw) = self.with_log(|log| log.high_watermark()) {
            self.hw_tx.send_replace(hw);
        }
    }

    /// The partition's offsets now.
    pub fn offsets(&self) -> Result<PartitionOffsets, PartitionError> {
        let local = self.with_log(|log| local_offsets(log))?;
        Ok(self.with_remote_start(local))
    }

    /// Bytes of the local log.
    pub fn size_bytes(&self) -> Result<u64, PartitionError> {
        self.with_log(|log| log.size_bytes())
    }

    /// Bytes held in remote storage (`None` when the partition is not tiered).
    pub fn remote_size_bytes(&self) -> Option<u64> {
        self.remote().map(|p| p.size_bytes())
    }

    /// The idempotent producers this partition tracks (DescribeProducers).
    pub fn producers(&self) -> Result<Vec<ProducerEntry>, PartitionError> {
        self.with_log(|log| log.producers())
    }

    /// The client-visible log start: the remote start when remote data reaches the local log.
    /// (The tiering service's lock is taken after the log's is released, never under it.)
    fn with_remote_start(&self, mut offsets: PartitionOffsets) -> PartitionOffsets {
        if let Some(tiering) = self.tiering() {
            offsets.log_start_offset =
                tiering.log_start_offset(&self.topic, self.index, offsets.local_log_start_offset);
        }
        offsets
    }

    /// The remote state of this partition, when it is tiered and registered.
    fn remote(&self) -> Option<Arc<streamforge_tiered::RemotePartition>> {
        self.tiering()?.partition(&self.topic, self.index)
    }

    /// The broker's tiering service, while it runs.
    fn tiering(&self) -> Option<Arc<TieringManager>> {
        self.tiering.as_ref()?.upgrade()
    }

    /// Whether the topic config turns tiering on (`remote.storage.enable`).
    pub fn remote_enabled(&self) -> bool {
        self.remote_enabled.load(Ordering::Relaxed)
    }

    /// Drop the log without closing it (undoing a failed creation).
    pub(crate) fn take_log(&self) -> Option<Log> {
        self.state.lock().log.take()
    }
}

/// The offsets of the local log (the log start is the local one).
fn local_offsets(log: &Log) -> PartitionOffsets {
    let hw = log.high_watermark();
    PartitionOffsets {
        log_start_offset: log.log_start_offset(),
        local_log_start_offset: log.log_start_offset(),
        high_watermark: hw,
        log_end_offset: log.log_end_offset(),
        last_stable_offset: log.last_stable_offset(),
    }
}

/// Validate a client's view of the leader epoch (-1 = not checked): older is fenced, newer
/// is not known here yet.
fn check_leader_epoch(requested: i32, current: i32) -> Result<(), PartitionError> {
    if requested < 0 || requested == current {
        Ok(())
    } else if requested < current {
        Err(PartitionError::FencedLeaderEpoch { requested, current })
    } else {
        Err(PartitionError::UnknownLeaderEpoch { requested, current })
    }
}

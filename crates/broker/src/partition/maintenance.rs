//! Housekeeping of a partition's log: the periodic tick (roll, retention, `flush.ms`,
//! background flush, recovery-point checkpoint), the checkpoint after start-up recovery,
//! config changes, the scrubber's view of sealed segments, and the tiering pass's view of the
//! local log.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use streamforge_log::{LogConfig, LogError, SealedSegment};
use streamforge_tiered::{LocalLog, TierRole};

use super::{Partition, PartitionError, PartitionRole};

impl Partition {
    /// Roll, retention, `flush.ms`, the recovery-point checkpoint, and the periodic background
    /// flush (`background_flush_ms`, 0 = off), which only queues the fsync for the log crate's
    /// flusher thread. The checkpoint's fsync runs after the log's lock is released.
    pub fn tick(&self, now_ms: i64, background_flush_ms: u64) {
        // A leader with followers drops the ones lagging past `replica.lag.time.max.ms`.
        self.maybe_shrink_isr(now_ms);
        let interval_ms = i64::try_from(background_flush_ms).unwrap_or(i64::MAX);
        let ticked = self.with_log(|log| {
            let r = log.tick_deferred(now_ms);
            log.request_background_flush(now_ms, interval_ms);
            r
        });
        let ticked = ticked.map(|r| {
            r.and_then(|advance| match advance {
                Some(a) => a.write().map_err(LogError::from),
                None => Ok(()),
            })
        });
        match ticked {
            Ok(Err(e)) => {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "log tick failed")
            }
            // Retention may have moved the log start: waiting fetches re-check.
            Ok(Ok(())) => self.publish_high_watermark(),
            Err(_) => {}
        }
    }

    /// Right after start-up: fsync the tail an unclean log re-scanned and move its
    /// recovery-point checkpoint past it. Blocking; the fsync runs outside the log's lock.
    pub fn checkpoint_recovery(&self, now_ms: i64) -> Result<(), LogError> {
        let ticket =
            self.with_log(|log| (log.recovery_checked_bytes() > 0).then(|| log.flush_ticket()));
        let Ok(Some(ticket)) = ticket else {
            return Ok(());
        };
        ticket.wait().map_err(LogError::from)?;
        match self.with_log(|log| log.tick_deferred(now_ms)) {
            Ok(Ok(Some(advance))) => advance.write().map_err(LogError::from),
            Ok(Err(e)) => Err(e),
            Ok(Ok(None)) | Err(_) => Ok(()),
        }
    }

    /// Bytes whose CRC the log checked when it was opened (unclean-shutdown recovery).
    pub fn recovery_checked_bytes(&self) -> u64 {
        self.with_log(|log| log.recovery_checked_bytes())
            .unwrap_or(0)
    }

    /// Apply changed topic configs (the log's, whether the topic tiers, and a leader's
    /// `min.insync.replicas`: a lower one can release a high watermark held under min ISR,
    /// which then wakes waiting fetches and acks=all produces).
    pub fn update_config(&self, config: LogConfig, remote_enabled: bool) {
        self.remote_enabled.store(remote_enabled, Ordering::Relaxed);
        let min_isr = config.min_insync_replicas;
        let moved = self.with_state(|serving, log| {
            log.update_config(config);
            let replica = serving.replica.as_mut()?;
            let moved = replica.set_min_insync_replicas(log, min_isr);
            replica.note_min_isr(&self.topic, self.index);
            moved
        });
        if let Ok(Some(hw)) = moved {
            self.hw_tx.send_replace(hw);
        }
    }

    /// OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): the leader's local log starts at
    /// `leader_local_start`, above this follower's fetch offset, and what is below it is
    /// remote. Learn the remote part from the manifest first (so the log start clients see
    /// here is the remote start at once), then start the local log at the leader's local
    /// start and fetch from there. Remote data is never copied to a follower.
    ///
    /// The producer state there comes from the remote producer snapshot uploaded with the
    /// segment ending at that offset (KIP-405's follower does the same): the producers' last
    /// sequences (idempotence) and the transactions open across it, so an ABORT copied later
    /// ends its transaction and is indexed here too. When the leader's local start lies inside
    /// a remote segment, the local log starts at that segment's end instead (the leader holds
    /// those offsets). Without such a snapshot (manifest entries from before end-state
    /// snapshots) the local log starts empty at the leader's local start, as before, with a
    /// warning; when the store cannot hand out a snapshot the manifest names, nothing changes
    /// and the error goes back to the fetcher, which tries again.
    pub async fn restart_follower_above_remote(
        &self,
        leader_epoch: i32,
        leader_local_start: i64,
    ) -> Result<(), PartitionError> {
        let mut snapshot = None;
        if let (Some(remote), Some(tiering)) = (self.remote(), self.tiering()) {
            // Best effort: the tiering pass reads the manifest again each interval.
            if let Err(e) = tiering.storage().follow(&remote).await {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot read the remote manifest; the tiering pass retries");
            }
            // A snapshot the manifest names but the store does not hand out now: restart later
            // (the fetcher asks again next round, as Kafka's follower retries) rather than
            // start without the producer state.
            snapshot = tiering
                .storage()
                .producer_snapshot_for_local_start(&remote, leader_local_start)
                .await
                .inspect_err(|e| {
                    tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot read the remote producer snapshot; restart above the remote log retried");
                })?;
        }
        let start = snapshot.as_ref().map_or(leader_local_start, |s| s.0);
        let below_local =
            self.with_follower_log(leader_epoch, |log| Ok(log.log_end_offset() < start))?;
        if !below_local {
            return Ok(()); // already there (an older answer raced a newer one)
        }
        tracing::info!(topic = %self.topic, partition = self.index, leader_local_start, start, "follower below the leader's local log start: remote part taken from the manifest, local log restarts above it");
        self.with_follower_log(leader_epoch, |log| {
            log.truncate_fully_and_start_at(start)?;
            match &snapshot {
                Some((_, bytes)) => match log.load_producer_snapshot_at_start(start, bytes) {
                    Ok(producers) => {
                        tracing::info!(topic = %self.topic, partition = self.index, start, producers, "producer state taken from the remote producer snapshot");
                    }
                    Err(e) => {
                        tracing::warn!(topic = %self.topic, partition = self.index, start, error = %e, "remote producer snapshot unusable; producer state starts empty");
                    }
                },
                None => {
                    tracing::warn!(topic = %self.topic, partition = self.index, start, "no remote producer snapshot at the restart offset; producer state starts empty (transactions open across it are not known here)");
                }
            }
            Ok(())
        })
    }

    /// Zero-copy views of the sealed segments (the scrubber checks them outside the lock).
    pub fn sealed_segments(&self) -> Result<Vec<SealedSegment>, PartitionError> {
        self.with_log(|log| log.sealed_segments())
    }
}

/// The local log as the tiering pass sees it.
impl LocalLog for Partition {
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    fn local_log_start_offset(&self) -> i64 {
        // Not `offsets()`: the tiering pass calls this, and it needs no remote lookup.
        self.with_log(|log| log.log_start_offset())
            .unwrap_or(i64::MAX)
    }

    fn delete_local_before(&self, offset: i64) -> Result<(), String> {
        self.delete_local_records_before(offset)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn tier_role(&self) -> TierRole {
        // Only the leader uploads; a follower, or a replica not serving yet, only deletes
        // local data the leader's manifest holds (KIP-405).
        let (role, leader_epoch) = {
            let guard = self.state.lock();
            (guard.serving.role, guard.serving.leader_epoch)
        };
        match role {
            PartitionRole::Leader => TierRole::Leader { leader_epoch },
            _ => TierRole::Follower,
        }
    }

    fn high_watermark(&self) -> i64 {
        self.with_log(|log| log.high_watermark())
            .unwrap_or(i64::MIN)
    }

    fn ensure_producer_snapshot(&self, offset: i64) {
        if let Ok(Err(e)) = self.with_log(|log| log.ensure_producer_snapshot(offset)) {
            tracing::warn!(topic = %self.topic, partition = self.index, offset, error = %e, "cannot write the producer snapshot for an upload");
        }
    }
}

/// The log cleaner works on the log under the partition's lock (`crate::cleaner`).
impl streamforge_log::LockedLog for Partition {
    fn with_log_locked(&self, f: &mut dyn FnMut(&mut streamforge_log::Log)) -> bool {
        self.with_log(|log| f(log)).is_ok()
    }
}

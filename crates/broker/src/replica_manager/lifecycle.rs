//! Partition lifecycle: the named role changes a metadata delta calls (`make_leader`,
//! `make_follower`, `stop_partition`), and the start-up and shutdown passes over every log
//! (checkpoint what recovery re-scanned, close every log at shutdown).

use super::{PartitionError, ReplicaManager};

/// Logs closed at once at shutdown (threads, each waiting on its own fsyncs).
pub const CLOSE_THREADS_MAX: usize = 16;

impl ReplicaManager {
    /// Lead `topic`-`index` from `leader_epoch` on (the metadata names this broker leader).
    pub fn make_leader(
        &self,
        topic: &str,
        index: i32,
        leader_epoch: i32,
    ) -> Result<(), PartitionError> {
        let partition = self.partition(topic, index).ok_or(PartitionError::Gone)?;
        partition.make_leader(leader_epoch)?;
        tracing::info!(topic, partition = index, leader_epoch, "became leader");
        Ok(())
    }

    /// Follow `leader_id` for `topic`-`index` from `leader_epoch` on. Only the role changes
    /// for now (no fetcher yet): clients get NOT_LEADER_OR_FOLLOWER.
    pub fn make_follower(
        &self,
        topic: &str,
        index: i32,
        leader_epoch: i32,
        leader_id: i32,
    ) -> Result<(), PartitionError> {
        let partition = self.partition(topic, index).ok_or(PartitionError::Gone)?;
        partition.make_follower(leader_epoch, leader_id)?;
        tracing::info!(
            topic,
            partition = index,
            leader_epoch,
            leader_id,
            "became follower"
        );
        Ok(())
    }

    /// Stop serving `topic`-`index`: close its log, or with `delete` remove its data too.
    pub fn stop_partition(
        &self,
        topic: &str,
        index: i32,
        delete: bool,
    ) -> Result<(), PartitionError> {
        let partition = self.partition(topic, index).ok_or(PartitionError::Gone)?;
        partition.stop(delete)?;
        tracing::info!(topic, partition = index, delete, "stopped partition");
        Ok(())
    }

    /// Right after start-up: fsync the tail each unclean log re-scanned and move its
    /// recovery-point checkpoint past it. Without this the checkpoint only moves with the first
    /// background flush (a second or more later), so a crash loop shorter than that re-scans an
    /// ever longer tail on every restart. Blocking; the fsyncs run outside the logs' locks.
    pub fn checkpoint_recovery(&self, now_ms: i64) {
        for p in self.all_partitions() {
            if let Err(e) = p.checkpoint_recovery(now_ms) {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "could not checkpoint the recovered log");
            }
        }
    }

    /// Flush and close every log (writes the clean-shutdown markers), then write the
    /// high-watermark checkpoint with the HWs the logs had when they closed, then, if every
    /// log closed, the broker's clean-shutdown marker with its broker epoch (KIP-966).
    ///
    /// Each close is a handful of fsyncs; one after another they made a clean shutdown of a
    /// broker with the 50 `__consumer_offsets` partitions take over a second. They are I/O
    /// waits, not CPU, so up to [`CLOSE_THREADS_MAX`] run at once.
    pub fn close_all(&self) {
        let all_closed = std::sync::atomic::AtomicBool::new(true);
        let partitions = self.all_partitions();
        // Taken before the logs close (a closed partition has no log to ask); nothing is
        // served any more, so these are the final values.
        let high_watermarks = self.high_watermarks();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..partitions.len().min(CLOSE_THREADS_MAX) {
                scope.spawn(|| {
                    while let Some(p) =
                        partitions.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        if let Err(e) = p.stop(false) {
                            all_closed.store(false, std::sync::atomic::Ordering::Relaxed);
                            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing log failed");
                        }
                    }
                });
            }
        });
        self.write_hw_checkpoint(high_watermarks);
        // KIP-966: only a broker whose every log closed cleanly may say so at its next start.
        if all_closed.into_inner() {
            let epoch = self.metadata.broker_epoch();
            if let Err(e) = super::clean_shutdown::write(&self.data_dir, epoch) {
                tracing::error!(error = %e, "could not write the clean-shutdown marker");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::PartitionRole;

    #[test]
    fn lifecycle_operations_move_a_partition_between_roles() {
        let dir = tempfile::tempdir().unwrap();
        let rm = ReplicaManager::open(dir.path(), Default::default(), None).unwrap();
        rm.create_topic("t", 2, Default::default(), false).unwrap();
        let p = rm.partition("t", 0).unwrap();
        assert_eq!(p.role(), PartitionRole::Leader);
        rm.make_follower("t", 0, 1, 2).unwrap();
        assert_eq!(
            (p.role(), p.leader_epoch(), p.leader_id()),
            (PartitionRole::Follower, 1, Some(2))
        );
        rm.make_leader("t", 0, 2).unwrap();
        assert_eq!((p.role(), p.leader_epoch()), (PartitionRole::Leader, 2));
        rm.stop_partition("t", 1, true).unwrap();
        assert!(!dir.path().join("t-1").exists());
        assert_eq!(rm.partition("t", 1).unwrap().role(), PartitionRole::None);
        let e = rm.make_leader("nope", 0, 0).unwrap_err();
        assert_eq!(
            e.kafka_code(),
            kafka_protocol::ResponseError::UnknownTopicOrPartition.code()
        );
        rm.close_all();
    }
}

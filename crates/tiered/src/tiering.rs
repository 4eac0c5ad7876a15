//! The tiering task: for every registered partition, upload sealed segments in offset
//! order, then apply local retention (only to uploaded segments) and total retention
//! (`retention.ms` / `retention.bytes` over remote + local, deleting remote segments too).
//!
//! It is a periodic, idempotent pass (like Kafka's RLM task) rather than event driven: a
//! missed roll, a store outage or a restart simply means the next pass does the work.
//! Nothing here blocks produce or local fetch: the log is touched only to list its sealed
//! files and to delete local segments whose upload the manifest confirms.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::layout::PartitionId;
use crate::local::{self, LocalSegment};
use crate::replica_rules::{
    TierRole, expired_by_time, follower_cut, local_retention_cut, segments_to_upload,
};
use crate::stats;
use crate::{RemotePartition, TieredStorage};

/// The broker's view of one partition's local log.
pub trait LocalLog: Send + Sync + 'static {
    /// The partition directory (`<data-dir>/<topic>-<partition>`).
    fn dir(&self) -> PathBuf;
    /// The first offset held locally.
    fn local_log_start_offset(&self) -> i64;
    /// Delete whole local segments below `offset` (a segment base offset), moving the local
    /// log start there. Called only with offsets whose data the remote manifest holds.
    fn delete_local_before(&self, offset: i64) -> std::result::Result<(), String>;
    /// Whether this replica leads the partition (and in which epoch) or follows it.
    fn tier_role(&self) -> TierRole;
    /// The partition's high watermark as this replica knows it: nothing at or above it is
    /// uploaded (it may still be truncated) and a follower deletes nothing above it.
    fn high_watermark(&self) -> i64;
    /// Make sure the producer snapshot as of `offset` (a local segment boundary) exists, so
    /// the segment ending there is uploaded with its end state (the log writes one at each
    /// roll; this rebuilds a lost one). Best effort: without it the segment goes up without a
    /// snapshot.
    fn ensure_producer_snapshot(&self, _offset: i64) {}
}

/// Per-topic tiering configuration (Kafka's topic config names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierPolicy {
    /// `remote.storage.enable`.
    pub remote_storage_enable: bool,
    /// `local.retention.ms` (-2 = use `retention.ms`, -1 = unlimited).
    pub local_retention_ms: i64,
    /// `local.retention.bytes` (-2 = use `retention.bytes`, -1 = unlimited).
    pub local_retention_bytes: i64,
    /// `retention.ms` over the whole log (-1 = unlimited).
    pub retention_ms: i64,
    /// `retention.bytes` over the whole log (-1 = unlimited).
    pub retention_bytes: i64,
}

impl Default for TierPolicy {
    fn default() -> Self {
        TierPolicy {
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
        }
    }
}

impl TierPolicy {
    pub(crate) fn effective_local_ms(&self) -> i64 {
        if self.local_retention_ms == -2 {
            self.retention_ms
        } else {
            self.local_retention_ms
        }
    }
    pub(crate) fn effective_local_bytes(&self) -> i64 {
        if self.local_retention_bytes == -2 {
            self.retention_bytes
        } else {
            self.local_retention_bytes
        }
    }
}

/// Local vs remote footprint of one partition (dashboard JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionSizes {
    pub topic: String,
    pub partition: i32,
    pub local_bytes: u64,
    pub remote_bytes: u64,
    pub remote_segments: usize,
    pub local_log_start_offset: i64,
    pub remote_log_start_offset: Option<i64>,
    pub remote_next_offset: Option<i64>,
    pub upload_lag_bytes: u64,
}

type PassInput = (
    PartitionId,
    Arc<RemotePartition>,
    Arc<dyn LocalLog>,
    TierPolicy,
);

struct Registered {
    id: PartitionId,
    part: Arc<RemotePartition>,
    log: Arc<dyn LocalLog>,
    policy: TierPolicy,
    lag_bytes: u64,
}

/// Drives uploads and retention for all tiered partitions.
pub struct TieringManager {
    storage: TieredStorage,
    /// Keyed by (topic name, partition): what Fetch and ListOffsets look up by.
    partitions: parking_lot::Mutex<HashMap<(String, i32), Registered>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl TieringManager {
    pub fn new(storage: TieredStorage) -> Arc<Self> {
        Arc::new(TieringManager {
            storage,
            partitions: parking_lot::Mutex::new(HashMap::new()),
            stop: tokio::sync::watch::channel(false).0,
        })
    }

    pub fn storage(&self) -> &TieredStorage {
        &self.storage
    }

    /// Start tiering a partition (loads its manifest and reconciles orphans first).
    pub async fn register(
        &self,
        id: PartitionId,
        log: Arc<dyn LocalLog>,
        policy: TierPolicy,
    ) -> Result<Arc<RemotePartition>> {
        let part = self.storage.open_partition(id.clone()).await?;
        self.partitions.lock().insert(
            (id.topic.clone(), id.partition),
            Registered {
                id,
                part: part.clone(),
                log,
                policy,
                lag_bytes: 0,
            },
        );
        Ok(part)
    }

    /// The remote state of a registered partition.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<RemotePartition>> {
        self.partitions
            .lock()
            .get(&(topic.to_string(), partition))
            .map(|r| r.part.clone())
    }

    /// Every registered partition with its policy.
    pub fn registered(&self) -> Vec<(PartitionId, TierPolicy)> {
        self.partitions
            .lock()
            .values()
            .map(|r| (r.id.clone(), r.policy))
            .collect()
    }

    /// Apply changed topic configs.
    pub fn update_policy(&self, topic: &str, policy: TierPolicy) {
        for ((t, _), r) in self.partitions.lock().iter_mut() {
            if t == topic {
                r.policy = policy;
            }
        }
    }

    pub fn unregister(&self, id: &PartitionId) {
        self.partitions
            .lock()
            .remove(&(id.topic.clone(), id.partition));
    }

    /// The offset clients see as the log start: the remote start when remote data reaches
    /// the local log start, else the local start.
    pub fn log_start_offset(&self, topic: &str, partition: i32, local_start: i64) -> i64 {
        let Some(part) = self.partition(topic, partition) else {
            return local_start;
        };
        let m = part.manifest();
        match (m.start_offset(), m.next_offset()) {
            (Some(start), Some(next)) if next >= local_start => start.min(local_start),
            _ => local_start,
        }
    }

    pub fn sizes(&self) -> Vec<PartitionSizes> {
        // Snapshot first: the log's own lock is never taken under ours.
        let regs: Vec<(PassInput, u64)> = self
            .partitions
            .lock()
            .values()
            .map(|r| {
                (
                    (r.id.clone(), r.part.clone(), r.log.clone(), r.policy),
                    r.lag_bytes,
                )
            })
            .collect();
        let mut out: Vec<PartitionSizes> = regs
            .into_iter()
            .map(|((id, part, log, _), lag_bytes)| {
                let m = part.manifest();
                PartitionSizes {
                    topic: id.topic.clone(),
                    partition: id.partition,
                    local_bytes: local::local_size_bytes(&log.dir()),
                    remote_bytes: m.size_bytes(),
                    remote_segments: m.segments.len(),
                    local_log_start_offset: log.local_log_start_offset(),
                    remote_log_start_offset: m.start_offset(),
                    remote_next_offset: m.next_offset(),
                    upload_lag_bytes: lag_bytes,
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        out
    }

    /// Run the periodic task until `shutdown`.
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            let period = Duration::from_millis(me.storage.config().task_interval_ms.max(10));
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(period) => {}
                }
                me.run_once(now_ms()).await;
            }
        })
    }

    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// One pass over every partition; partitions proceed concurrently (uploads are bounded
    /// by the storage's upload permits).
    pub async fn run_once(&self, now_ms: i64) {
        let work: Vec<PassInput> = self
            .partitions
            .lock()
            .values()
            .filter(|r| r.policy.remote_storage_enable)
            .map(|r| (r.id.clone(), r.part.clone(), r.log.clone(), r.policy))
            .collect();
        let passes = work.into_iter().map(|(id, part, log, policy)| async move {
            let lag = self.pass(&part, log.as_ref(), policy, now_ms).await;
            if let Some(r) = self
                .partitions
                .lock()
                .get_mut(&(id.topic.clone(), id.partition))
            {
                r.lag_bytes = lag;
            }
        });
        futures::future::join_all(passes).await;
    }

    /// Returns the upload lag in bytes after the pass.
    async fn pass(
        &self,
        part: &RemotePartition,
        log: &dyn LocalLog,
        policy: TierPolicy,
        now_ms: i64,
    ) -> u64 {
        let leader_epoch = match log.tier_role() {
            TierRole::Follower => {
                self.follower_pass(part, log, policy, now_ms).await;
                return 0;
            }
            TierRole::Leader { leader_epoch } => leader_epoch,
        };
        // Just became leader (or started): continue from the stored manifest's end.
        let claimed = part.claimed_epoch() == leader_epoch
            || match self.storage.take_leadership(part, leader_epoch).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(partition = %part.id, leader_epoch, error = %e, "cannot take over the remote manifest; will retry");
                    false
                }
            };
        let dir = log.dir();
        let sealed = match local::sealed_segments(&dir) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(partition = %part.id, error = %e, "cannot list local segments");
                return 0;
            }
        };
        let local_start = log.local_log_start_offset();
        let high_watermark = log.high_watermark();
        let pending = |part: &RemotePartition| -> Vec<LocalSegment> {
            segments_to_upload(&sealed, part.next_offset(), local_start, high_watermark)
        };
        for seg in pending(part).into_iter().filter(|_| claimed) {
            log.ensure_producer_snapshot(seg.next_base_offset);
            if let Err(e) = self.storage.upload_segment(part, &seg, now_ms).await {
                tracing::warn!(partition = %part.id, base_offset = seg.base_offset, error = %e, "segment upload failed; will retry");
                break; // keep offset order: later segments wait for this one
            }
        }
        let left = pending(part);
        let lag_bytes: u64 = left.iter().map(|s| s.size_bytes).sum();
        let labels = [
            ("topic", part.id.topic.clone()),
            ("partition", part.id.partition.to_string()),
        ];
        metrics::gauge!(stats::UPLOAD_LAG_BYTES, &labels).set(lag_bytes as f64);
        metrics::gauge!(stats::UPLOAD_LAG_SEGMENTS, &labels).set(left.len() as f64);
        if !claimed {
            return lag_bytes;
        }
        if let Err(e) = self.retention(part, log, &sealed, policy, now_ms).await {
            tracing::warn!(partition = %part.id, error = %e, "tiered retention failed; will retry");
        }
        metrics::gauge!(stats::REMOTE_SIZE_BYTES, &labels).set(part.size_bytes() as f64);
        metrics::gauge!(stats::LOCAL_SIZE_BYTES, &labels).set(local::local_size_bytes(&dir) as f64);
        lag_bytes
    }

    /// A follower's pass: learn what the leader uploaded and deleted, then delete local data
    /// that is remote and committed (or below the remote log start).
    async fn follower_pass(
        &self,
        part: &RemotePartition,
        log: &dyn LocalLog,
        policy: TierPolicy,
        now_ms: i64,
    ) {
        if let Err(e) = self.storage.follow(part).await {
            tracing::warn!(partition = %part.id, error = %e, "cannot read the remote manifest; will retry");
            return;
        }
        let dir = log.dir();
        let sealed = match local::sealed_segments(&dir) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(partition = %part.id, error = %e, "cannot list local segments");
                return;
            }
        };
        let cut = follower_cut(
            &sealed,
            log.local_log_start_offset(),
            local::local_size_bytes(&dir),
            &part.manifest(),
            log.high_watermark(),
            policy,
            now_ms,
        );
        if let Some(cut) = cut {
            match log.delete_local_before(cut) {
                Ok(()) => {
                    tracing::info!(partition = %part.id, local_log_start_offset = cut, "follower deleted local segments the leader has uploaded")
                }
                Err(e) => {
                    tracing::warn!(partition = %part.id, error = %e, "follower local retention failed; will retry")
                }
            }
        }
        let labels = [
            ("topic", part.id.topic.clone()),
            ("partition", part.id.partition.to_string()),
        ];
        metrics::gauge!(stats::UPLOAD_LAG_BYTES, &labels).set(0.0);
        metrics::gauge!(stats::UPLOAD_LAG_SEGMENTS, &labels).set(0.0);
        metrics::gauge!(stats::REMOTE_SIZE_BYTES, &labels).set(part.size_bytes() as f64);
        metrics::gauge!(stats::LOCAL_SIZE_BYTES, &labels).set(local::local_size_bytes(&dir) as f64);
    }

    async fn retention(
        &self,
        part: &RemotePartition,
        log: &dyn LocalLog,
        sealed: &[LocalSegment],
        policy: TierPolicy,
        now_ms: i64,
    ) -> Result<()> {
        // Total retention: the whole log (remote-only segments + everything local).
        let m = part.manifest();
        let local_start = log.local_log_start_offset();
        let local_bytes = local::local_size_bytes(&log.dir());
        let remote_only_bytes: u64 = m
            .segments
            .iter()
            .filter(|s| s.next_offset() <= local_start)
            .map(|s| s.size_bytes)
            .sum();
        let mut total = remote_only_bytes + local_bytes;
        let mut cut: Option<i64> = None;
        for s in &m.segments {
            let by_time = expired_by_time(Some(s), policy.retention_ms, now_ms);
            let by_size = policy.retention_bytes >= 0
                && total.saturating_sub(s.size_bytes) >= policy.retention_bytes as u64;
            if !(by_time || by_size) {
                break;
            }
            total = total.saturating_sub(s.size_bytes);
            cut = Some(s.next_offset());
        }
        if let Some(cut) = cut {
            self.storage.delete_before(part, cut).await?;
            if cut > local_start {
                delete_local(part, log, sealed, cut)?;
            }
        }
        // Local retention: only segments the manifest holds.
        let m = part.manifest();
        let Some(remote_next) = m.next_offset() else {
            return Ok(());
        };
        let local_cut = local_retention_cut(
            sealed,
            log.local_log_start_offset(),
            local::local_size_bytes(&log.dir()),
            remote_next,
            &m,
            policy,
            now_ms,
        );
        if let Some(cut) = local_cut {
            delete_local(part, log, sealed, cut)?;
        }
        Ok(())
    }
}

fn delete_local(
    part: &RemotePartition,
    log: &dyn LocalLog,
    sealed: &[LocalSegment],
    cut: i64,
) -> Result<()> {
    // Only ever cut at a sealed segment boundary the manifest covers.
    let covered = part.next_offset().unwrap_or(i64::MIN);
    let cut = sealed
        .iter()
        .map(|s| s.next_base_offset)
        .filter(|b| *b <= cut && *b <= covered)
        .max();
    if let Some(cut) = cut {
        log.delete_local_before(cut)
            .map_err(|e| crate::TieredError::LocalIo {
                path: log.dir().display().to_string(),
                source: std::io::Error::other(e),
            })?;
        tracing::info!(partition = %part.id, local_log_start_offset = cut, "local segments deleted after upload (local retention)");
    }
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

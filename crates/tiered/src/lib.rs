//! Tiered storage: sealed log segments in object storage (S3 and S3-compatible servers, GCS,
//! Azure, or a local directory), read back transparently.
//!
//! The shape is Kafka's KIP-405: only sealed segments are uploaded (their `.log`, indexes,
//! aborted-transaction index, producer snapshot and leader-epoch checkpoint, plus a remote
//! index we build while uploading); a per-partition manifest lists what is remote; local retention may delete a
//! local segment only once the manifest records it; reads below the local log start are
//! served from the store with ranged GETs through a bounded chunk cache.
//!
//! - [`TieredStorage`]: the store client, cache and per-partition remote state.
//! - [`TieringManager`]: the background task that uploads sealed segments and applies local
//!   and total retention for every registered partition.
#![forbid(unsafe_code)]

pub mod batch;
pub mod cache;
pub mod config;
pub mod error;
pub mod layout;
pub mod local;
pub mod manifest;
mod reader;
pub mod remote_index;
pub mod replica_rules;
#[cfg(test)]
mod replica_suite_tests;
pub mod retry;
#[cfg(test)]
mod snapshot_tests;
pub mod stats;
#[cfg(test)]
mod suite_tests;
pub mod tiering;
pub mod txn_index;
#[cfg(test)]
mod txn_index_tests;
mod uploader;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use bytes::Bytes;
use object_store::ObjectStore;

pub use config::{FailPoint, StoreSpec, TieredArgs, TieredConfig, build_store};
pub use error::{Result, TieredError};
pub use layout::{KeyLayout, ObjectKind, PartitionId};
pub use local::LocalSegment;
pub use manifest::{PartitionManifest, RemoteSegment};
pub use replica_rules::TierRole;
pub use stats::StatsSnapshot;
pub use tiering::{LocalLog, PartitionSizes, TierPolicy, TieringManager};
pub use txn_index::RemoteAborted;

use cache::Lru;
use remote_index::RemoteIndex;
use stats::TieredStats;

/// Remote indexes kept in memory at most (they are small; chunks have their own byte limit).
pub const INDEX_CACHE_BYTES_MAX: u64 = 64 << 20;

/// Cache key of one chunk: (segment id, chunk number).
type ChunkKey = (Arc<str>, u64);
type InFlight = futures::future::Shared<futures::future::BoxFuture<'static, Result<Bytes, String>>>;

pub(crate) struct Shared {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) layout: KeyLayout,
    pub(crate) config: TieredConfig,
    pub(crate) stats: TieredStats,
    pub(crate) chunks: parking_lot::Mutex<Lru<ChunkKey, Bytes>>,
    pub(crate) indexes: parking_lot::Mutex<Lru<Arc<str>, Arc<RemoteIndex>>>,
    /// Decoded remote transaction indexes by segment id (`txn_index`).
    pub(crate) txn_indexes: parking_lot::Mutex<Lru<Arc<str>, Arc<[streamforge_log::AbortedTxn]>>>,
    pub(crate) in_flight: parking_lot::Mutex<HashMap<ChunkKey, InFlight>>,
    pub(crate) upload_permits: tokio::sync::Semaphore,
    pub(crate) prefetch_permits: Arc<tokio::sync::Semaphore>,
    pub(crate) partitions: parking_lot::Mutex<HashMap<PartitionId, Arc<RemotePartition>>>,
}

/// One partition's remote state. Readers take cheap snapshots of the manifest; writers
/// (upload commit, retention) are serialized by `writer`.
pub struct RemotePartition {
    pub id: PartitionId,
    manifest: parking_lot::RwLock<Arc<PartitionManifest>>,
    writer: tokio::sync::Mutex<()>,
    /// The leader epoch under which this broker claimed the manifest (`take_leadership`), or
    /// `NO_LEADER_EPOCH` while it follows: only a claimed partition is written.
    claimed_epoch: AtomicI32,
    /// Where the previous read ended: (segment id, chunk) — detects sequential consumers.
    last_read: parking_lot::Mutex<Option<(Arc<str>, u64)>>,
}

impl RemotePartition {
    fn new(id: PartitionId, manifest: PartitionManifest) -> Self {
        RemotePartition {
            id,
            manifest: parking_lot::RwLock::new(Arc::new(manifest)),
            writer: tokio::sync::Mutex::new(()),
            claimed_epoch: AtomicI32::new(manifest::NO_LEADER_EPOCH),
            last_read: parking_lot::Mutex::new(None),
        }
    }

    /// The current manifest (a snapshot; never torn).
    pub fn manifest(&self) -> Arc<PartitionManifest> {
        self.manifest.read().clone()
    }

    /// First offset readable from remote storage, if anything is remote.
    pub fn log_start_offset(&self) -> Option<i64> {
        self.manifest().start_offset()
    }

    /// First offset not in remote storage, if anything is remote.
    pub fn next_offset(&self) -> Option<i64> {
        self.manifest().next_offset()
    }

    pub fn size_bytes(&self) -> u64 {
        self.manifest().size_bytes()
    }

    /// The leader epoch this broker writes the manifest under (`NO_LEADER_EPOCH`: it does not).
    pub fn claimed_epoch(&self) -> i32 {
        self.claimed_epoch.load(Ordering::Acquire)
    }

    fn set_manifest(&self, m: PartitionManifest) {
        *self.manifest.write() = Arc::new(m);
    }
}

/// The tiered-storage service: one per broker.
#[derive(Clone)]
pub struct TieredStorage {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TieredStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredStorage")
            .field("store", &self.shared.store.to_string())
            .finish()
    }
}

impl TieredStorage {
    /// Connect to the configured store.
    pub fn new(config: TieredConfig) -> Result<Self> {
        let store = build_store(&config)?;
        Ok(Self::with_store(config, store))
    }

    /// Use an already built store (tests, embedding).
    pub fn with_store(config: TieredConfig, store: Arc<dyn ObjectStore>) -> Self {
        let shared = Shared {
            store,
            layout: KeyLayout::new(&config.prefix),
            stats: TieredStats::default(),
            chunks: parking_lot::Mutex::new(Lru::new(config.cache_bytes)),
            indexes: parking_lot::Mutex::new(Lru::new(INDEX_CACHE_BYTES_MAX)),
            txn_indexes: parking_lot::Mutex::new(Lru::new(txn_index::TXN_INDEX_CACHE_BYTES_MAX)),
            in_flight: parking_lot::Mutex::new(HashMap::new()),
            upload_permits: tokio::sync::Semaphore::new(config.upload_concurrency.max(1)),
            prefetch_permits: Arc::new(tokio::sync::Semaphore::new(
                config.prefetch_in_flight_max.max(1),
            )),
            partitions: parking_lot::Mutex::new(HashMap::new()),
            config,
        };
        TieredStorage {
            shared: Arc::new(shared),
        }
    }

    pub fn config(&self) -> &TieredConfig {
        &self.shared.config
    }

    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.shared.store.clone()
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.shared.layout
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Drop every cached chunk and index (benchmarks measure cold reads with it).
    pub fn clear_cache(&self) {
        self.shared.chunks.lock().retain(|_| false);
        self.shared.indexes.lock().retain(|_| false);
        self.shared.txn_indexes.lock().retain(|_| false);
    }

    /// A partition already opened.
    pub fn partition(&self, id: &PartitionId) -> Option<Arc<RemotePartition>> {
        self.shared.partitions.lock().get(id).cloned()
    }

    /// Load a partition's manifest. Opening an already open partition returns it unchanged.
    /// Orphans are not deleted here: with replicas, the leader may be uploading objects its
    /// manifest does not name yet; the broker that becomes leader reconciles
    /// (`take_leadership`).
    pub async fn open_partition(&self, id: PartitionId) -> Result<Arc<RemotePartition>> {
        if let Some(p) = self.partition(&id) {
            return Ok(p);
        }
        let key = self.shared.layout.manifest(&id);
        let policy = self.shared.config.retry;
        let store = self.shared.store.clone();
        let manifest = policy
            .run("load manifest", || manifest::load(store.as_ref(), &key))
            .await?
            .unwrap_or_else(|| PartitionManifest::empty(&id));
        let part = Arc::new(RemotePartition::new(id.clone(), manifest));
        let mut map = self.shared.partitions.lock();
        Ok(map.entry(id).or_insert(part).clone())
    }

    /// Become the manifest's writer for `leader_epoch`: load the stored manifest (the previous
    /// leader's uploads are the resume point), refuse if a newer leader claimed it, delete
    /// orphaned objects (left by a crash between an upload and its manifest update, or by a
    /// deposed leader), and store the manifest under our epoch so older leaders are fenced.
    pub async fn take_leadership(&self, part: &RemotePartition, leader_epoch: i32) -> Result<()> {
        uploader::take_leadership(&self.shared, part, leader_epoch).await
    }

    /// Stop writing the manifest (this broker follows now) and reload it from the store: a
    /// follower learns what the leader uploaded and deleted. Returns whether it changed.
    pub async fn follow(&self, part: &RemotePartition) -> Result<bool> {
        uploader::follow(&self.shared, part).await
    }

    /// Upload a sealed local segment and record it in the manifest. Returns the manifest entry.
    /// A segment that starts below the manifest's end (replicas roll at different offsets, so a
    /// new leader's segment may straddle the old leader's last upload) is uploaded from the
    /// first batch past the remote end: no offset is uploaded twice, none is skipped.
    pub async fn upload_segment(
        &self,
        part: &RemotePartition,
        segment: &LocalSegment,
        now_ms: i64,
    ) -> Result<RemoteSegment> {
        uploader::upload_and_commit(&self.shared, part, segment, now_ms).await
    }

    /// Remove remote segments entirely below `offset` and move the remote log start to it
    /// (retention and DeleteRecords). Returns how many segments were deleted.
    pub async fn delete_before(&self, part: &RemotePartition, offset: i64) -> Result<usize> {
        uploader::delete_before(&self.shared, part, offset).await
    }

    /// Delete everything remote of a partition (topic deletion).
    pub async fn delete_partition(&self, id: &PartitionId) -> Result<()> {
        let part = self.open_partition(id.clone()).await?;
        uploader::delete_all(&self.shared, &part).await?;
        self.shared.partitions.lock().remove(id);
        Ok(())
    }

    /// Read whole batches starting with the one containing `offset`: at most `max_bytes`
    /// (at least one whole batch if `min_one_message`), none starting at or after
    /// `max_offset`. Every batch's CRC is verified; corrupt data is an error, never served.
    pub async fn read(
        &self,
        part: &RemotePartition,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<Bytes> {
        reader::read(
            &self.shared,
            part,
            offset,
            max_bytes,
            max_offset,
            min_one_message,
        )
        .await
    }

    /// The aborted transactions a read_committed read of remote data `[start, upper)` must
    /// report, from the remote transaction indexes of the segment holding `start` onward
    /// (Kafka's `collectAbortedTransactions`). When not `complete`, the local log's index
    /// (markers past the remote end) must be consulted too.
    pub async fn aborted_transactions(
        &self,
        part: &RemotePartition,
        start: i64,
        upper: i64,
    ) -> Result<RemoteAborted> {
        txn_index::collect(&self.shared, part, start, upper).await
    }

    /// The remote producer snapshot that is the state as of `offset`: the one uploaded with the
    /// segment ending there (`None` when no segment's recorded snapshot is at `offset`, e.g.
    /// entries from before snapshots were taken at the segment's end). The bytes are the log's
    /// snapshot format (`streamforge_log`'s decoder checks them).
    pub async fn producer_snapshot_at(
        &self,
        part: &RemotePartition,
        offset: i64,
    ) -> Result<Option<Bytes>> {
        let m = part.manifest();
        match m.segment_with_snapshot_at(offset) {
            Some(seg) => uploader::get_producer_snapshot(&self.shared, part, seg)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// For a replica whose leader's local log starts at `local_start` (OFFSET_MOVED_TO_TIERED_STORAGE):
    /// the offset to start its local log at and the producer snapshot as of that offset
    /// (`PartitionManifest::snapshot_for_local_start`), or `None` when the manifest has no
    /// end-state snapshot there.
    pub async fn producer_snapshot_for_local_start(
        &self,
        part: &RemotePartition,
        local_start: i64,
    ) -> Result<Option<(i64, Bytes)>> {
        let m = part.manifest();
        match m.snapshot_for_local_start(local_start) {
            Some((at, seg)) => uploader::get_producer_snapshot(&self.shared, part, seg)
                .await
                .map(|b| Some((at, b))),
            None => Ok(None),
        }
    }

    /// ListOffsets by time over remote data: the first record with timestamp `>= timestamp_ms`
    /// as `(offset, timestamp)`.
    pub async fn offset_for_timestamp(
        &self,
        part: &RemotePartition,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>> {
        reader::offset_for_timestamp(&self.shared, part, timestamp_ms).await
    }
}

//! Reads: whole batches from the local log, and from remote storage below the local log start
//! of a tiered partition (KIP-405), bounded by what the reader may see (its isolation).

use streamforge_log::{AbortedTxn, ReadInfo};
use streamforge_protocol::batch::BatchIter;
use streamforge_tiered::{RemotePartition, TieredError, TieredStorage};

use super::{
    Partition, PartitionError, PartitionOffsets, PartitionRole, State, check_leader_epoch,
    local_offsets,
};

/// Up to which offset a reader may read (Kafka's `FetchIsolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchIsolation {
    /// A follower (or the broker itself replaying an internal topic): everything appended.
    LogEnd,
    /// A read_uncommitted consumer: committed records (below the high watermark).
    HighWatermark,
    /// A read_committed consumer: below the last stable offset.
    TxnCommitted,
}

impl FetchIsolation {
    /// Kafka's rule: a replica's fetch reads to the log end, a consumer's by its
    /// `isolation_level` (1 = READ_COMMITTED).
    pub fn for_fetch(replica_id: i32, isolation_level: i8) -> FetchIsolation {
        if replica_id >= 0 {
            FetchIsolation::LogEnd
        } else if isolation_level == 1 {
            FetchIsolation::TxnCommitted
        } else {
            FetchIsolation::HighWatermark
        }
    }

    /// The first offset this reader may not see.
    fn max_offset(self, offsets: &PartitionOffsets) -> i64 {
        match self {
            FetchIsolation::LogEnd => offsets.log_end_offset,
            FetchIsolation::HighWatermark => offsets.high_watermark,
            FetchIsolation::TxnCommitted => offsets.last_stable_offset,
        }
    }
}

/// What one partition of a Fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchParams {
    /// Read whole batches from the one that holds this offset on.
    pub fetch_offset: i64,
    /// At most this many bytes (the partition's share of the response)...
    pub max_bytes: usize,
    /// ...but at least one whole batch when set (the first partition of a response), so a
    /// batch larger than the limit never stalls a consumer.
    pub min_one_message: bool,
    pub isolation: FetchIsolation,
    /// The fetching broker (-1 for a consumer).
    pub replica_id: i32,
}

/// Where a consumer's Fetch may be served, and the leader epoch it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerFetch {
    /// The client's `current_leader_epoch` (-1 = not checked): older is
    /// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, on a leader and a follower alike.
    pub current_leader_epoch: i32,
    /// Fetch v11+ (Kafka's `clientMetadata` is set): a follower may serve it. Older versions
    /// read from the leader only (NOT_LEADER_OR_FOLLOWER elsewhere).
    pub any_replica: bool,
}

impl ConsumerFetch {
    /// The leader only, epoch not checked: internal readers (replays, the dashboard).
    pub const LEADER_ONLY: ConsumerFetch = ConsumerFetch {
        current_leader_epoch: -1,
        any_replica: false,
    };
}

/// A read: the partition's offsets (also sent with an error, so a consumer can reset) and
/// the batches, or why there are none.
#[derive(Debug)]
pub struct ReadResult {
    pub offsets: PartitionOffsets,
    pub records: Result<ReadInfo, PartitionError>,
    /// For a read_committed read: the aborted transactions overlapping the range read.
    pub aborted: Vec<streamforge_log::AbortedTxn>,
}

impl Partition {
    /// Read for a Fetch: from the local log, or, below the local log start of a tiered
    /// partition, from remote storage. `Err` when the partition is not served here (gone,
    /// offline, not the leader); a failed read itself is `ReadResult::records`.
    pub async fn read(&self, params: FetchParams) -> Result<ReadResult, PartitionError> {
        self.read_for_consumer(params, ConsumerFetch::LEADER_ONLY)
            .await
    }

    /// A consumer's read (KIP-392): `fetch` says which epoch it knows and whether a follower
    /// may serve it. A follower serves up to its own high watermark, which it takes from the
    /// leader's fetch responses; an offset between its high watermark and log end reads
    /// nothing (the fetch waits), one past its log end is OFFSET_OUT_OF_RANGE, as in Kafka,
    /// and the consumer then goes back to the leader.
    pub async fn read_for_consumer(
        &self,
        params: FetchParams,
        fetch: ConsumerFetch,
    ) -> Result<ReadResult, PartitionError> {
        let mut result = self.read_local_as(params, fetch)?;
        let below_local = params.fetch_offset < result.offsets.local_log_start_offset;
        if below_local
            && let Err(e) = &result.records
            && e.is_offset_out_of_range()
        {
            let max_offset = params.isolation.max_offset(&result.offsets);
            if let Some((records, aborted)) = self.read_remote(params, max_offset).await {
                result.records = records;
                result.aborted = aborted;
            }
        }
        Ok(result)
    }

    /// Read from the local log only (replay of an internal topic, the dashboard).
    pub fn read_local(&self, params: FetchParams) -> Result<ReadResult, PartitionError> {
        self.read_local_as(params, ConsumerFetch::LEADER_ONLY)
    }

    fn read_local_as(
        &self,
        params: FetchParams,
        fetch: ConsumerFetch,
    ) -> Result<ReadResult, PartitionError> {
        let (offsets, records, aborted) = self.with_readable_log(fetch, |log| {
            let offsets = local_offsets(log);
            let records = if params.max_bytes == 0 && !params.min_one_message {
                // No budget left in the response: nothing to read.
                Ok(ReadInfo::default())
            } else {
                log.read(
                    params.fetch_offset,
                    params.max_bytes,
                    params.isolation.max_offset(&offsets),
                    params.min_one_message,
                )
                .map_err(PartitionError::Log)
            };
            let aborted = match (&records, params.isolation) {
                (Ok(read), FetchIsolation::TxnCommitted) if read.bytes > 0 => {
                    log.aborted_transactions(params.fetch_offset, offsets.last_stable_offset)
                }
                _ => Vec::new(),
            };
            (offsets, records, aborted)
        })?;
        if let Ok(read) = &records {
            debug_assert!(read.bytes <= params.max_bytes || params.min_one_message);
            debug_assert_eq!(
                read.bytes,
                read.slices.iter().map(|s| s.len()).sum::<usize>()
            );
        }
        Ok(ReadResult {
            offsets: self.with_remote_start(offsets),
            records,
            aborted,
        })
    }

    /// Run `f` on the log if this broker may serve `fetch`: Kafka's `localLogWithEpochOrThrow`
    /// (the epoch first, then the log, then the role: the leader, or a follower for v11+).
    fn with_readable_log<R>(
        &self,
        fetch: ConsumerFetch,
        f: impl FnOnce(&mut streamforge_log::Log) -> R,
    ) -> Result<R, PartitionError> {
        let mut guard = self.state.lock();
        let State { log, serving } = &mut *guard;
        check_leader_epoch(fetch.current_leader_epoch, serving.leader_epoch)?;
        let Some(log) = log.as_mut() else {
            return Err(self.missing());
        };
        match serving.role {
            PartitionRole::Leader => Ok(f(log)),
            PartitionRole::Follower if fetch.any_replica => Ok(f(log)),
            PartitionRole::Follower | PartitionRole::None => {
                Err(PartitionError::NotLeaderOrFollower)
            }
        }
    }

    /// A read below the local log start: from remote storage, with the aborted transactions
    /// a read_committed reader must drop. `None` when the partition is not tiered (the local
    /// OFFSET_OUT_OF_RANGE stands).
    async fn read_remote(&self, params: FetchParams, max_offset: i64) -> Option<RemoteRead> {
        let Some(remote) = self.remote() else {
            return self
                .remote_enabled()
                .then_some((Err(PartitionError::RemoteNotLoaded), Vec::new()));
        };
        let tiering = self.tiering()?;
        let storage = tiering.storage();
        let read = storage
            .read(
                &remote,
                params.fetch_offset,
                params.max_bytes,
                max_offset,
                params.min_one_message,
            )
            .await;
        let aborted = match (&read, params.isolation) {
            (Ok(bytes), FetchIsolation::TxnCommitted) => {
                self.remote_aborted(storage, &remote, bytes).await
            }
            _ => Ok(Vec::new()),
        };
        Some(match read.and_then(|bytes| Ok((bytes, aborted?))) {
            Ok((bytes, aborted)) => (
                Ok(ReadInfo {
                    bytes: bytes.len(),
                    slices: vec![bytes],
                }),
                aborted,
            ),
            Err(e) => {
                if !matches!(e, TieredError::OffsetNotRemote { .. }) {
                    tracing::warn!(topic = %self.topic, partition = self.index, offset = params.fetch_offset, error = %e, "remote fetch failed");
                }
                (Err(PartitionError::Remote(e)), Vec::new())
            }
        })
    }

    /// Kafka's `addAbortedTransactions` for a remote read: the transactions aborted at or after
    /// the first batch read and begun before the end of the last, from the remote indexes of
    /// the segment read and every later one, and from the local log's index (markers not
    /// uploaded yet). The local index is read first: local retention drops entries only of
    /// segments the manifest already holds, so the remote walk, which starts afterwards,
    /// covers whatever the local index lost meanwhile.
    async fn remote_aborted(
        &self,
        storage: &TieredStorage,
        remote: &RemotePartition,
        bytes: &[u8],
    ) -> Result<Vec<AbortedTxn>, TieredError> {
        let Some((start, upper)) = offset_range(bytes) else {
            return Ok(Vec::new());
        };
        let mut aborted = self
            .with_log(|log| log.aborted_transactions(start, upper))
            .unwrap_or_default();
        let found = storage.aborted_transactions(remote, start, upper).await?;
        aborted.extend(found.aborted);
        // A segment still local after its upload is in both indexes: one entry each, as
        // Kafka's set of aborted transactions.
        aborted.sort_by_key(|e| (e.last_offset, e.producer_id));
        aborted.dedup();
        assert!(
            aborted
                .iter()
                .all(|e| e.last_offset >= start && e.first_offset < upper),
            "aborted transactions overlap the range read"
        );
        Ok(aborted)
    }
}

/// What a remote read returns: its batches, and the aborted transactions overlapping them.
type RemoteRead = (Result<ReadInfo, PartitionError>, Vec<AbortedTxn>);

/// `[first batch's base offset, last batch's last offset + 1)` of the batches read (`None`
/// when there are none). The remote reader verified every batch; should one still not parse,
/// the range stays open-ended, which reports more aborted transactions, never fewer.
fn offset_range(bytes: &[u8]) -> Option<(i64, i64)> {
    let mut range: Option<(i64, i64)> = None;
    for batch in BatchIter::new(bytes) {
        let Ok((_, batch)) = batch else {
            return range.map(|(start, _)| (start, i64::MAX));
        };
        let start = range.map_or(batch.base_offset(), |r| r.0);
        range = Some((start, batch.last_offset().saturating_add(1)));
    }
    range
}

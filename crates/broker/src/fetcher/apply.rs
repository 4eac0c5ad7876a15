//! What a follower does with one partition of the leader's Fetch response, without I/O: the
//! network fetcher and the in-process simulation use the same steps.

use kafka_protocol::ResponseError;
use kafka_protocol::error::ParseResponseErrorCode;
use streamforge_protocol::batch::{LOG_OVERHEAD_BYTES, field};

use crate::partition::{FetchIsolation, FetchParams, FollowerFetch, Partition, PartitionError};

/// One partition of a Fetch response from the leader.
#[derive(Debug, Clone, Default)]
pub struct FetchedPartition {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: bytes::Bytes,
    pub diverging_epoch: Option<(i32, i64)>,
}

/// What applying a response did, and what the fetcher does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Appended (maybe nothing); fetch again from `log_end_offset`.
    Appended { log_end_offset: i64 },
    /// Truncated a divergent tail; `done = false` asks the leader again (OffsetForLeaderEpoch).
    Truncated { log_end_offset: i64, done: bool },
    /// OFFSET_OUT_OF_RANGE above the leader's log: resolve by epoch (OffsetForLeaderEpoch).
    ResolveByEpoch,
    /// OFFSET_MOVED_TO_TIERED_STORAGE: ask the leader for its local log start (ListOffsets
    /// -4), take the remote part from the manifest, restart there
    /// (`Partition::restart_follower_above_remote`).
    MovedToTieredStorage,
    /// The leader refused (fenced, not the leader any more, gone): stop fetching this
    /// partition until the metadata says more.
    Stop(i16),
}

/// Apply `fetched` to the follower `partition`, following in `leader_epoch`. `fetch_offset` is
/// the offset the request asked for.
pub fn apply(
    partition: &Partition,
    leader_epoch: i32,
    fetch_offset: i64,
    fetched: &FetchedPartition,
) -> Result<Applied, PartitionError> {
    if let Some(diverging) = fetched.diverging_epoch {
        let (log_end_offset, done) = partition.truncate_by_epoch(leader_epoch, diverging)?;
        return Ok(Applied::Truncated {
            log_end_offset,
            done,
        });
    }
    match fetched.error_code.err() {
        None => {}
        Some(ResponseError::OffsetOutOfRange) if fetch_offset < fetched.log_start_offset => {
            // The leader's retention passed us: start again at its log start.
            partition.restart_follower_at(leader_epoch, fetched.log_start_offset)?;
            return Ok(Applied::Appended {
                log_end_offset: fetched.log_start_offset,
            });
        }
        Some(ResponseError::OffsetOutOfRange) => return Ok(Applied::ResolveByEpoch),
        Some(ResponseError::OffsetMovedToTieredStorage) => {
            return Ok(Applied::MovedToTieredStorage);
        }
        Some(_) => return Ok(Applied::Stop(fetched.error_code)),
    }
    let batches = whole_batches(&fetched.records);
    let log_end_offset = partition.append_as_follower(
        leader_epoch,
        batches,
        fetched.high_watermark,
        fetched.log_start_offset,
    )?;
    Ok(Applied::Appended { log_end_offset })
}

/// The prefix of `records` made of whole batches (a response may end in a cut-off one).
pub fn whole_batches(records: &[u8]) -> &[u8] {
    let mut pos = 0usize;
    while pos + LOG_OVERHEAD_BYTES <= records.len() {
        let at = pos + field::BATCH_LENGTH;
        let len = i32::from_be_bytes([
            records[at],
            records[at + 1],
            records[at + 2],
            records[at + 3],
        ]);
        let Ok(len) = usize::try_from(len) else { break };
        let end = pos + LOG_OVERHEAD_BYTES + len;
        if len == 0 || end > records.len() {
            break;
        }
        pos = end;
    }
    &records[..pos]
}

/// One replication round in process (tests, simulation): the follower `follower_id` fetches
/// from `leader` and applies the answer, resolving OFFSET_OUT_OF_RANGE and partial truncation
/// by epoch as the network fetcher does.
pub fn replicate_once(
    leader: &Partition,
    follower: &Partition,
    follower_id: i32,
    max_bytes: usize,
    now_ms: i64,
) -> Result<Applied, PartitionError> {
    let pos = follower.follower_position()?;
    let params = FetchParams {
        fetch_offset: pos.fetch_offset,
        max_bytes,
        min_one_message: true,
        isolation: FetchIsolation::LogEnd,
        replica_id: follower_id,
    };
    let fetch = FollowerFetch {
        replica_id: follower_id,
        current_leader_epoch: pos.leader_epoch,
        last_fetched_epoch: pos.last_fetched_epoch,
        log_start_offset: pos.log_start_offset,
        throttled: false,
    };
    let fetched = match leader.read_for_follower(params, fetch, now_ms) {
        Ok(read) => {
            let mut f = FetchedPartition {
                high_watermark: read.read.offsets.high_watermark,
                log_start_offset: read.read.offsets.log_start_offset,
                diverging_epoch: read.diverging_epoch,
                ..Default::default()
            };
            match read.read.records {
                Ok(info) => f.records = info.slices.concat().into(),
                Err(e) => f.error_code = e.kafka_code(),
            }
            f
        }
        Err(e) => FetchedPartition {
            error_code: e.kafka_code(),
            ..Default::default()
        },
    };
    let applied = apply(follower, pos.leader_epoch, pos.fetch_offset, &fetched)?;
    match applied {
        Applied::MovedToTieredStorage => {
            // In process the manifest is the tiering pass's to read; only the restart here.
            let local_start = leader.offsets()?.local_log_start_offset;
            follower.restart_follower_at(pos.leader_epoch, local_start)?;
            Ok(Applied::Appended {
                log_end_offset: local_start,
            })
        }
        Applied::ResolveByEpoch | Applied::Truncated { done: false, .. } => {
            let epoch = follower.follower_position()?.last_fetched_epoch;
            let leader_end = leader
                .end_offset_for_epoch(epoch, pos.leader_epoch)?
                .unwrap_or((-1, -1));
            let (log_end_offset, done) =
                follower.truncate_by_epoch(pos.leader_epoch, leader_end)?;
            Ok(Applied::Truncated {
                log_end_offset,
                done,
            })
        }
        other => Ok(other),
    }
}

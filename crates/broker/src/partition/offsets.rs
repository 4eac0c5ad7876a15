//! Offset queries and moves of the log start: ListOffsets (over local and remote data),
//! DeleteRecords, and the end offset of a leader epoch (OffsetForLeaderEpoch).

use streamforge_log::Log;

use super::{Partition, PartitionError};

/// DeleteRecords' offset meaning "up to the high watermark".
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// What a ListOffsets query asks for (Kafka's special timestamps, or a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// -1: the high watermark.
    Latest,
    /// -1 asked by a read_committed client (ListOffsets v2+ `isolation_level` 1): the last
    /// stable offset.
    LastStable,
    /// -2: the first offset a client can read (remote data included).
    Earliest,
    /// -3: the record with the largest timestamp.
    MaxTimestamp,
    /// -4: the first offset of the local log.
    EarliestLocal,
    /// -5: the last offset in remote storage.
    LatestTiered,
    /// >= 0: the first record with a timestamp at or after this one (ms).
    Timestamp(i64),
    /// Any other negative value: INVALID_REQUEST once the partition is found.
    Unsupported(i64),
}

impl OffsetSpec {
    /// The ListOffsets request's `timestamp` field.
    pub fn from_kafka(timestamp: i64) -> OffsetSpec {
        match timestamp {
            -1 => OffsetSpec::Latest,
            -2 => OffsetSpec::Earliest,
            -3 => OffsetSpec::MaxTimestamp,
            -4 => OffsetSpec::EarliestLocal,
            -5 => OffsetSpec::LatestTiered,
            ts if ts >= 0 => OffsetSpec::Timestamp(ts),
            ts => OffsetSpec::Unsupported(ts),
        }
    }

    /// The query for a client's `isolation_level` (1 = READ_COMMITTED): "latest" is then the
    /// last stable offset, as Kafka answers.
    pub fn with_isolation(self, isolation_level: i8) -> OffsetSpec {
        match self {
            OffsetSpec::Latest if isolation_level == 1 => OffsetSpec::LastStable,
            other => other,
        }
    }
}

/// A ListOffsets answer: offset -1 (and timestamp -1) when nothing matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundOffset {
    pub timestamp: i64,
    pub offset: i64,
    /// The leader epoch to report with a found offset (ListOffsets v4+).
    pub leader_epoch: i32,
}

impl Partition {
    /// ListOffsets: local data first, then remote data of a tiered partition.
    /// `current_leader_epoch` is the client's view (-1 = not checked).
    pub async fn list_offsets(
        &self,
        spec: OffsetSpec,
        current_leader_epoch: i32,
    ) -> Result<FoundOffset, PartitionError> {
        let (local, local_start, leader_epoch, fetchable) =
            self.with_leader_log_epoch(current_leader_epoch, |log, epoch| {
                let fetchable = Fetchable::of(log, epoch, spec);
                (
                    local_offset(log, spec),
                    log.log_start_offset(),
                    epoch,
                    fetchable,
                )
            })?;
        let (timestamp, offset) = self.remote_offset(spec, local, local_start).await?;
        let (timestamp, offset) = fetchable.check(spec, timestamp, offset)?;
        Ok(FoundOffset {
            timestamp,
            offset,
            leader_epoch,
        })
    }

    /// ListOffsets over the local log only: `(timestamp, offset)`.
    pub fn list_local_offset(&self, spec: OffsetSpec) -> Result<(i64, i64), PartitionError> {
        self.with_leader_log(-1, |log| local_offset(log, spec))?
    }

    /// The remote part of ListOffsets: earliest (remote start), latest-tiered, max timestamp
    /// and by time over remote segments below the local log start.
    async fn remote_offset(
        &self,
        spec: OffsetSpec,
        local: Result<(i64, i64), PartitionError>,
        local_start: i64,
    ) -> Result<(i64, i64), PartitionError> {
        let (Some(remote), Some(tiering)) = (self.remote(), self.tiering()) else {
            return local;
        };
        let m = remote.manifest();
        match spec {
            OffsetSpec::Earliest => local.map(|(ts, _)| {
                (
                    ts,
                    tiering.log_start_offset(&self.topic, self.index, local_start),
                )
            }),
            OffsetSpec::LatestTiered => Ok((-1, m.next_offset().map(|n| n - 1).unwrap_or(-1))),
            OffsetSpec::MaxTimestamp => {
                let remote = m
                    .segments
                    .iter()
                    .filter(|s| s.base_offset < local_start)
                    .max_by_key(|s| s.max_timestamp_ms);
                match (remote, local) {
                    (Some(r), Ok((ts, _))) if r.max_timestamp_ms > ts => {
                        Ok((r.max_timestamp_ms, r.max_timestamp_offset))
                    }
                    (_, l) => l,
                }
            }
            OffsetSpec::Timestamp(ts) if m.start_offset().is_some_and(|s| s < local_start) => {
                match tiering.storage().offset_for_timestamp(&remote, ts).await {
                    Ok(Some((offset, found_ts))) if offset < local_start => Ok((found_ts, offset)),
                    Ok(_) => local,
                    Err(e) => {
                        tracing::warn!(topic = %self.topic, partition = self.index, timestamp = ts, error = %e, "remote ListOffsets failed");
                        Err(PartitionError::Remote(e))
                    }
                }
            }
            _ => local,
        }
    }

    /// DeleteRecords: move the log start to `before_offset` (or the high watermark for
    /// [`DELETE_TO_HIGH_WATERMARK`]), deleting whole segments below it, locally and in remote
    /// storage. Kafka's rules: the target must lie in `[0, high watermark]`, else
    /// OFFSET_OUT_OF_RANGE; a target below the local log start moves only the remote start.
    /// Returns the low watermark clients see.
    pub async fn delete_records(&self, before_offset: i64) -> Result<i64, PartitionError> {
        let moved = self.with_leader_log(-1, |log| {
            let hw = log.high_watermark();
            let target = if before_offset == DELETE_TO_HIGH_WATERMARK {
                hw
            } else {
                before_offset
            };
            if target < 0 || target > hw {
                return Err(PartitionError::OffsetOutOfRange {
                    offset: target,
                    log_start: log.log_start_offset(),
                    high_watermark: hw,
                });
            }
            if target < log.log_start_offset() {
                // Below the local log: only remote data moves (tiered).
                return Ok((target, log.log_start_offset()));
            }
            let start = log.delete_records_before(target)?;
            debug_assert!(start >= target, "the log start moved to {start} < {target}");
            Ok((target, start))
        })?;
        // Fetches waiting below the new start wake and get OFFSET_OUT_OF_RANGE.
        self.publish_high_watermark();
        let (target, local_start) = moved?;
        let (Some(remote), Some(tiering)) = (self.remote(), self.tiering()) else {
            return Ok(local_start);
        };
        tiering.storage().delete_before(&remote, target).await?;
        Ok(tiering
            .log_start_offset(&self.topic, self.index, local_start)
            .max(target.min(local_start)))
    }

    /// Move the local log start to `offset` (<= the high watermark), deleting whole local
    /// segments below it: snapshots of `__consumer_offsets`, local retention of tiered data.
    /// Returns the new local log start.
    pub fn delete_local_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
        let deleted = self.with_log(|log| log.delete_records_before(offset))?;
        self.publish_high_watermark();
        Ok(deleted?)
    }

    /// OffsetForLeaderEpoch: the end offset of `leader_epoch` (the start of the next one, or
    /// the log end for the latest), as `(epoch, end offset)`; `None` for an epoch before
    /// everything the log knows. `current_leader_epoch` is the client's view (-1 = not
    /// checked).
    pub fn end_offset_for_epoch(
        &self,
        leader_epoch: i32,
        current_leader_epoch: i32,
    ) -> Result<Option<(i32, i64)>, PartitionError> {
        self.with_leader_log_epoch(current_leader_epoch, |log, current| {
            log.end_offset_for_epoch(leader_epoch).or_else(|| {
                // An empty log has no epochs yet: its end is the log end offset.
                (log.latest_epoch().is_none() && leader_epoch >= current)
                    .then(|| (current, log.log_end_offset()))
            })
        })
    }
}

/// What a client may be told of a leader's log (Kafka's `lastFetchableOffset` rule): offsets at
/// or past the high watermark (the last stable offset for read_committed) are not named. A
/// leader elected with a high watermark below the start of its epoch (it lags the previous
/// leader's until the followers fetch again) answers OFFSET_NOT_AVAILABLE, retriable, for
/// "latest" and for a lookup past it: telling a client an end below what was committed would
/// hide records it was told were written.
#[derive(Debug, Clone, Copy)]
struct Fetchable {
    last_fetchable: i64,
    lagging: Option<(i64, i64)>,
}

impl Fetchable {
    fn of(log: &Log, epoch: i32, spec: OffsetSpec) -> Fetchable {
        let hw = log.high_watermark();
        let last_fetchable = match spec {
            OffsetSpec::LastStable => log.last_stable_offset(),
            _ => hw,
        };
        let epoch_start = log
            .leader_epochs()
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|&(_, start)| start);
        Fetchable {
            last_fetchable,
            lagging: epoch_start
                .filter(|&start| start > hw)
                .map(|start| (hw, start)),
        }
    }

    /// The answer to give for `spec` found at `(timestamp, offset)`.
    fn check(
        self,
        spec: OffsetSpec,
        timestamp: i64,
        offset: i64,
    ) -> Result<(i64, i64), PartitionError> {
        let not_available = |(high_watermark, epoch_start)| PartitionError::OffsetNotAvailable {
            high_watermark,
            epoch_start,
        };
        match spec {
            OffsetSpec::Latest | OffsetSpec::LastStable => match self.lagging {
                Some(l) => Err(not_available(l)),
                None => Ok((timestamp, offset)),
            },
            OffsetSpec::Timestamp(_) | OffsetSpec::MaxTimestamp
                if offset >= self.last_fetchable =>
            {
                match self.lagging {
                    Some(l) => Err(not_available(l)),
                    None => Ok((-1, -1)),
                }
            }
            _ => Ok((timestamp, offset)),
        }
    }
}

/// `(timestamp, offset)` for one ListOffsets query over the local log; offset -1 when
/// nothing matches.
fn local_offset(log: &Log, spec: OffsetSpec) -> Result<(i64, i64), PartitionError> {
    match spec {
        OffsetSpec::Latest => Ok((-1, log.high_watermark())),
        OffsetSpec::LastStable => Ok((-1, log.last_stable_offset())),
        OffsetSpec::Earliest | OffsetSpec::EarliestLocal => Ok((-1, log.log_start_offset())),
        OffsetSpec::LatestTiered => Ok((-1, -1)),
        OffsetSpec::MaxTimestamp => Ok(log
            .max_timestamp_and_offset()
            .map(|(offset, ts)| (ts, offset))
            .unwrap_or((-1, -1))),
        OffsetSpec::Unsupported(ts) => Err(PartitionError::InvalidRequest(format!(
            "unsupported ListOffsets timestamp {ts}"
        ))),
        OffsetSpec::Timestamp(ts) => match log.offset_for_timestamp(ts)? {
            Some((offset, found_ts)) => Ok((found_ts, offset)),
            None => Ok((-1, -1)),
        },
    }
}

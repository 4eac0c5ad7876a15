//! Tiering with replicas (KIP-405's RemoteLogManager): the decisions, without I/O.
//!
//! - Only the partition leader uploads and writes the manifest; it uploads only sealed data
//!   below its high watermark (committed in every in-sync replica, so a leader change never
//!   truncates what is remote).
//! - A follower reads the leader's manifest each tiering interval and deletes local segments
//!   that are wholly remote and below its own high watermark — the leader's local retention
//!   rule, bounded by what the follower knows is committed — and data below the remote log
//!   start (the leader's total retention or DeleteRecords removed it from the whole log).
//! - A new leader loads the manifest and continues from its end (`uploader::resume_offset`).

use crate::local::LocalSegment;
use crate::manifest::{PartitionManifest, RemoteSegment};
use crate::tiering::TierPolicy;

/// A replica's part in the tiering pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierRole {
    /// The partition leader in `leader_epoch`: uploads, writes the manifest, applies retention.
    Leader { leader_epoch: i32 },
    /// A follower (or a replica not serving): reads the manifest, deletes only local data.
    Follower,
}

/// The sealed segments the leader uploads now, in offset order: those not (wholly) remote
/// yet, not below the local log start, and entirely below the high watermark.
pub fn segments_to_upload(
    sealed: &[LocalSegment],
    remote_next: Option<i64>,
    local_log_start_offset: i64,
    high_watermark: i64,
) -> Vec<LocalSegment> {
    let next = remote_next.unwrap_or(i64::MIN);
    sealed
        .iter()
        .filter(|s| {
            s.next_base_offset > next
                && s.next_base_offset > local_log_start_offset
                && s.next_base_offset <= high_watermark
                && s.size_bytes > 0
        })
        .cloned()
        .collect()
}

/// Where local retention may cut (a sealed segment boundary), over segments wholly below
/// `covered` (the remote end for the leader; for a follower also its high watermark), by
/// `local.retention.ms` / `local.retention.bytes`.
pub fn local_retention_cut(
    sealed: &[LocalSegment],
    local_log_start_offset: i64,
    local_bytes: u64,
    covered: i64,
    m: &PartitionManifest,
    policy: TierPolicy,
    now_ms: i64,
) -> Option<i64> {
    let (lms, lbytes) = (policy.effective_local_ms(), policy.effective_local_bytes());
    let mut local_total = local_bytes;
    let mut cut = None;
    for s in sealed
        .iter()
        .filter(|s| s.next_base_offset > local_log_start_offset)
    {
        if s.next_base_offset > covered {
            break; // not remote (or not known committed) yet: never deleted
        }
        let by_time = expired_by_time(m.segment_for(s.base_offset), lms, now_ms);
        let by_size = lbytes >= 0 && local_total.saturating_sub(s.size_bytes) >= lbytes as u64;
        if !(by_time || by_size) {
            break;
        }
        local_total = local_total.saturating_sub(s.size_bytes);
        cut = Some(s.next_base_offset);
    }
    cut
}

/// Where a follower cuts its local log after reading the leader's manifest `m`: local
/// retention over segments wholly remote and below its high watermark, and everything below
/// the remote log start. `None`: nothing to delete.
pub fn follower_cut(
    sealed: &[LocalSegment],
    local_log_start_offset: i64,
    local_bytes: u64,
    m: &PartitionManifest,
    high_watermark: i64,
    policy: TierPolicy,
    now_ms: i64,
) -> Option<i64> {
    let covered = m.next_offset()?.min(high_watermark);
    let retained = local_retention_cut(
        sealed,
        local_log_start_offset,
        local_bytes,
        covered,
        m,
        policy,
        now_ms,
    );
    let below_start_bound = m.log_start_offset.min(high_watermark);
    let below_start = sealed
        .iter()
        .map(|s| s.next_base_offset)
        .filter(|b| *b <= below_start_bound)
        .max();
    retained
        .max(below_start)
        .filter(|cut| *cut > local_log_start_offset)
}

/// When an uploaded segment was last written, as far as is known: its largest record timestamp
/// or, when no record carries one (-1), its upload time, which comes after the segment was
/// sealed (so age measured from it is never more than the true age). Kafka ages a segment
/// without timestamps from its file's mtime (`LogSegment.largestTimestamp`).
fn largest_timestamp_ms(s: &RemoteSegment) -> Option<i64> {
    if s.max_timestamp_ms >= 0 {
        Some(s.max_timestamp_ms)
    } else {
        (s.uploaded_at_ms > 0).then_some(s.uploaded_at_ms)
    }
}

/// Whether `retention_ms` (-1 = unlimited) deletes `segment` at `now_ms`. A segment whose age
/// cannot be known (not in the manifest, no timestamps, no upload time) is never deleted by
/// time. (Records with timestamp -1 used to count as infinitely old: deleted at the first pass.)
pub(crate) fn expired_by_time(
    segment: Option<&RemoteSegment>,
    retention_ms: i64,
    now_ms: i64,
) -> bool {
    retention_ms >= 0
        && segment
            .and_then(largest_timestamp_ms)
            .is_some_and(|ts| now_ms.saturating_sub(ts) > retention_ms)
}

#[cfg(test)]
#[path = "replica_rules_tests.rs"]
mod tests;

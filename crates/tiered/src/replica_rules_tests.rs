//! The replica decisions of tiering: who uploads what, what a follower deletes, where a new
//! leader resumes; and segment age by time.

use std::path::PathBuf;

use super::*;
use crate::layout::ObjectKind;
use crate::layout::PartitionId;
use crate::uploader::{may_write, resume_offset};

fn segment(max_timestamp_ms: i64, uploaded_at_ms: i64) -> RemoteSegment {
    RemoteSegment {
        segment_id: "s".into(),
        base_offset: 0,
        last_offset: 9,
        size_bytes: 100,
        max_timestamp_ms,
        max_timestamp_offset: if max_timestamp_ms < 0 { -1 } else { 9 },
        batch_count: 1,
        objects: Vec::new(),
        uploaded_at_ms,
        txn_index_entries: Some(0),
        producer_snapshot_offset: None,
    }
}

#[test]
fn segments_age_by_largest_timestamp_and_unknown_age_is_never_deleted_by_time() {
    let now = 1_000_000_000;
    let day = 86_400_000;
    // Records without timestamps, uploaded just now: kept (used to be deleted at once).
    assert!(!expired_by_time(Some(&segment(-1, now - 1_000)), day, now));
    // ... and deleted once the upload is older than retention.ms.
    assert!(expired_by_time(Some(&segment(-1, now - 2 * day)), day, now));
    // No timestamps and no upload time: unknown age, never deleted by time.
    assert!(!expired_by_time(Some(&segment(-1, 0)), 0, now));
    assert!(!expired_by_time(None, 0, now));
    // Timestamps decide when present, whatever the upload time.
    assert!(expired_by_time(
        Some(&segment(now - 2 * day, now)),
        day,
        now
    ));
    assert!(!expired_by_time(
        Some(&segment(now - 1_000, now - 2 * day)),
        day,
        now
    ));
    // 1970-dated records go; unlimited retention keeps everything.
    assert!(expired_by_time(Some(&segment(5, now)), day, now));
    assert!(!expired_by_time(Some(&segment(5, now)), -1, now));
}

fn local(base: i64, next: i64) -> LocalSegment {
    LocalSegment {
        base_offset: base,
        next_base_offset: next,
        log_path: PathBuf::from(format!("{base:020}.log")),
        size_bytes: 100,
    }
}

fn remote(base: i64, last: i64) -> RemoteSegment {
    RemoteSegment {
        segment_id: format!("s{base}"),
        base_offset: base,
        last_offset: last,
        size_bytes: 100,
        max_timestamp_ms: 1,
        max_timestamp_offset: last,
        batch_count: 1,
        objects: vec![ObjectKind::Log, ObjectKind::RemoteIndex],
        uploaded_at_ms: 1,
        txn_index_entries: Some(0),
        producer_snapshot_offset: None,
    }
}

fn manifest(segments: &[(i64, i64)]) -> PartitionManifest {
    let mut m = PartitionManifest::empty(&PartitionId::new("t", "id", 0));
    m.segments = segments.iter().map(|(b, l)| remote(*b, *l)).collect();
    m.log_start_offset = m.segments.first().map_or(0, |s| s.base_offset);
    m
}

/// Keep nothing locally that is remote (local.retention.bytes=0).
fn keep_nothing() -> TierPolicy {
    TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    }
}

#[test]
fn only_the_leader_writes_the_manifest_and_never_over_a_newer_leader() {
    use crate::manifest::NO_LEADER_EPOCH;
    assert!(may_write(3, 3), "the leader that claimed it");
    assert!(may_write(4, 3), "a newer leader takes over");
    assert!(
        may_write(0, NO_LEADER_EPOCH),
        "a manifest from before replication"
    );
    assert!(!may_write(2, 3), "a deposed leader is fenced");
    assert!(
        !may_write(NO_LEADER_EPOCH, NO_LEADER_EPOCH),
        "a follower never writes"
    );
}

#[test]
fn the_leader_uploads_sealed_segments_below_its_high_watermark_after_the_remote_end() {
    let sealed = [local(0, 10), local(10, 20), local(20, 30)];
    let bases = |v: Vec<LocalSegment>| v.iter().map(|s| s.base_offset).collect::<Vec<_>>();
    assert_eq!(bases(segments_to_upload(&sealed, None, 0, 30)), [0, 10, 20]);
    // The third segment reaches above the high watermark: not committed, may be truncated.
    assert_eq!(bases(segments_to_upload(&sealed, None, 0, 29)), [0, 10]);
    // Resume after the remote end; a segment straddling it is still pending (partly).
    assert_eq!(
        bases(segments_to_upload(&sealed, Some(15), 0, 30)),
        [10, 20]
    );
    assert_eq!(bases(segments_to_upload(&sealed, Some(20), 0, 30)), [20]);
    // Nothing below the local log start.
    assert!(segments_to_upload(&sealed, Some(0), 30, 30).is_empty());
}

#[test]
fn a_new_leader_resumes_at_the_manifest_end_without_duplicate_or_gap() {
    // The old leader uploaded 0..=14; the new leader rolled at different offsets.
    let m = manifest(&[(0, 9), (10, 14)]);
    // Wholly remote already: not uploaded again (segments_to_upload filters it).
    assert!(segments_to_upload(&[local(0, 12)], m.next_offset(), 0, 100).is_empty());
    // Straddles the remote end: uploaded from 15, its first offset not remote.
    assert_eq!(resume_offset(&m, &local(12, 20)), Some(15));
    // Starts exactly at the end: whole.
    assert_eq!(resume_offset(&m, &local(15, 20)), None);
    // Nothing remote yet: whole.
    assert_eq!(resume_offset(&manifest(&[]), &local(0, 20)), None);
}

#[test]
fn a_follower_deletes_only_what_is_remote_and_below_its_high_watermark() {
    let sealed = [local(0, 10), local(10, 20), local(20, 30)];
    let m = manifest(&[(0, 9), (10, 19)]);
    let cut = |hw: i64, start: i64| follower_cut(&sealed, start, 400, &m, hw, keep_nothing(), 2);
    // Remote end 20, high watermark past it: both remote segments go, not the third.
    assert_eq!(cut(100, 0), Some(20));
    // Its high watermark lags: only what it knows is committed.
    assert_eq!(cut(15, 0), Some(10));
    assert_eq!(cut(9, 0), None);
    // Already deleted: nothing more to do.
    assert_eq!(cut(100, 20), None);
    // Nothing remote: nothing deleted.
    assert_eq!(
        follower_cut(&sealed, 0, 400, &manifest(&[]), 100, keep_nothing(), 2),
        None
    );
    // Local retention as on the leader: keep 150 of 300 local bytes -> only the first segment goes.
    let keep_150 = TierPolicy {
        local_retention_bytes: 150,
        ..keep_nothing()
    };
    assert_eq!(
        follower_cut(&sealed, 0, 300, &m, 100, keep_150, 2),
        Some(10)
    );
    // The leader's total retention moved the remote log start to 20: below it goes too.
    let mut trimmed = manifest(&[(20, 29)]);
    trimmed.log_start_offset = 20;
    let keep_all = TierPolicy {
        local_retention_bytes: -1,
        ..keep_nothing()
    };
    assert_eq!(
        follower_cut(&sealed, 0, 300, &trimmed, 100, keep_all, 2),
        Some(20)
    );
    assert_eq!(
        follower_cut(&sealed, 0, 300, &trimmed, 12, keep_all, 2),
        Some(10)
    );
}

#[test]
fn the_follower_rule_matches_the_leaders_local_retention() {
    let sealed = [local(0, 10), local(10, 20), local(20, 30)];
    let m = manifest(&[(0, 9), (10, 19), (20, 29)]);
    for keep in [-1, 0, 100, 150, 250] {
        let policy = TierPolicy {
            local_retention_bytes: keep,
            ..keep_nothing()
        };
        let leader = local_retention_cut(&sealed, 0, 400, 30, &m, policy, 2);
        let follower = follower_cut(&sealed, 0, 400, &m, i64::MAX, policy, 2);
        assert_eq!(leader, follower, "local.retention.bytes={keep}");
    }
}

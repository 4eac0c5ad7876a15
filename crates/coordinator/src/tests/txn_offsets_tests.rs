//! TxnOffsetCommit fencing (KIP-447) and OffsetFetch `require_stable`.

use std::collections::BTreeSet;

use kafka_protocol::ResponseError;

use super::harness::*;
use crate::*;

fn code(e: ResponseError) -> Result<(), i16> {
    Err(e.code())
}

#[test]
fn txn_commit_of_current_member_is_accepted() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    for id in &ids {
        assert_eq!(
            h.c.validate_txn_offset_commit("g", generation, id, None),
            Ok(())
        );
    }
}

#[test]
fn txn_commit_of_removed_member_is_unknown_member() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    h.leave("g", &[(&ids[1], None)]);
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &ids[1], None),
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, "never-joined", None),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn txn_commit_of_older_generation_is_illegal_generation() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    // A new member makes a new generation; the old one's commits are refused even while the
    // rebalance is going on (PreparingRebalance) and after it (Stable).
    let (_, t) = h.join_new("g");
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &ids[0], None),
        Ok(()),
        "the current generation still commits while the group prepares a rebalance"
    );
    let t0 = h.join(join_request("g", &ids[0], None));
    h.advance(100);
    let r0 = h.join_reply(t0).unwrap();
    h.join_reply(t).unwrap();
    assert_eq!(h.c.group_state("g"), Some(GroupState::CompletingRebalance));
    assert!(r0.generation_id > generation);
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &ids[0], None),
        code(ResponseError::IllegalGeneration)
    );
    // Unlike OffsetCommit, no REBALANCE_IN_PROGRESS for the new generation.
    assert_eq!(
        h.c.validate_txn_offset_commit("g", r0.generation_id, &ids[0], None),
        Ok(())
    );
    assert_eq!(
        h.c.validate_txn_offset_commit("g", r0.generation_id + 1, &ids[0], None),
        code(ResponseError::IllegalGeneration)
    );
}

#[test]
fn txn_commit_of_replaced_static_member_is_fenced() {
    let mut h = Harness::new(config(100));
    let t = h.join(join_request("g", "", Some("i-1")));
    h.advance(100);
    h.advance(100);
    let first = h.join_reply(t).unwrap();
    let s = h.sync(
        "g",
        &first.member_id,
        first.generation_id,
        vec![(first.member_id.clone(), bytes::Bytes::from_static(b"a"))],
    );
    assert_eq!(h.sync_reply(s).unwrap().error_code, 0);
    let generation = first.generation_id;
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &first.member_id, Some("i-1")),
        Ok(())
    );
    // The instance restarts with a new member id: the old one is a zombie.
    let t = h.join(join_request("g", "", Some("i-1")));
    let second = h.join_reply(t).unwrap();
    assert_eq!(second.error_code, 0);
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &first.member_id, Some("i-1")),
        code(ResponseError::FencedInstanceId)
    );
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &second.member_id, Some("i-1")),
        Ok(())
    );
    // An instance id the group does not know.
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &second.member_id, Some("i-2")),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn txn_commit_without_member_skips_the_checks() {
    let mut h = Harness::new(config(100));
    let (_, generation) = h.stable_group("g", 1);
    // TxnOffsetCommit v0-2 and sendOffsetsToTransaction(offsets, groupId): -1 and "" are
    // accepted even though the group has members (OffsetCommit would say UNKNOWN_MEMBER_ID).
    assert_eq!(h.c.validate_txn_offset_commit("g", -1, "", None), Ok(()));
    assert_eq!(
        h.commit("g", "", -1, "t", 0, 1),
        ResponseError::UnknownMemberId.code()
    );
    // A generation alone is checked against the members.
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, "", None),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn txn_commit_to_missing_empty_or_dead_group() {
    let mut h = Harness::new(config(100));
    // No such group: a simple group takes offsets without a generation only.
    assert_eq!(h.c.validate_txn_offset_commit("new", -1, "", None), Ok(()));
    assert_eq!(
        h.c.validate_txn_offset_commit("new", 1, "m", None),
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        h.c.validate_txn_offset_commit("", -1, "", None),
        code(ResponseError::InvalidGroupId)
    );
    // An Empty group (every member left): anything without a generation is taken, a member
    // of the old generation is unknown.
    let (ids, generation) = h.stable_group("g", 1);
    h.leave("g", &[(&ids[0], None)]);
    assert_eq!(h.c.group_state("g"), Some(GroupState::Empty));
    assert_eq!(
        h.c.validate_txn_offset_commit("g", -1, &ids[0], None),
        Ok(())
    );
    assert_eq!(
        h.c.validate_txn_offset_commit("g", generation, &ids[0], None),
        code(ResponseError::UnknownMemberId)
    );
    h.c.groups
        .get_mut("g")
        .unwrap()
        .transition(GroupState::Dead, h.now_ms);
    assert_eq!(
        h.c.validate_txn_offset_commit("g", -1, "", None),
        code(ResponseError::CoordinatorNotAvailable)
    );
}

#[test]
fn require_stable_answers_pending_partitions_unstable() {
    let mut h = Harness::new(config(100));
    assert_eq!(h.commit("g", "", -1, "t", 0, 10), 0);
    assert_eq!(h.commit("g", "", -1, "t", 1, 20), 0);
    let pending: BTreeSet<(String, i32)> = [("t".to_string(), 0), ("u".to_string(), 4)].into();
    let wanted = [("t".to_string(), vec![0, 1, 2]), ("u".to_string(), vec![4])];
    let result = h.c.fetch_offsets_stable("g", Some(&wanted), &pending);
    assert_eq!(result.error_code, 0);
    let t = &result.topics[0].partitions;
    let unstable = ResponseError::UnstableOffsetCommit.code();
    assert_eq!(
        (t[0].offset, t[0].leader_epoch, t[0].error_code),
        (-1, -1, unstable)
    );
    assert_eq!(t[0].metadata, "");
    assert_eq!((t[1].offset, t[1].error_code), (20, 0));
    assert_eq!((t[2].offset, t[2].error_code), (-1, 0));
    let u = &result.topics[1].partitions;
    assert_eq!((u[0].offset, u[0].error_code), (-1, unstable));
    // Without require_stable: the last committed offset.
    let plain = h.c.fetch_offsets("g", Some(&wanted));
    assert_eq!(plain.topics[0].partitions[0].offset, 10);
    // Every offset of the group: only committed partitions are listed.
    let all = h.c.fetch_offsets_stable("g", None, &pending);
    assert_eq!(all.topics.len(), 1);
    let parts = &all.topics[0].partitions;
    assert_eq!(parts.len(), 2);
    assert_eq!((parts[0].offset, parts[0].error_code), (-1, unstable));
    assert_eq!((parts[1].offset, parts[1].error_code), (20, 0));
}

/// Pending transactional offsets as a test sets them.
#[derive(Default)]
struct Pending(std::sync::Mutex<BTreeSet<(String, String, i32)>>);

impl PendingTxnOffsets for Pending {
    fn pending_partitions(&self, group_id: &str) -> BTreeSet<(String, i32)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _, _)| g == group_id)
            .map(|(_, t, p)| (t.clone(), *p))
            .collect()
    }
}

#[test]
fn pending_transactional_offsets_hold_back_offset_expiry() {
    let mut cfg = config(100);
    cfg.offsets_retention_ms = 60_000;
    cfg.offsets_retention_check_interval_ms = 1_000;
    let mut h = Harness::new(cfg);
    let pending = std::sync::Arc::new(Pending::default());
    h.c.set_pending_txn_offsets(pending.clone());
    // A simple group: its offsets expire 60 s after their commit.
    assert_eq!(h.commit("s", "", -1, "t", 0, 5), 0);
    assert_eq!(h.commit("s", "", -1, "t", 1, 6), 0);
    // A transaction holds offsets for t-0 (not yet committed or aborted).
    pending
        .0
        .lock()
        .unwrap()
        .insert(("s".to_string(), "t".to_string(), 0));
    h.advance(61_000);
    assert_eq!(h.fetch("s", "t", 0).offset, 5, "pending: kept");
    assert_eq!(h.fetch("s", "t", 1).offset, -1, "expired");
    assert!(h.c.group_state("s").is_some(), "the group keeps its offset");
    // The transaction ended (aborted: nothing committed): the old offset expires now.
    pending.0.lock().unwrap().clear();
    h.advance(1_000);
    assert_eq!(h.fetch("s", "t", 0).offset, -1);
    h.advance(1_000);
    assert_eq!(h.c.group_state("s"), None, "no offsets left: group removed");
}

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::harness::*;
use crate::*;

#[test]
fn first_join_requires_member_id_then_completes_after_initial_delay() {
    let mut h = Harness::new(config(3_000));
    let (member, token) = h.join_new("g");
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    h.advance(2_999);
    assert!(h.join_reply(token).is_none(), "waits for the initial delay");
    h.advance(1);
    let reply = h.join_reply(token).expect("join completes at the delay");
    assert_eq!(reply.error_code, 0);
    assert_eq!(reply.generation_id, 1);
    assert_eq!(reply.leader, member);
    assert_eq!(reply.protocol_name.as_deref(), Some("range"));
    assert_eq!(reply.members.len(), 1, "the leader gets the member list");
    assert_eq!(h.c.group_state("g"), Some(GroupState::CompletingRebalance));

    let sync = h.sync(
        "g",
        &member,
        1,
        vec![(member.clone(), Bytes::from_static(b"a"))],
    );
    let sync = h.sync_reply(sync).unwrap();
    assert_eq!(sync.error_code, 0);
    assert_eq!(sync.assignment, Bytes::from_static(b"a"));
    assert_eq!(h.c.group_state("g"), Some(GroupState::Stable));
    assert!(!h.appended.is_empty(), "the group metadata is stored");
}

#[test]
fn join_without_member_id_requirement_joins_directly() {
    let mut h = Harness::new(config(0));
    let mut request = join_request("g", "", None);
    request.require_known_member_id = false;
    let token = h.join(request);
    let reply = h
        .join_reply(token)
        .expect("initial delay 0 completes at once");
    assert_eq!(reply.error_code, 0);
    assert_eq!(reply.generation_id, 1);
    assert_eq!(reply.leader, reply.member_id);
}

#[test]
fn initial_delay_extends_while_members_arrive_and_is_bounded_by_rebalance_timeout() {
    let mut h = Harness::new(config(3_000));
    let (_, t1) = h.join_new("g");
    h.advance(1_000);
    let (_, t2) = h.join_new("g");
    h.advance(2_000); // first deadline: a member arrived, so wait another delay
    assert!(h.join_reply(t1).is_none());
    h.advance(2_999);
    assert!(h.join_reply(t1).is_none());
    h.advance(1);
    let r1 = h.join_reply(t1).unwrap();
    let r2 = h.join_reply(t2).unwrap();
    assert_eq!((r1.generation_id, r2.generation_id), (1, 1));
    assert_eq!(
        r1.members.len() + r2.members.len(),
        2,
        "the leader sees both"
    );
}

#[test]
fn new_member_triggers_rebalance_and_completes_when_all_rejoin() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    let (new_member, new_token) = h.join_new("g");
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert!(h.join_reply(new_token).is_none());
    // Existing members learn about the rebalance from their heartbeats.
    assert_eq!(
        h.heartbeat("g", &ids[0], generation),
        ResponseError::RebalanceInProgress.code()
    );
    let t0 = h.join(join_request("g", &ids[0], None));
    assert!(h.join_reply(t0).is_none(), "waits for the other member");
    let t1 = h.join(join_request("g", &ids[1], None));
    let replies: Vec<_> = [t0, t1, new_token]
        .into_iter()
        .map(|t| {
            h.join_reply(t)
                .expect("everyone rejoined: complete at once")
        })
        .collect();
    assert!(replies.iter().all(|r| r.generation_id == generation + 1));
    let leaders: Vec<_> = replies.iter().filter(|r| !r.members.is_empty()).collect();
    assert_eq!(leaders.len(), 1);
    assert_eq!(leaders[0].members.len(), 3);
    assert!(replies.iter().any(|r| r.member_id == new_member));
}

#[test]
fn follower_sync_waits_for_the_leader_assignment() {
    let mut h = Harness::new(config(100));
    let (a, ta) = h.join_new("g");
    let (b, tb) = h.join_new("g");
    h.advance(100);
    h.advance(100);
    let ra = h.join_reply(ta).unwrap();
    let rb = h.join_reply(tb).unwrap();
    let (leader, follower) = if ra.leader == a { (a, b) } else { (b, a) };
    assert_eq!(rb.leader, ra.leader);
    let follower_sync = h.sync("g", &follower, 1, vec![]);
    assert!(
        h.sync_reply(follower_sync).is_none(),
        "parked until the leader syncs"
    );
    let leader_sync = h.sync(
        "g",
        &leader,
        1,
        vec![
            (follower.clone(), Bytes::from_static(b"f")),
            ("ghost".into(), Bytes::from_static(b"x")),
        ],
    );
    assert_eq!(
        h.sync_reply(follower_sync).unwrap().assignment,
        Bytes::from_static(b"f")
    );
    assert_eq!(
        h.sync_reply(leader_sync).unwrap().assignment,
        Bytes::new(),
        "a member the leader left out gets an empty assignment"
    );
    assert_eq!(h.c.group_state("g"), Some(GroupState::Stable));
}

#[test]
fn member_that_does_not_rejoin_is_removed_at_rebalance_timeout() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    let t0 = h.join(join_request("g", &ids[0], None)); // leader rejoin forces a rebalance
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    // ids[1] keeps heartbeating but never rejoins.
    for _ in 0..5 {
        h.advance(5_000);
        assert_eq!(
            h.heartbeat("g", &ids[1], generation),
            ResponseError::RebalanceInProgress.code()
        );
    }
    assert!(h.join_reply(t0).is_none());
    h.advance(REBALANCE_MS as i64 - 25_000);
    let reply = h
        .join_reply(t0)
        .expect("rebalance timeout completes the join");
    assert_eq!(reply.generation_id, generation + 1);
    assert_eq!(reply.members.len(), 1);
    assert_eq!(
        h.heartbeat("g", &ids[1], generation + 1),
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn session_timeout_removes_a_silent_member_and_rebalances() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    h.advance(SESSION_MS as i64 * 6 / 10);
    assert_eq!(h.heartbeat("g", &ids[0], generation), 0);
    h.advance(SESSION_MS as i64 * 6 / 10);
    // ids[1] has been silent for 1.2 session timeouts: gone, and the group rebalances.
    assert_eq!(
        h.heartbeat("g", &ids[0], generation),
        ResponseError::RebalanceInProgress.code()
    );
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat("g", &ids[1], generation),
        ResponseError::UnknownMemberId.code()
    );
    let t0 = h.join(join_request("g", &ids[0], None));
    let reply = h.join_reply(t0).expect("the only member rejoined");
    assert_eq!(reply.generation_id, generation + 1);
    assert_eq!(reply.members.len(), 1);
}

#[test]
fn heartbeat_exactly_before_session_timeout_keeps_member() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    for _ in 0..10 {
        h.advance(SESSION_MS as i64 - 1);
        assert_eq!(h.heartbeat("g", &ids[0], generation), 0);
    }
    assert_eq!(h.c.group_state("g"), Some(GroupState::Stable));
}

#[test]
fn stale_generation_is_rejected() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    assert_eq!(
        h.heartbeat("g", &ids[0], generation - 1),
        ResponseError::IllegalGeneration.code()
    );
    let s = h.sync("g", &ids[0], generation + 5, vec![]);
    assert_eq!(
        h.sync_reply(s).unwrap().error_code,
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        h.commit("g", &ids[0], generation - 1, "t", 0, 5),
        ResponseError::IllegalGeneration.code()
    );
}

#[test]
fn unknown_members_are_rejected_everywhere() {
    let mut h = Harness::new(config(100));
    let (_, generation) = h.stable_group("g", 1);
    assert_eq!(
        h.heartbeat("g", "nobody", generation),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        h.heartbeat("no-group", "nobody", 1),
        ResponseError::UnknownMemberId.code()
    );
    let s = h.sync("g", "nobody", generation, vec![]);
    assert_eq!(
        h.sync_reply(s).unwrap().error_code,
        ResponseError::UnknownMemberId.code()
    );
    let j = h.join(join_request("g", "nobody", None));
    assert_eq!(
        h.join_reply(j).unwrap().error_code,
        ResponseError::UnknownMemberId.code()
    );
    let j = h.join(join_request("no-group", "nobody", None));
    assert_eq!(
        h.join_reply(j).unwrap().error_code,
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(h.c.group_state("no-group"), None);
    assert_eq!(
        h.commit("g", "nobody", generation, "t", 0, 1),
        ResponseError::UnknownMemberId.code()
    );
    let left = h.leave("g", &[("nobody", None)]);
    assert_eq!(
        left.members[0].error_code,
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn invalid_join_requests() {
    let mut h = Harness::new(config(0));
    let j = h.join(join_request("", "", None));
    assert_eq!(
        h.join_reply(j).unwrap().error_code,
        ResponseError::InvalidGroupId.code()
    );
    let mut request = join_request("g", "", None);
    request.session_timeout_ms = 10;
    let j = h.join(request);
    assert_eq!(
        h.join_reply(j).unwrap().error_code,
        ResponseError::InvalidSessionTimeout.code()
    );
    let mut request = join_request("g", "", None);
    request.protocols.clear();
    let j = h.join(request);
    assert_eq!(
        h.join_reply(j).unwrap().error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
}

#[test]
fn protocol_selection_and_inconsistent_protocols() {
    let mut h = Harness::new(config(100));
    let (_, t1) = h.join_new("g");
    let first = h.c.group_count();
    assert_eq!(first, 1);
    let mut request = join_request("g", "", None);
    request.require_known_member_id = false;
    request.protocols = protocols(&["roundrobin", "range"], &["t"]);
    let t2 = h.join(request);
    // A member whose assignors share nothing with the group is refused.
    let mut request = join_request("g", "", None);
    request.protocols = protocols(&["cooperative-sticky"], &["t"]);
    let t3 = h.join(request);
    assert_eq!(
        h.join_reply(t3).unwrap().error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    let mut request = join_request("g", "", None);
    request.protocol_type = "connect".into();
    let t4 = h.join(request);
    assert_eq!(
        h.join_reply(t4).unwrap().error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    h.advance(100);
    h.advance(100);
    // Candidates: {range}; both vote range.
    assert_eq!(
        h.join_reply(t1).unwrap().protocol_name.as_deref(),
        Some("range")
    );
    assert_eq!(
        h.join_reply(t2).unwrap().protocol_name.as_deref(),
        Some("range")
    );

    // Preference votes decide among common protocols.
    let mut h = Harness::new(config(100));
    let mut tokens = Vec::new();
    for prefs in [
        &["roundrobin", "range"][..],
        &["roundrobin", "range"],
        &["range", "roundrobin"],
    ] {
        let mut request = join_request("g2", "", None);
        request.require_known_member_id = false;
        request.protocols = protocols(prefs, &["t"]);
        tokens.push(h.join(request));
    }
    h.advance(100);
    h.advance(100);
    for t in tokens {
        assert_eq!(
            h.join_reply(t).unwrap().protocol_name.as_deref(),
            Some("roundrobin")
        );
    }
}

#[test]
fn rejoin_with_same_metadata_while_completing_returns_same_generation() {
    let mut h = Harness::new(config(100));
    let (a, ta) = h.join_new("g");
    let (b, tb) = h.join_new("g");
    h.advance(100);
    h.advance(100);
    let ra = h.join_reply(ta).unwrap();
    h.join_reply(tb).unwrap();
    let follower = if ra.leader == a { b } else { a };
    let again = h.join(join_request("g", &follower, None));
    let again = h.join_reply(again).expect("answered at once");
    assert_eq!(again.generation_id, ra.generation_id);
    assert_eq!(h.c.group_state("g"), Some(GroupState::CompletingRebalance));
}

#[test]
fn join_during_completing_rebalance_cancels_parked_syncs() {
    let mut h = Harness::new(config(100));
    let (a, ta) = h.join_new("g");
    h.advance(100);
    let ra = h.join_reply(ta).unwrap();
    assert_eq!(ra.leader, a);
    let (b, tb) = h.join_new("g");
    // The group went back to PreparingRebalance; a's sync now gets REBALANCE_IN_PROGRESS.
    let s = h.sync("g", &a, ra.generation_id, vec![]);
    assert_eq!(
        h.sync_reply(s).unwrap().error_code,
        ResponseError::RebalanceInProgress.code()
    );
    let ta2 = h.join(join_request("g", &a, None));
    let ra2 = h.join_reply(ta2).unwrap();
    let rb = h.join_reply(tb).unwrap();
    assert_eq!(ra2.generation_id, 2);
    assert_eq!(rb.member_id, b);
}

#[test]
fn member_that_never_syncs_is_removed_after_rebalance_timeout() {
    let mut h = Harness::new(config(100));
    let (a, ta) = h.join_new("g");
    let (b, tb) = h.join_new("g");
    h.advance(100);
    h.advance(100);
    let ra = h.join_reply(ta).unwrap();
    h.join_reply(tb).unwrap();
    let (leader, silent) = if ra.leader == a { (a, b) } else { (b, a) };
    // The silent member heartbeats but never sends SyncGroup; the leader's sync is parked
    // only until the leader itself syncs, so keep the leader from syncing too.
    for _ in 0..(REBALANCE_MS / 5_000 - 1) {
        h.advance(5_000);
        assert_eq!(h.heartbeat("g", &silent, 1), 0);
        assert_eq!(h.heartbeat("g", &leader, 1), 0);
    }
    h.advance(5_000);
    // Both were pending sync at the deadline, so both are removed.
    assert_eq!(
        h.heartbeat("g", &silent, 1),
        ResponseError::UnknownMemberId.code()
    );
    assert!(matches!(
        h.c.group_state("g"),
        Some(GroupState::Empty | GroupState::PreparingRebalance)
    ));
}

#[test]
fn pending_member_expires_after_session_timeout() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    let first = h.join(join_request("g", "", None));
    let pending_id = h.join_reply(first).unwrap().member_id;
    // A leader rejoin starts a rebalance that must wait for the pending member...
    let t = h.join(join_request("g", &ids[0], None));
    assert!(h.join_reply(t).is_none());
    h.advance(SESSION_MS as i64);
    // ...until it expires.
    let reply = h
        .join_reply(t)
        .expect("completed once the pending member expired");
    assert_eq!(reply.generation_id, generation + 1);
    let late = h.join(join_request("g", &pending_id, None));
    assert_eq!(
        h.join_reply(late).unwrap().error_code,
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn batched_leave_removes_members_and_empties_group() {
    let mut h = Harness::new(config(100));
    let (ids, _) = h.stable_group("g", 3);
    let left = h.leave("g", &[(&ids[0], None), (&ids[1], None), ("ghost", None)]);
    assert_eq!(left.error_code, 0);
    let codes_seen: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(
        codes_seen,
        vec![0, 0, ResponseError::UnknownMemberId.code()]
    );
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    let left = h.leave("g", &[(&ids[2], None)]);
    assert_eq!(left.members[0].error_code, 0);
    assert_eq!(h.c.group_state("g"), Some(GroupState::Empty));
    let unknown_group = h.leave("nope", &[("x", None)]);
    assert_eq!(
        unknown_group.members[0].error_code,
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn leave_during_join_phase_answers_parked_join() {
    let mut h = Harness::new(config(100));
    let (ids, _) = h.stable_group("g", 2);
    let t0 = h.join(join_request("g", &ids[0], None));
    assert!(h.join_reply(t0).is_none());
    h.leave("g", &[(&ids[1], None)]);
    let reply = h
        .join_reply(t0)
        .expect("the remaining member is alone: complete");
    assert_eq!(reply.members.len(), 1);
}

#[test]
fn describe_and_list_groups() {
    let mut h = Harness::new(config(100));
    let (ids, _) = h.stable_group("g", 2);
    let described = h.c.describe_group("g", 5);
    assert_eq!(described.state, "Stable");
    assert_eq!(described.protocol_type, "consumer");
    assert_eq!(described.protocol_data, "range");
    assert_eq!(described.members.len(), 2);
    assert!(described.members.iter().all(|m| !m.assignment.is_empty()));
    assert!(described.members.iter().any(|m| m.member_id == ids[0]));
    let missing = h.c.describe_group("missing", 5);
    assert_eq!((missing.error_code, missing.state.as_str()), (0, "Dead"));
    assert_eq!(
        h.c.describe_group("missing", 6).error_code,
        ResponseError::GroupIdNotFound.code()
    );

    assert_eq!(h.commit("simple", "", -1, "t", 0, 1), 0);
    let all = h.c.list_groups(&[], &[]);
    assert_eq!(all.len(), 2);
    let stable = h.c.list_groups(&["stable".into()], &[]);
    assert_eq!(stable.len(), 1);
    assert_eq!(stable[0].group_id, "g");
    assert_eq!(h.c.list_groups(&[], &["consumer".into()]).len(), 0);
    assert_eq!(h.c.list_groups(&[], &["Classic".into()]).len(), 2);
}

#[test]
fn delete_groups() {
    let mut h = Harness::new(config(100));
    let (ids, _) = h.stable_group("g", 1);
    let mut out = Effects::default();
    assert_eq!(
        h.c.delete_group(h.now_ms, "g", &mut out),
        ResponseError::NonEmptyGroup.code()
    );
    assert_eq!(
        h.c.delete_group(h.now_ms, "nope", &mut out),
        ResponseError::GroupIdNotFound.code()
    );
    h.leave("g", &[(&ids[0], None)]);
    assert_eq!(h.commit("g", "", -1, "t", 0, 7), 0);
    let mut out = Effects::default();
    assert_eq!(h.c.delete_group(h.now_ms, "g", &mut out), 0);
    let tombstones = out
        .appends
        .iter()
        .flat_map(|a| &a.records)
        .filter(|r| r.value.is_none())
        .count();
    assert_eq!(tombstones, 2, "the offset and the group are tombstoned");
    assert_eq!(h.c.group_state("g"), None);
    assert_eq!(h.fetch("g", "t", 0).offset, -1);
}

#[test]
fn partition_for_group_matches_kafka() {
    // "hello".hashCode() == 99162322 in Java.
    assert_eq!(java_string_hash("hello"), 99_162_322);
    assert_eq!(partition_for_group("hello", 50), 99_162_322 % 50);
    // Negative hash codes use the absolute value.
    let h = java_string_hash("polygenelubricants");
    assert_eq!(h, i32::MIN);
    assert_eq!(partition_for_group("polygenelubricants", 50), 0);
}

#[test]
fn a_failed_store_of_the_stable_generation_rebalances_the_group() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    let mut out = Effects::default();
    h.c.group_store_failed(h.now_ms, "g", generation, &mut out);
    h.absorb(out);
    assert_eq!(h.c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat("g", &ids[0], generation),
        ResponseError::RebalanceInProgress.code()
    );
}

#[test]
fn a_failed_store_of_an_older_generation_changes_nothing() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    let mut out = Effects::default();
    h.c.group_store_failed(h.now_ms, "g", generation - 1, &mut out);
    h.c.group_store_failed(h.now_ms, "unknown", generation, &mut out);
    h.absorb(out);
    assert_eq!(h.c.group_state("g"), Some(GroupState::Stable));
    assert_eq!(h.heartbeat("g", &ids[0], generation), 0);
}

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::harness::*;
use crate::*;

/// Joins static members `instances` and completes the rebalance; returns member ids.
fn static_group(h: &mut Harness, instances: &[&str]) -> (Vec<String>, i32) {
    let tokens: Vec<_> = instances
        .iter()
        .map(|i| h.join(join_request("g", "", Some(i))))
        .collect();
    h.advance(100);
    h.advance(100);
    let replies: Vec<JoinGroupResponse> =
        tokens.iter().map(|t| h.join_reply(*t).unwrap()).collect();
    let ids: Vec<String> = replies.iter().map(|r| r.member_id.clone()).collect();
    let generation = replies[0].generation_id;
    let leader = replies[0].leader.clone();
    let assignments = ids
        .iter()
        .map(|id| (id.clone(), Bytes::from(format!("a-{id}"))))
        .collect();
    let mut syncs = Vec::new();
    for id in &ids {
        if *id != leader {
            syncs.push(h.sync("g", id, generation, vec![]));
        }
    }
    syncs.push(h.sync("g", &leader, generation, assignments));
    for s in syncs {
        assert_eq!(h.sync_reply(s).unwrap().error_code, 0);
    }
    (ids, generation)
}

#[test]
fn static_member_joins_without_member_id_round_trip() {
    let mut h = Harness::new(config(100));
    let t = h.join(join_request("g", "", Some("i-1")));
    assert!(
        h.join_reply(t).is_none(),
        "no MEMBER_ID_REQUIRED for static members"
    );
    h.advance(100);
    let reply = h.join_reply(t).unwrap();
    assert_eq!(reply.error_code, 0);
}

#[test]
fn restarted_static_member_replaces_old_id_without_rebalance() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = static_group(&mut h, &["i-1", "i-2"]);
    let follower_index = if h.c.describe_group("g", 5).members[0].member_id == ids[0] {
        1
    } else {
        0
    };
    let old_id = ids[follower_index].clone();
    let instance = ["i-1", "i-2"][follower_index];
    let t = h.join(join_request("g", "", Some(instance)));
    let reply = h.join_reply(t).expect("answered at once in a Stable group");
    assert_eq!(reply.error_code, 0);
    assert_ne!(reply.member_id, old_id);
    assert_eq!(reply.generation_id, generation, "no new generation");
    assert_eq!(h.c.group_state("g"), Some(GroupState::Stable));
    // The new id gets the old member's assignment.
    let s = h.sync("g", &reply.member_id, generation, vec![]);
    assert_eq!(
        h.sync_reply(s).unwrap().assignment,
        Bytes::from(format!("a-{old_id}"))
    );
    // The old id is fenced.
    assert_eq!(
        h.heartbeat_static("g", &old_id, Some(instance), generation),
        ResponseError::FencedInstanceId.code()
    );
    assert_eq!(
        h.heartbeat_static("g", &reply.member_id, Some(instance), generation),
        0
    );
}

#[test]
fn restarted_static_leader_is_told_to_skip_assignment() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = static_group(&mut h, &["i-1", "i-2"]);
    let leader_index = ids
        .iter()
        .position(|id| h.c.describe_group("g", 5).members[0].member_id == *id)
        .unwrap();
    let instance = ["i-1", "i-2"][leader_index];
    let t = h.join(join_request("g", "", Some(instance)));
    let reply = h.join_reply(t).unwrap();
    assert_eq!(reply.generation_id, generation);
    assert_eq!(
        reply.leader, reply.member_id,
        "the new id keeps the leadership"
    );
    assert!(reply.skip_assignment);
    assert_eq!(reply.members.len(), 2);
}

#[test]
fn static_member_with_changed_protocols_triggers_rebalance() {
    let mut h = Harness::new(config(100));
    let (_, generation) = static_group(&mut h, &["i-1"]);
    let mut request = join_request("g", "", Some("i-1"));
    request.protocols = protocols(&["roundrobin", "range"], &["t"]);
    let t = h.join(request);
    // Sole member: the protocol vote changes to roundrobin, so a rebalance runs.
    let reply = h.join_reply(t).expect("sole member rejoined: completes");
    assert_eq!(reply.generation_id, generation + 1);
    assert_eq!(reply.protocol_name.as_deref(), Some("roundrobin"));
}

#[test]
fn static_member_replaced_while_parked_fences_the_old_request() {
    let mut h = Harness::new(config(100));
    let (ids, _) = static_group(&mut h, &["i-1", "i-2"]);
    // i-1's old incarnation rejoins (forcing a rebalance) and is parked...
    let old = h.join(join_request("g", &ids[0], Some("i-1")));
    assert!(h.join_reply(old).is_none());
    // ...when the new incarnation arrives.
    let new = h.join(join_request("g", "", Some("i-1")));
    assert_eq!(
        h.join_reply(old).unwrap().error_code,
        ResponseError::FencedInstanceId.code()
    );
    // The old id cannot come back.
    let again = h.join(join_request("g", &ids[0], Some("i-1")));
    assert_eq!(
        h.join_reply(again).unwrap().error_code,
        ResponseError::FencedInstanceId.code()
    );
    let t2 = h.join(join_request("g", &ids[1], Some("i-2")));
    let new_reply = h.join_reply(new).expect("all rejoined");
    assert_eq!(new_reply.error_code, 0);
    assert_eq!(
        h.join_reply(t2).unwrap().generation_id,
        new_reply.generation_id
    );
}

#[test]
fn static_member_leaves_by_instance_id() {
    let mut h = Harness::new(config(100));
    let (ids, _) = static_group(&mut h, &["i-1", "i-2"]);
    let left = h.leave(
        "g",
        &[
            ("", Some("i-1")),
            ("", Some("i-unknown")),
            (&ids[1], Some("i-1")),
        ],
    );
    let codes_seen: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(
        codes_seen,
        vec![
            0,
            ResponseError::UnknownMemberId.code(),
            ResponseError::UnknownMemberId.code()
        ]
    );
    let left = h.leave("g", &[(&ids[0], Some("i-2"))]);
    assert_eq!(
        left.members[0].error_code,
        ResponseError::FencedInstanceId.code()
    );
    assert_eq!(h.c.describe_group("g", 5).members.len(), 1);
}

#[test]
fn static_member_session_expiry_removes_it() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = static_group(&mut h, &["i-1", "i-2"]);
    h.advance(SESSION_MS as i64 * 6 / 10);
    assert_eq!(h.heartbeat_static("g", &ids[0], Some("i-1"), generation), 0);
    h.advance(SESSION_MS as i64 * 6 / 10);
    assert_eq!(
        h.heartbeat_static("g", &ids[0], Some("i-1"), generation),
        ResponseError::RebalanceInProgress.code()
    );
    assert_eq!(
        h.heartbeat_static("g", &ids[1], Some("i-2"), generation),
        ResponseError::UnknownMemberId.code()
    );
}

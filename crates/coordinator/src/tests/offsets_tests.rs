use super::harness::*;
use crate::*;
use kafka_protocol::ResponseError;

#[test]
fn simple_consumer_commits_and_fetches_with_metadata() {
    let mut h = Harness::new(config(100));
    assert_eq!(h.commit("simple", "", -1, "t", 2, 42), 0);
    let fetched = h.fetch("simple", "t", 2);
    assert_eq!((fetched.offset, fetched.leader_epoch), (42, 3));
    assert_eq!(fetched.metadata, "meta-42");
    let none = h.fetch("simple", "t", 3);
    assert_eq!((none.offset, none.error_code), (-1, 0));
    let unknown = h.fetch("unknown-group", "t", 0);
    assert_eq!(unknown.offset, -1);
    let all = h.c.fetch_offsets("simple", None);
    assert_eq!(all.topics.len(), 1);
    assert_eq!(all.topics[0].partitions.len(), 1);
    assert_eq!(h.c.group_state("simple"), Some(GroupState::Empty));
}

#[test]
fn member_commits_checked_against_generation_and_state() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    assert_eq!(h.commit("g", &ids[0], generation, "t", 0, 10), 0);
    assert_eq!(h.fetch("g", "t", 0).offset, 10);
    // Non-members cannot commit for a group with members.
    assert_eq!(
        h.commit("g", "", -1, "t", 0, 11),
        ResponseError::UnknownMemberId.code()
    );
    // During PreparingRebalance the current generation may still commit (revocation commits).
    let t = h.join(join_request("g", &ids[0], None));
    assert_eq!(h.commit("g", &ids[1], generation, "t", 1, 5), 0);
    let t1 = h.join(join_request("g", &ids[1], None));
    let r0 = h.join_reply(t).unwrap();
    h.join_reply(t1).unwrap();
    // CompletingRebalance: REBALANCE_IN_PROGRESS for the new generation, stale for the old.
    assert_eq!(
        h.commit("g", &ids[0], r0.generation_id, "t", 0, 12),
        ResponseError::RebalanceInProgress.code()
    );
    assert_eq!(
        h.commit("g", &ids[0], generation, "t", 0, 12),
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(h.fetch("g", "t", 0).offset, 10);
}

#[test]
fn commit_to_unknown_group_with_generation() {
    let mut h = Harness::new(config(100));
    assert_eq!(
        h.commit("nope", "m", 3, "t", 0, 1),
        ResponseError::IllegalGeneration.code()
    );
    let mut out = Effects::default();
    let results = h.c.commit_offsets(
        h.now_ms,
        OffsetCommitRequest {
            group_id: "nope".into(),
            generation_id: 3,
            member_id: "m".into(),
            group_instance_id: None,
            retention_time_ms: -1,
            api_version: 9,
            topics: vec![CommitTopic {
                name: "t".into(),
                partitions: vec![CommitPartition {
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                }],
            }],
        },
        &mut out,
    );
    assert_eq!(results[0].1[0].1, ResponseError::GroupIdNotFound.code());
    assert_eq!(h.c.group_state("nope"), None);
}

#[test]
fn oversized_metadata_is_rejected_per_partition() {
    let mut h = Harness::new(config(100));
    let mut out = Effects::default();
    let results = h.c.commit_offsets(
        h.now_ms,
        OffsetCommitRequest {
            group_id: "g".into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            retention_time_ms: -1,
            api_version: 8,
            topics: vec![CommitTopic {
                name: "t".into(),
                partitions: vec![
                    CommitPartition {
                        partition: 0,
                        offset: 1,
                        leader_epoch: -1,
                        metadata: Some("x".repeat(5000)),
                    },
                    CommitPartition {
                        partition: 1,
                        offset: 2,
                        leader_epoch: -1,
                        metadata: None,
                    },
                ],
            }],
        },
        &mut out,
    );
    assert_eq!(
        results[0].1,
        vec![(0, ResponseError::OffsetMetadataTooLarge.code()), (1, 0)]
    );
}

#[test]
fn offset_delete_refuses_subscribed_topics() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 1);
    assert_eq!(h.commit("g", &ids[0], generation, "t", 0, 10), 0);
    assert_eq!(h.commit("g", &ids[0], generation, "old", 0, 10), 0);
    let mut out = Effects::default();
    let result = h.c.delete_offsets(
        h.now_ms,
        "g",
        &[("t".into(), vec![0]), ("old".into(), vec![0])],
        &mut out,
    );
    assert_eq!(result.error_code, 0);
    assert_eq!(
        result.topics[0].1,
        vec![(0, ResponseError::GroupSubscribedToTopic.code())]
    );
    assert_eq!(result.topics[1].1, vec![(0, 0)]);
    assert_eq!(h.fetch("g", "old", 0).offset, -1);
    assert_eq!(h.fetch("g", "t", 0).offset, 10);
    let missing =
        h.c.delete_offsets(h.now_ms, "missing", &[("t".into(), vec![0])], &mut out);
    assert_eq!(missing.error_code, ResponseError::GroupIdNotFound.code());
    // Once the group is empty, anything can be deleted.
    h.leave("g", &[(&ids[0], None)]);
    let result =
        h.c.delete_offsets(h.now_ms, "g", &[("t".into(), vec![0])], &mut out);
    assert_eq!(result.topics[0].1, vec![(0, 0)]);
    assert_eq!(h.fetch("g", "t", 0).offset, -1);
}

#[test]
fn simple_group_offsets_expire_after_retention_and_group_is_removed() {
    let mut cfg = config(100);
    cfg.offsets_retention_ms = 60_000;
    cfg.offsets_retention_check_interval_ms = 1_000;
    let mut h = Harness::new(cfg);
    assert_eq!(h.commit("s", "", -1, "t", 0, 5), 0);
    h.advance(30_000);
    assert_eq!(h.commit("s", "", -1, "t", 1, 6), 0);
    h.advance(30_000);
    assert_eq!(
        h.fetch("s", "t", 0).offset,
        -1,
        "committed 60 s ago: expired"
    );
    assert_eq!(h.fetch("s", "t", 1).offset, 6);
    h.advance(30_000);
    assert_eq!(h.c.group_state("s"), None, "no offsets left: group removed");
    let group_tombstones = h
        .appended
        .iter()
        .filter(|(_, r)| r.value.is_none() && r.key.starts_with(&[0, 2]))
        .count();
    assert_eq!(group_tombstones, 1);
}

#[test]
fn empty_consumer_group_offsets_expire_from_when_it_became_empty() {
    let mut cfg = config(100);
    cfg.offsets_retention_ms = 60_000;
    cfg.offsets_retention_check_interval_ms = 1_000;
    let mut h = Harness::new(cfg);
    let (ids, generation) = h.stable_group("g", 1);
    assert_eq!(h.commit("g", &ids[0], generation, "t", 0, 10), 0);
    // Stable and subscribed to "t": never expires while the member lives.
    for _ in 0..20 {
        h.advance(5_000);
        assert_eq!(h.heartbeat("g", &ids[0], generation), 0);
    }
    assert_eq!(h.fetch("g", "t", 0).offset, 10);
    h.leave("g", &[(&ids[0], None)]);
    assert_eq!(h.c.group_state("g"), Some(GroupState::Empty));
    h.advance(59_000);
    assert_eq!(h.fetch("g", "t", 0).offset, 10);
    h.advance(2_000);
    assert_eq!(h.fetch("g", "t", 0).offset, -1);
}

#[test]
fn explicit_retention_time_sets_expiry() {
    let mut h = Harness::new(config(100));
    let mut out = Effects::default();
    h.c.commit_offsets(
        h.now_ms,
        OffsetCommitRequest {
            group_id: "s".into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            retention_time_ms: 1_000,
            api_version: 2,
            topics: vec![CommitTopic {
                name: "t".into(),
                partitions: vec![CommitPartition {
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                }],
            }],
        },
        &mut out,
    );
    h.absorb(out);
    h.advance(CoordinatorConfig::default().offsets_retention_check_interval_ms);
    assert_eq!(h.fetch("s", "t", 0).offset, -1);
}

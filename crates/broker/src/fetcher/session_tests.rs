//! The fetcher's session builder, without I/O: full, incremental, removal, error resets.

use super::*;

const ID_A: Uuid = Uuid::from_u128(0xa);
const ID_B: Uuid = Uuid::from_u128(0xb);

fn key(topic: &str, index: i32) -> Key {
    (Arc::from(topic), index)
}

fn wanted(topic_id: Uuid, fetch_offset: i64) -> Wanted {
    Wanted {
        topic_id,
        params: PartitionParams {
            fetch_offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: 3,
            last_fetched_epoch: 3,
            log_start_offset: 0,
        },
    }
}

/// Partitions a, 0..n of topic "a" at offset 0.
fn all(n: i32) -> BTreeMap<Key, Wanted> {
    (0..n).map(|i| (key("a", i), wanted(ID_A, 0))).collect()
}

fn sent(built: &Built) -> Vec<Key> {
    built.to_send.iter().map(|(k, _)| k.clone()).collect()
}

/// A handler with an open session (id 7, next epoch 1) over `partitions`.
fn opened(partitions: BTreeMap<Key, Wanted>) -> SessionHandler {
    let mut h = SessionHandler::default();
    let first = h.build(partitions);
    assert!(first.full);
    assert!(h.handle_response(0, 7));
    h
}

#[test]
fn the_first_request_opens_a_session_with_every_partition() {
    let mut h = SessionHandler::default();
    let built = h.build(all(3));
    assert_eq!((built.session_id, built.session_epoch), (0, 0));
    assert!(built.full && built.uses_topic_ids);
    assert_eq!(sent(&built), vec![key("a", 0), key("a", 1), key("a", 2)]);
    assert!(built.forgotten.is_empty());
    assert!(h.handle_response(0, 7));
    assert_eq!(h.session_id(), 7);
}

#[test]
fn an_incremental_request_carries_only_the_partitions_whose_state_changed() {
    let mut h = opened(all(3));
    let unchanged = h.build(all(3));
    assert_eq!((unchanged.session_id, unchanged.session_epoch), (7, 1));
    assert!(!unchanged.full);
    assert!(unchanged.to_send.is_empty() && unchanged.forgotten.is_empty());
    assert!(h.handle_response(0, 7));

    let mut moved = all(3);
    moved.insert(key("a", 1), wanted(ID_A, 42));
    let built = h.build(moved);
    assert_eq!(built.session_epoch, 2);
    assert_eq!(sent(&built), vec![key("a", 1)]);
    assert_eq!(built.to_send[0].1.params.fetch_offset, 42);
}

#[test]
fn added_partitions_are_sent_and_removed_ones_forgotten() {
    let mut h = opened(all(3));
    let mut next = all(2); // a-2 is no longer fetched
    next.insert(key("b", 0), wanted(ID_B, 0));
    let built = h.build(next);
    assert!(!built.full);
    assert_eq!(sent(&built), vec![key("b", 0)]);
    assert_eq!(built.forgotten, vec![(key("a", 2), ID_A)]);
}

#[test]
fn a_replaced_topic_forgets_the_old_id_and_adds_the_new_one() {
    let mut h = opened(all(1));
    let mut next = BTreeMap::new();
    next.insert(key("a", 0), wanted(ID_B, 0));
    let built = h.build(next);
    assert_eq!(built.forgotten, vec![(key("a", 0), ID_A)]);
    assert_eq!(built.to_send, vec![(key("a", 0), wanted(ID_B, 0))]);
}

#[test]
fn session_id_not_found_starts_again_from_scratch() {
    let mut h = opened(all(2));
    let _ = h.build(all(2));
    assert!(!h.handle_response(ResponseError::FetchSessionIdNotFound.code(), 0));
    let built = h.build(all(2));
    assert_eq!((built.session_id, built.session_epoch), (0, 0));
    assert!(built.full);
    assert_eq!(built.to_send.len(), 2);
}

#[test]
fn an_invalid_epoch_closes_the_session_with_a_full_fetch() {
    let mut h = opened(all(2));
    let _ = h.build(all(2));
    assert!(!h.handle_response(ResponseError::InvalidFetchSessionEpoch.code(), 0));
    let built = h.build(all(2));
    // Its session id with epoch 0: the leader closes it and opens a new one.
    assert_eq!((built.session_id, built.session_epoch), (7, 0));
    assert!(built.full);
    assert_eq!(built.to_send.len(), 2);
}

#[test]
fn a_failed_call_closes_the_session_with_a_full_fetch() {
    let mut h = opened(all(2));
    let _ = h.build(all(2));
    h.handle_error();
    let built = h.build(all(2));
    assert_eq!((built.session_id, built.session_epoch), (7, 0));
    assert!(built.full);
}

#[test]
fn no_session_from_the_leader_means_full_fetches() {
    let mut h = SessionHandler::default();
    let _ = h.build(all(2));
    assert!(h.handle_response(0, 0));
    let built = h.build(all(2));
    assert_eq!((built.session_id, built.session_epoch), (0, 0));
    assert!(built.full);
}

#[test]
fn the_leader_closing_the_session_in_an_incremental_answer_means_a_new_one() {
    let mut h = opened(all(2));
    let _ = h.build(all(2));
    assert!(h.handle_response(0, 0));
    let built = h.build(all(2));
    assert_eq!((built.session_id, built.session_epoch), (0, 0));
}

#[test]
fn a_topic_without_an_id_switches_to_names_with_a_new_session() {
    let mut h = opened(all(2));
    let mut next = all(2);
    next.insert(key("new", 0), wanted(Uuid::nil(), 0));
    let built = h.build(next);
    assert!(built.full && !built.uses_topic_ids);
    assert_eq!((built.session_id, built.session_epoch), (7, 0));
    assert_eq!(built.to_send.len(), 3);
}

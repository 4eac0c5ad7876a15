//! The leader's fetch session cache, without I/O.

use super::*;

const TOPIC: Uuid = Uuid::from_u128(0x51);

fn params(fetch_offset: i64) -> PartitionParams {
    PartitionParams {
        fetch_offset,
        partition_max_bytes: 1 << 20,
        current_leader_epoch: 1,
        last_fetched_epoch: 1,
        log_start_offset: 0,
    }
}

fn key(index: i32) -> SessionKey {
    (TopicRef::Id(TOPIC), index)
}

fn request(session_id: i32, session_epoch: i32, replica_id: i32, n: i32) -> SessionRequest {
    SessionRequest {
        session_id,
        session_epoch,
        replica_id,
        uses_topic_ids: true,
        partitions: (0..n).map(|i| (key(i), params(0))).collect(),
        forgotten: Vec::new(),
        request_bytes: 100,
    }
}

fn answered(high_watermark: i64) -> Answered {
    Answered {
        high_watermark,
        last_stable_offset: high_watermark,
        log_start_offset: 0,
    }
}

/// A session of replica 2 over `n` partitions, every partition answered once (HW 10).
fn open_session(cache: &mut FetchSessionCache, n: i32) -> i32 {
    open_session_at(cache, n, 0)
}

fn open_session_at(cache: &mut FetchSessionCache, n: i32, now_ms: i64) -> i32 {
    let opened = cache.open(request(0, 0, 2, n), now_ms);
    let SessionContext::Full { session_id } = opened.context else {
        panic!("{:?}", opened.context)
    };
    assert_ne!(session_id, NO_SESSION);
    for (k, _) in &opened.partitions {
        assert!(cache.include(opened.context, k, answered(10), false));
    }
    session_id
}

#[test]
fn a_replica_gets_a_session_and_a_consumer_does_not() {
    let mut cache = FetchSessionCache::default();
    let consumer = cache.open(request(0, 0, -1, 3), 0);
    assert_eq!(consumer.context, SessionContext::Full { session_id: 0 });
    assert_eq!(consumer.partitions.len(), 3);
    let sessionless = cache.open(request(0, -1, 2, 3), 0);
    assert_eq!(sessionless.context, SessionContext::Full { session_id: 0 });
    assert!(cache.is_empty());
    let id = open_session(&mut cache, 3);
    assert_eq!(cache.session_partitions(id), Some(3));
}

#[test]
fn a_consumers_request_is_answered_without_the_cache() {
    let consumer = request(0, 0, -1, 2);
    assert!(!consumer.needs_cache());
    let mut twice = request(0, -1, -1, 2);
    twice.partitions.push((key(0), params(9)));
    let opened = sessionless(twice);
    assert_eq!(opened.context, SessionContext::Full { session_id: 0 });
    // A partition named twice: once, in its first place, with its last values.
    assert_eq!(opened.partitions.len(), 2);
    assert_eq!(opened.partitions[0].1.fetch_offset, 9);
    assert!(request(0, 0, 2, 1).needs_cache());
    assert!(request(5, 1, -1, 1).needs_cache());
}

#[test]
fn an_incremental_request_reads_every_session_partition_and_answers_only_news() {
    let mut cache = FetchSessionCache::default();
    let id = open_session(&mut cache, 3);
    // Names nothing: every partition of the session is read.
    let opened = cache.open(request(id, 1, 2, 0), 1);
    assert_eq!(
        opened.context,
        SessionContext::Incremental { session_id: id }
    );
    assert_eq!(opened.partitions.len(), 3);
    let ctx = opened.context;
    assert!(
        !cache.include(ctx, &key(0), answered(10), false),
        "nothing new"
    );
    assert!(
        cache.include(ctx, &key(1), answered(11), false),
        "the HW moved"
    );
    assert!(cache.include(ctx, &key(2), answered(10), true), "records");
    // The moved HW is now what the fetcher knows.
    let opened = cache.open(request(id, 2, 2, 0), 2);
    assert!(!cache.include(opened.context, &key(1), answered(11), false));
}

#[test]
fn a_changed_partition_updates_the_session_and_forgotten_ones_leave_it() {
    let mut cache = FetchSessionCache::default();
    let id = open_session(&mut cache, 3);
    let mut next = request(id, 1, 2, 0);
    next.partitions = vec![(key(1), params(50)), (key(7), params(0))];
    next.forgotten = vec![key(2)];
    let opened = cache.open(next, 1);
    let offsets: Vec<(i32, i64)> = opened
        .partitions
        .iter()
        .map(|((_, p), params)| (*p, params.fetch_offset))
        .collect();
    assert_eq!(offsets, vec![(0, 0), (1, 50), (7, 0)]);
    // A partition new to the session is always answered once.
    assert!(cache.include(opened.context, &key(7), answered(10), false));
}

#[test]
fn session_errors_follow_kafka() {
    let mut cache = FetchSessionCache::default();
    let id = open_session(&mut cache, 1);
    let code = |o: Opened| match o.context {
        SessionContext::Error(c) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        code(cache.open(request(id + 1, 1, 2, 0), 1)),
        ResponseError::FetchSessionIdNotFound.code()
    );
    assert_eq!(
        code(cache.open(request(id, 5, 2, 0), 1)),
        ResponseError::InvalidFetchSessionEpoch.code()
    );
    assert_eq!(
        code(cache.open(request(id, 1, -1, 0), 1)),
        ResponseError::FetchSessionIdNotFound.code(),
        "a consumer cannot use a replica's session"
    );
    let mut by_name = request(id, 1, 2, 0);
    by_name.uses_topic_ids = false;
    assert_eq!(
        code(cache.open(by_name, 1)),
        ResponseError::FetchSessionTopicIdError.code()
    );
    // Epoch 0 with the session's id closes it and opens another.
    let reopened = cache.open(request(id, 0, 2, 1), 1);
    let SessionContext::Full { session_id } = reopened.context else {
        panic!()
    };
    assert_ne!(session_id, id);
    assert_eq!(cache.len(), 1);
    // Epoch -1 closes it for good.
    let closed = cache.open(request(session_id, -1, 2, 1), 1);
    assert_eq!(closed.context, SessionContext::Full { session_id: 0 });
    assert!(cache.is_empty());
}

#[test]
fn a_full_cache_evicts_only_a_session_idle_for_the_eviction_time() {
    let mut cache = FetchSessionCache::with_slots(2);
    let first = open_session(&mut cache, 1);
    let _second = open_session_at(&mut cache, 1, 10);
    let refused = cache.open(request(0, 0, 3, 1), 1_000);
    assert_eq!(refused.context, SessionContext::Full { session_id: 0 });
    // The second is used later than the first; the first has been idle long enough.
    let later = cache.open(request(0, 0, 3, 1), FETCH_SESSION_EVICTION_MS);
    assert!(matches!(later.context, SessionContext::Full { session_id } if session_id != 0));
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.session_partitions(first), None);
}

#[test]
fn consumer_churn_never_takes_a_replica_session() {
    let mut cache = FetchSessionCache::with_slots(1);
    let id = open_session(&mut cache, 1);
    for _ in 0..100 {
        let _ = cache.open(request(0, 0, -1, 1), FETCH_SESSION_EVICTION_MS * 10);
    }
    assert_eq!(cache.session_partitions(id), Some(1));
}

#[test]
fn a_session_over_the_partition_bound_is_closed_and_answered_in_full() {
    let mut cache = FetchSessionCache::default();
    let too_many = FETCH_SESSION_PARTITIONS_MAX as i32 + 1;
    let big = cache.open(request(0, 0, 2, too_many), 0);
    assert_eq!(big.context, SessionContext::Full { session_id: 0 });
    assert!(cache.is_empty());
    let id = open_session(&mut cache, 1);
    let mut grow = request(id, 1, 2, 0);
    grow.partitions = (1..=too_many).map(|i| (key(i), params(0))).collect();
    let opened = cache.open(grow, 1);
    assert_eq!(opened.context, SessionContext::Full { session_id: 0 });
    assert_eq!(opened.partitions.len(), too_many as usize + 1);
    assert!(cache.is_empty());
}

#[test]
fn epochs_wrap_to_one() {
    assert_eq!(next_epoch(1), 2);
    assert_eq!(next_epoch(i32::MAX), 1);
    assert_eq!(next_epoch(-1), -1);
}

use super::harness::*;
use crate::records::{OffsetsKey, decode_batches, decode_key, encode_batch};
use crate::*;
use kafka_protocol::ResponseError;

fn replayed(h: &Harness, now_ms: i64) -> GroupCoordinator {
    let mut fresh = GroupCoordinator::new(h.c.config().clone(), now_ms);
    for (_, record) in &h.appended {
        fresh.replay(record, now_ms).expect("replays");
    }
    fresh.finish_replay(now_ms);
    fresh
}

#[test]
fn keys_use_kafka_versions() {
    let mut h = Harness::new(config(100));
    h.commit("g", "", -1, "topic", 7, 1);
    let (partition, record) = &h.appended[0];
    assert_eq!(*partition, partition_for_group("g", 4));
    assert_eq!(&record.key[..2], &[0, 1], "offset commit key v1");
    assert_eq!(
        decode_key(&record.key).unwrap(),
        OffsetsKey::Offset {
            group: "g".into(),
            topic: "topic".into(),
            partition: 7
        }
    );
    assert_eq!(
        &record.value.as_ref().unwrap()[..2],
        &[0, 3],
        "offset commit value v3"
    );
}

#[test]
fn replay_rebuilds_offsets_and_stable_groups() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 3);
    h.commit("g", &ids[0], generation, "t", 0, 100);
    h.commit("g", &ids[1], generation, "t", 1, 200);
    h.commit("g", &ids[1], generation, "t", 1, 250);
    h.commit("s", "", -1, "u", 0, 9);
    let mut out = Effects::default();
    h.c.delete_offsets(h.now_ms, "s", &[("u".into(), vec![0])], &mut out);
    h.absorb(out);
    h.commit("s", "", -1, "u", 1, 10);

    let fresh = replayed(&h, h.now_ms);
    let restored = Harness {
        c: fresh,
        ..Harness::new(config(100))
    };
    assert_eq!(restored.fetch("g", "t", 0).offset, 100);
    assert_eq!(restored.fetch("g", "t", 1).offset, 250);
    assert_eq!(restored.fetch("g", "t", 1).metadata, "meta-250");
    assert_eq!(restored.fetch("s", "u", 0).offset, -1, "tombstone replayed");
    assert_eq!(restored.fetch("s", "u", 1).offset, 10);
    let described = restored.c.describe_group("g", 5);
    assert_eq!(described.state, "Stable");
    assert_eq!(described.members.len(), 3);
    assert_eq!(h.c.describe_group("g", 5), described);
    assert_eq!(restored.c.group_generation("g"), Some(generation));
}

#[test]
fn replayed_members_keep_heartbeating_or_expire() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    let now = h.now_ms + 60_000; // the broker was down for a minute
    let fresh = replayed(&h, now);
    let mut r = Harness {
        c: fresh,
        now_ms: now,
        ..Harness::new(config(100))
    };
    r.advance(SESSION_MS as i64 * 6 / 10);
    assert_eq!(r.heartbeat("g", &ids[0], generation), 0);
    r.advance(SESSION_MS as i64 * 6 / 10);
    assert_eq!(
        r.heartbeat("g", &ids[0], generation),
        ResponseError::RebalanceInProgress.code()
    );
    assert_eq!(
        r.heartbeat("g", &ids[1], generation),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(r.c.group_state("g"), Some(GroupState::PreparingRebalance));
}

#[test]
fn replayed_members_expire_on_the_timer_alone() {
    // Regression: restored members got a heartbeat deadline but the coordinator's
    // earliest-deadline bound stayed unset, so with no other event (no join, no heartbeat) the
    // timer never fired and a dead member held the group Stable forever.
    let mut h = Harness::new(config(100));
    let (_ids, _generation) = h.stable_group("g", 2);
    let now = h.now_ms + 60_000;
    let fresh = replayed(&h, now);
    assert_eq!(fresh.group_state("g"), Some(GroupState::Stable));
    assert!(
        fresh.next_deadline_ms() <= now + i64::from(SESSION_MS),
        "the broker's timer must be woken for the restored members' sessions"
    );
    let mut r = Harness {
        c: fresh,
        now_ms: now,
        ..Harness::new(config(100))
    };
    r.advance(i64::from(SESSION_MS) + 1);
    assert_eq!(r.c.group_state("g"), Some(GroupState::Empty));
    assert_eq!(r.c.describe_group("g", 5).members.len(), 0);
}

#[test]
fn snapshot_records_replay_to_the_same_state() {
    let mut h = Harness::new(config(100));
    let (ids, generation) = h.stable_group("g", 2);
    for i in 0..50 {
        h.commit("g", &ids[0], generation, "t", i % 3, i64::from(i));
    }
    let partition = h.c.partition_for("g");
    let snapshot = h.c.snapshot_records(partition, h.now_ms);
    assert_eq!(
        snapshot.len(),
        1 + 3,
        "one group record and one record per live offset"
    );
    let mut fresh = GroupCoordinator::new(h.c.config().clone(), h.now_ms);
    for r in &snapshot {
        fresh.replay(r, h.now_ms).unwrap();
    }
    fresh.finish_replay(h.now_ms);
    assert_eq!(fresh.describe_group("g", 5), h.c.describe_group("g", 5));
    assert_eq!(fresh.fetch_offsets("g", None), h.c.fetch_offsets("g", None));
}

#[test]
fn batches_round_trip() {
    let mut h = Harness::new(config(100));
    h.stable_group("g", 1);
    h.commit("s", "", -1, "u", 0, 9);
    let records: Vec<OffsetsRecord> = h.appended.iter().map(|(_, r)| r.clone()).collect();
    let batch = encode_batch(&records, 1234).unwrap();
    let mut two = batch.clone();
    two.extend_from_slice(&batch);
    let decoded = decode_batches(two.freeze()).unwrap();
    assert_eq!(decoded.len(), records.len() * 2);
    assert_eq!(&decoded[..records.len()], &records[..]);
}

#[test]
fn garbage_records_are_errors_not_panics() {
    let mut c = GroupCoordinator::new(config(0), 0);
    for bad in [
        &b""[..],
        &[0, 1],
        &[0, 9, 0, 0],
        &[0, 1, 0, 5, b'a'],
        &[0, 2, 0xff, 0xfe],
    ] {
        let record = OffsetsRecord {
            key: bytes::Bytes::copy_from_slice(bad),
            value: None,
        };
        assert!(c.replay(&record, 0).is_err(), "{bad:?}");
    }
    let record = OffsetsRecord {
        key: records::offset_key("g", "t", 0),
        value: Some(bytes::Bytes::from_static(&[0, 3, 1, 2])),
    };
    assert!(c.replay(&record, 0).is_err());
    assert!(decode_batches(bytes::Bytes::from_static(&[1, 2, 3])).is_err());
}

//! Transactional offset commits in `__consumer_offsets` (Kafka's way): a TxnOffsetCommit's
//! records are a transactional batch of the producer, pending until its marker; a load
//! replays them with the markers it meets, and what no marker ended stays pending.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::harness::config;
use crate::records::{ReplayItem, decode_batches_for_replay, encode_batch, encode_txn_batch};
use crate::*;

fn offset(topic: &str, partition: i32, offset: i64) -> TxnOffset {
    TxnOffset {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: "m".into(),
    }
}

/// A control batch of `pid` (COMMIT or ABORT), as the log writes a marker.
fn marker(pid: i64, epoch: i16, commit: bool) -> BytesMut {
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 0,
        key: Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [record].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf
}

fn coordinator() -> GroupCoordinator {
    GroupCoordinator::new(config(0), 0)
}

/// Replays `log` (batches back to back) into `c` as a load of `group`'s partition does.
fn replay(c: &mut GroupCoordinator, group: &str, log: &[BytesMut]) {
    let partition = c.partition_for(group);
    let mut bytes = BytesMut::new();
    for b in log {
        bytes.extend_from_slice(b);
    }
    for (_, item) in decode_batches_for_replay(bytes.freeze()).unwrap() {
        c.replay_item(partition, &item, 1_000).unwrap();
    }
    c.finish_replay(1_000);
}

fn committed(c: &GroupCoordinator, group: &str, topic: &str, partition: i32) -> i64 {
    c.fetch_offsets(group, Some(&[(topic.to_string(), vec![partition])]))
        .topics[0]
        .partitions[0]
        .offset
}

fn txn_batch(c: &GroupCoordinator, group: &str, pid: i64, offsets: &[TxnOffset]) -> BytesMut {
    encode_txn_batch(&c.txn_offset_records(5, group, offsets), 5, (pid, 0)).unwrap()
}

#[test]
fn a_txn_batch_decodes_as_transactional_and_a_marker_as_its_outcome() {
    let c = coordinator();
    let mut bytes = BytesMut::new();
    bytes.extend_from_slice(&txn_batch(&c, "g", 7, &[offset("in", 0, 10)]));
    bytes.extend_from_slice(&marker(7, 0, true));
    bytes.extend_from_slice(&marker(8, 0, false));
    let items = decode_batches_for_replay(bytes.freeze()).unwrap();
    assert_eq!(items.len(), 3);
    assert!(matches!(
        &items[0].1,
        ReplayItem::Transactional { producer_id: 7, .. }
    ));
    assert_eq!(
        items[1].1,
        ReplayItem::Marker {
            producer_id: 7,
            commit: true
        }
    );
    assert_eq!(
        items[2].1,
        ReplayItem::Marker {
            producer_id: 8,
            commit: false
        }
    );
    // Plain batches stay plain.
    let plain = encode_batch(&c.txn_offset_records(5, "g", &[offset("in", 0, 1)]), 5).unwrap();
    let items = decode_batches_for_replay(plain.freeze()).unwrap();
    assert!(matches!(&items[0].1, ReplayItem::Record(_)));
}

#[test]
fn a_load_commits_what_a_commit_marker_ends_drops_the_aborted_and_keeps_the_rest_pending() {
    let mut c = coordinator();
    let scratch = coordinator();
    let log = [
        // A plain commit first.
        encode_batch(
            &scratch.txn_offset_records(1, "g", &[offset("in", 0, 5)]),
            1,
        )
        .unwrap(),
        // Producer 7 commits in:0 = 10 and in:1 = 11: committed.
        txn_batch(
            &scratch,
            "g",
            7,
            &[offset("in", 0, 10), offset("in", 1, 11)],
        ),
        // Producer 8 writes in:2 = 99 and aborts: dropped.
        txn_batch(&scratch, "g", 8, &[offset("in", 2, 99)]),
        marker(8, 0, false),
        marker(7, 0, true),
        // Producer 9's transaction is still open at the end: pending.
        txn_batch(&scratch, "g", 9, &[offset("in", 0, 20)]),
        // A marker of a producer with nothing pending changes nothing.
        marker(10, 0, true),
    ];
    replay(&mut c, "g", &log);
    assert_eq!(committed(&c, "g", "in", 0), 10);
    assert_eq!(committed(&c, "g", "in", 1), 11);
    assert_eq!(committed(&c, "g", "in", 2), -1, "aborted: never committed");
    let pending: Vec<_> = c.pending_txn_partitions("g").into_iter().collect();
    assert_eq!(pending, vec![("in".to_string(), 0)]);
    // The open transaction's COMMIT marker, written after the load, commits it.
    let p = c.partition_for("g");
    assert_eq!(c.complete_txn(2_000, p, 9, true), vec!["g".to_string()]);
    assert_eq!(committed(&c, "g", "in", 0), 20);
    assert!(c.pending_txn_partitions("g").is_empty());
}

#[test]
fn an_abort_marker_drops_pending_offsets_and_keeps_the_committed_ones() {
    let mut c = coordinator();
    let scratch = coordinator();
    let log = [
        encode_batch(
            &scratch.txn_offset_records(1, "g", &[offset("in", 0, 5)]),
            1,
        )
        .unwrap(),
        txn_batch(&scratch, "g", 7, &[offset("in", 0, 10)]),
    ];
    replay(&mut c, "g", &log);
    assert_eq!(committed(&c, "g", "in", 0), 5);
    assert_eq!(c.pending_txn_partitions("g").len(), 1);
    let p = c.partition_for("g");
    // Another partition's marker of the same producer leaves them alone.
    c.complete_txn(2_000, (p + 1) % 4, 7, true);
    assert_eq!(c.pending_txn_partitions("g").len(), 1);
    c.complete_txn(2_000, p, 7, false);
    assert!(c.pending_txn_partitions("g").is_empty());
    assert_eq!(committed(&c, "g", "in", 0), 5);
}

#[test]
fn pending_offsets_follow_the_partition_through_unload_and_absorb() {
    let mut main = coordinator();
    let mut loaded = main.empty_like(0);
    let scratch = coordinator();
    replay(
        &mut loaded,
        "g",
        &[txn_batch(&scratch, "g", 7, &[offset("in", 0, 10)])],
    );
    main.absorb(loaded);
    assert_eq!(main.pending_txn_partitions("g").len(), 1);
    main.unload_partition(main.partition_for("g"));
    assert!(main.pending_txn_partitions("g").is_empty());
}

#[test]
fn pending_transactional_offsets_of_the_partition_hold_back_offset_expiry() {
    let mut cfg = config(0);
    cfg.offsets_retention_ms = 60_000;
    cfg.offsets_retention_check_interval_ms = 1_000;
    let mut c = GroupCoordinator::new(cfg, 0);
    let p = c.partition_for("s");
    c.complete_txn(0, p, 1, true);
    c.hold_txn_offsets("s", (1, 0), vec![offset("t", 0, 5), offset("t", 1, 6)]);
    c.complete_txn(0, p, 1, true);
    assert_eq!(committed(&c, "s", "t", 0), 5);
    // A second transaction holds t-0.
    c.hold_txn_offsets("s", (2, 0), vec![offset("t", 0, 7)]);
    let mut out = Effects::default();
    c.tick(61_000, &mut out);
    assert_eq!(committed(&c, "s", "t", 0), 5, "pending: kept");
    assert_eq!(committed(&c, "s", "t", 1), -1, "expired");
}

#[test]
fn a_snapshot_appends_open_transactions_after_its_plain_records_so_compaction_loads_the_same() {
    let mut live = coordinator();
    let scratch = coordinator();
    let p = live.partition_for("g");
    let plain = |o: i64| {
        encode_batch(
            &scratch.txn_offset_records(1, "g", &[offset("in", 0, o)]),
            1,
        )
        .unwrap()
    };
    // Committed 5; producer 7 (epoch 2) holds 10.
    live.replay_item(
        p,
        &ReplayItem::Record(
            scratch
                .txn_offset_records(1, "g", &[offset("in", 0, 5)])
                .remove(0),
        ),
        0,
    )
    .unwrap();
    live.hold_txn_offsets("g", (7, 2), vec![offset("in", 0, 10)]);
    // What a snapshot writes: the plain committed offsets, then each open transaction's.
    let snapshot = live.snapshot_records(p, 1);
    let txn = live.snapshot_txn_records(p, 1);
    assert_eq!(txn.len(), 1);
    assert_eq!(txn[0].0, (7, 2), "under the producer's epoch");
    let snapshot_batch = encode_batch(&snapshot, 1).unwrap();
    let txn_batch = encode_txn_batch(&txn[0].1, 1, txn[0].0).unwrap();
    for commit in [true, false] {
        let want = if commit { 10 } else { 5 };
        // The whole log: the first transactional batch, the snapshot, the batch again, the marker.
        let mut all = coordinator();
        let first = txn_batch_of(&scratch, 7, 10);
        replay(
            &mut all,
            "g",
            &[
                plain(5),
                first,
                snapshot_batch.clone(),
                txn_batch.clone(),
                marker(7, 2, commit),
            ],
        );
        assert_eq!(committed(&all, "g", "in", 0), want);
        // What the cleaner leaves (the latest record of the key; an aborted transaction's
        // records go and the plain record stays).
        let mut cleaned = coordinator();
        let left = if commit {
            vec![txn_batch.clone(), marker(7, 2, true)]
        } else {
            vec![snapshot_batch.clone(), marker(7, 2, false)]
        };
        replay(&mut cleaned, "g", &left);
        assert_eq!(committed(&cleaned, "g", "in", 0), want, "commit {commit}");
    }
}

fn txn_batch_of(c: &GroupCoordinator, pid: i64, o: i64) -> BytesMut {
    encode_txn_batch(
        &c.txn_offset_records(1, "g", &[offset("in", 0, o)]),
        1,
        (pid, 2),
    )
    .unwrap()
}

//! Idempotent producers against the real `streamforge broker` binary over raw sockets:
//! InitProducerId, duplicates answered with the original offsets, out-of-order sequences, stale
//! epochs, sequence wrap, DescribeProducers, and duplicates still recognised after kill -9.

mod support;

use bytes::Bytes;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use support::{BrokerProc, Conn, create_topic, name, producer_batch};

fn init_producer_id(
    c: &mut Conn,
    transactional_id: Option<&str>,
    timeout_ms: i32,
) -> (i16, i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id =
        transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into())));
    req.transaction_timeout_ms = timeout_ms;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// A batch of `n` records from producer `pid`/`epoch` starting at sequence `seq` (wrapping).
fn idem_batch(pid: i64, epoch: i16, seq: i32, n: usize, tag: &str) -> Bytes {
    producer_batch(pid, epoch, seq, n, false, |i| {
        Bytes::from(format!("{tag}-{i}"))
    })
}

fn produce(c: &mut Conn, topic: &str, records: Bytes) -> (i16, i64) {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req);
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// All record values in the partition, with offsets.
fn fetch_all(c: &mut Conn, topic: &str) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..1000 {
        let mut p = FetchPartition::default();
        p.partition = 0;
        p.fetch_offset = offset;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic = name(topic);
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_wait_ms = 0;
        req.min_bytes = 1;
        req.max_bytes = 50 << 20;
        req.topics = vec![t];
        let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
        let part = &r.responses[0].partitions[0];
        let before = out.len();
        if let Some(mut records) = part.records.clone() {
            while !records.is_empty() {
                let set = RecordBatchDecoder::decode(&mut records).unwrap();
                for rec in set.records {
                    if rec.offset >= offset {
                        out.push((
                            rec.offset,
                            String::from_utf8(rec.value.unwrap().to_vec()).unwrap(),
                        ));
                    }
                }
            }
        }
        if out.len() == before {
            break;
        }
        offset = out.last().unwrap().0 + 1;
    }
    out
}

fn describe_producers(c: &mut Conn, topic: &str) -> Vec<(i64, i32, i32)> {
    let mut t = TopicRequest::default();
    t.name = name(topic);
    t.partition_indexes = vec![0];
    let mut req = DescribeProducersRequest::default();
    req.topics = vec![t];
    let r: DescribeProducersResponse = c.call(ApiKey::DescribeProducers, 0, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.active_producers
        .iter()
        .map(|s| (s.producer_id.0, s.producer_epoch, s.last_sequence))
        .collect()
}

#[test]
fn init_producer_id_allocates_unique_ids_and_bumps_transactional_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(dir.path(), &[]);
    let mut c = b.connect();
    let (e1, p1, ep1) = init_producer_id(&mut c, None, 60_000);
    let (e2, p2, _) = init_producer_id(&mut c, None, 60_000);
    assert_eq!((e1, e2, ep1), (0, 0, 0));
    assert_ne!(p1, p2);
    // A transactional id keeps its producer id; each InitProducerId bumps the epoch.
    let (e, tp, te) = init_producer_id(&mut c, Some("tx-1"), 60_000);
    assert_eq!((e, te), (0, 0));
    let (e, tp2, te2) = init_producer_id(&mut c, Some("tx-1"), 60_000);
    assert_eq!((e, tp2, te2), (0, tp, 1));
    assert_eq!(
        init_producer_id(&mut c, Some("tx-1"), i32::MAX).0,
        50,
        "INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms"
    );
    assert_eq!(
        init_producer_id(&mut c, Some(""), 1000).0,
        42,
        "INVALID_REQUEST"
    );
}

#[test]
fn duplicates_gaps_stale_epochs_and_wrap_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(dir.path(), &[]);
    let mut c = b.connect();
    create_topic(&mut c, "idem", 1);
    let (_, pid, epoch) = init_producer_id(&mut c, None, 60_000);

    // The same Produce request twice: one copy in the log, the same offset answered.
    let first = idem_batch(pid, epoch, 0, 5, "a");
    assert_eq!(produce(&mut c, "idem", first.clone()), (0, 0));
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid, epoch, 5, 5, "b")),
        (0, 5)
    );
    assert_eq!(
        produce(&mut c, "idem", first),
        (0, 0),
        "duplicate gets its original offset"
    );
    // Out of order: a gap in the sequence.
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid, epoch, 42, 1, "gap")).0,
        45
    );
    // A new epoch (as after a producer bump), then the old epoch is stale.
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid, epoch + 1, 0, 2, "c")),
        (0, 10)
    );
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid, epoch, 10, 1, "old")).0,
        47
    );
    // Sequence wrap: a fresh producer starting near i32::MAX continues at 0 (sequences
    // MAX-1, MAX, 0, then 1, 2).
    let (_, pid2, e2) = init_producer_id(&mut c, None, 60_000);
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid2, e2, i32::MAX - 1, 3, "w1")),
        (0, 12)
    );
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid2, e2, 1, 2, "w2")),
        (0, 15)
    );
    assert_eq!(
        produce(&mut c, "idem", idem_batch(pid2, e2, 1, 1, "w-bad")).0,
        45
    );

    let values: Vec<String> = fetch_all(&mut c, "idem")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let expect: Vec<String> = [
        "a-0", "a-1", "a-2", "a-3", "a-4", "b-0", "b-1", "b-2", "b-3", "b-4", "c-0", "c-1", "w1-0",
        "w1-1", "w1-2", "w2-0", "w2-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(values, expect);
    let mut producers = describe_producers(&mut c, "idem");
    producers.sort();
    assert_eq!(
        producers,
        vec![(pid, i32::from(epoch + 1), 1), (pid2, i32::from(e2), 2)]
    );
}

#[test]
fn duplicates_are_recognised_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProc::start(dir.path(), &[]);
    let mut c = b.connect();
    create_topic(&mut c, "idem-restart", 1);
    let (_, pid, epoch) = init_producer_id(&mut c, None, 60_000);
    const BATCHES: i32 = 40;
    let mut sent = Vec::new();
    for i in 0..BATCHES {
        let batch = idem_batch(pid, epoch, i * 3, 3, &format!("m{i}"));
        let (err, base) = produce(&mut c, "idem-restart", batch.clone());
        assert_eq!((err, base), (0, i64::from(i) * 3));
        sent.push(batch);
    }
    drop(c);
    b.kill();
    let b = BrokerProc::start(dir.path(), &[]);
    let mut c = b.connect();
    // The producer's retries of its in-flight (last 5) batches are duplicates...
    for i in BATCHES - 5..BATCHES {
        let (err, base) = produce(&mut c, "idem-restart", sent[i as usize].clone());
        assert_eq!(
            (err, base),
            (0, i64::from(i) * 3),
            "retry of batch {i} after restart"
        );
    }
    // ...and the sequence continues where it was.
    let next = idem_batch(pid, epoch, BATCHES * 3, 1, "next");
    assert_eq!(
        produce(&mut c, "idem-restart", next),
        (0, i64::from(BATCHES) * 3)
    );
    let records = fetch_all(&mut c, "idem-restart");
    assert_eq!(records.len(), BATCHES as usize * 3 + 1);
    for (i, (offset, _)) in records.iter().enumerate() {
        assert_eq!(*offset, i as i64);
    }
    // A new producer id after restart never collides with the old one.
    let (_, pid_after, _) = init_producer_id(&mut c, None, 60_000);
    assert_ne!(pid_after, pid);
}

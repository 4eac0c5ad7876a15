//! The client's multi-record APIs against the real broker: `Producer::send_batch` and
//! `Consumer::poll_batches`.
mod client_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use client_support::{BrokerProcess, POLL_DEADLINE, client, create};
use streamforge_client::{
    Acks, Admin, BatchRecord, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_batch_and_poll_batches_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let admin = Admin::new(client(&b));
    create(&admin, "batches", 3).await;
    let p = Producer::new(ProducerConfig {
        client: client(&b),
        acks: Acks::All,
        batch_size_bytes: 4096,
        // Smaller than one call's records: the call is split into several reservations.
        buffer_memory_bytes: 16 * 1024,
        ..Default::default()
    })
    .await
    .unwrap();
    let values: Vec<Vec<u8>> = (0..1000).map(|i| format!("v{i:05}").into_bytes()).collect();
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("k{}", i % 7).into_bytes())
        .collect();
    // Keyless to the sticky partition, explicit partition 2, and keyed by murmur2.
    let keyless: Vec<BatchRecord<'_>> = values[..400]
        .iter()
        .map(|v| BatchRecord::value(v))
        .collect();
    let explicit: Vec<BatchRecord<'_>> = values[400..700]
        .iter()
        .map(|v| BatchRecord::value(v))
        .collect();
    let keyed: Vec<BatchRecord<'_>> = values[700..]
        .iter()
        .zip(&keys[700..])
        .map(|(v, k)| BatchRecord {
            key: Some(k),
            ..BatchRecord::value(v)
        })
        .collect();
    let d1 = p.send_batch("batches", None, &keyless).await.unwrap();
    let d2 = p.send_batch("batches", Some(2), &explicit).await.unwrap();
    let d3 = p.send_batch("batches", None, &keyed).await.unwrap();
    assert!(p.send_batch("batches", Some(9), &keyless).await.is_err());
    assert_eq!(
        d1.record_count() + d2.record_count() + d3.record_count(),
        1000
    );
    p.flush().await.unwrap();
    let runs2 = d2.wait().await.unwrap();
    assert!(runs2.iter().all(|r| r.partition == 2 && r.base_offset >= 0));
    assert_eq!(runs2.iter().map(|r| r.count).sum::<i32>(), 300);
    for r in d3.clone().wait().await.unwrap() {
        assert!(r.base_offset >= 0);
    }
    // Keyed records went to several partitions: one delivery per batch, the same records.
    let per_batch: Vec<_> = d3.per_batch().collect();
    assert!(per_batch.len() > 1, "{}", per_batch.len());
    assert_eq!(
        per_batch.iter().map(|d| d.record_count()).sum::<usize>(),
        300
    );
    for d in per_batch {
        assert_eq!(d.wait().await.unwrap().len(), 1);
    }
    d1.wait().await.unwrap();
    assert_eq!(p.stats().records_acked, 1000);

    // Batches come back CRC-checked with contiguous offsets covering every record once.
    let mut c = Consumer::new(ConsumerConfig {
        client: client(&b),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        ..Default::default()
    });
    c.assign(&[
        ("batches".to_string(), 0),
        ("batches".to_string(), 1),
        ("batches".to_string(), 2),
    ]);
    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut seen_values = Vec::new();
    let deadline = Instant::now() + POLL_DEADLINE;
    while seen_values.len() < 1000 && Instant::now() < deadline {
        for batch in c.poll_batches(Duration::from_millis(500)).await.unwrap() {
            let n = next.entry(batch.partition).or_insert(0);
            assert_eq!(batch.first_offset, *n, "partition {}", batch.partition);
            assert_eq!(
                i64::from(batch.record_count),
                batch.last_offset - batch.first_offset + 1
            );
            *n = batch.last_offset + 1;
            for r in batch.records().unwrap() {
                seen_values.push(r.value.unwrap().to_vec());
            }
        }
    }
    seen_values.sort();
    let mut expected = values.clone();
    expected.sort();
    assert_eq!(seen_values, expected);

    // After a seek into the middle of a batch, only the records from there on are counted.
    c.seek("batches", 2, 5).unwrap();
    let deadline = Instant::now() + POLL_DEADLINE;
    let mut first = None;
    while first.is_none() && Instant::now() < deadline {
        first = c
            .poll_batches(Duration::from_millis(500))
            .await
            .unwrap()
            .into_iter()
            .find(|b| b.partition == 2);
    }
    let first = first.expect("a batch of partition 2");
    assert_eq!(first.first_offset, 5);
    let recs = first.records().unwrap();
    assert_eq!(recs.len(), first.record_count as usize);
    assert_eq!(recs[0].offset, 5);
}

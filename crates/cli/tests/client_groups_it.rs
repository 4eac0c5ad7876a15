//! The Rust client's group membership and idempotence against the real broker binary.
mod client_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use client_support::{BrokerProcess, POLL_DEADLINE, client, consume_n, create};
use streamforge_client::offsets::CommittedOffset;
use streamforge_client::{
    Admin, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig, ProducerRecord,
    ResetTarget,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_subscribe_commit_lag_reset() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let admin = Admin::new(client(&b));
    create(&admin, "grp", 4).await;
    let p = Producer::new(ProducerConfig {
        client: client(&b),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..200 {
        p.send(
            ProducerRecord::new("grp", format!("{i}").as_bytes()).key(format!("k{i}").as_bytes()),
        )
        .await
        .unwrap();
    }
    p.close().await.unwrap();
    let cfg = ConsumerConfig {
        client: client(&b),
        group_id: Some("g1".into()),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        heartbeat_interval_ms: 200,
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        ..Default::default()
    };
    let mut c1 = Consumer::new(cfg.clone());
    c1.subscribe(&["grp".into()]).unwrap();
    let got = consume_n(&mut c1, 200).await;
    assert_eq!(got.len(), 200);
    assert_eq!(c1.assignment().len(), 4);
    // Commit only 150 records' worth: partition positions minus a few.
    let mut commit = HashMap::new();
    let mut expected_lag = 0;
    for (t, p) in c1.assignment() {
        let pos = c1.position(&t, p).unwrap();
        let back = pos.min(10);
        expected_lag += back;
        commit.insert(
            (t, p),
            CommittedOffset {
                offset: pos - back,
                metadata: Some("meta".into()),
            },
        );
    }
    c1.commit_offsets(&commit).await.unwrap();
    let lag = admin.group_lag("g1").await.unwrap();
    assert_eq!(
        lag.iter().map(|l| l.lag.unwrap()).sum::<i64>(),
        expected_lag
    );
    let desc = admin.describe_group("g1").await.unwrap();
    assert_eq!(desc.members.len(), 1);
    assert_eq!(desc.state, "Stable");
    assert!(
        admin
            .list_groups()
            .await
            .unwrap()
            .iter()
            .any(|g| g.group_id == "g1")
    );
    c1.close().await.unwrap();
    let reset = admin
        .reset_offsets("g1", "grp", ResetTarget::Earliest)
        .await
        .unwrap();
    assert!(reset.values().all(|o| *o == 0));
    let lag = admin.group_lag("g1").await.unwrap();
    assert_eq!(lag.iter().map(|l| l.lag.unwrap()).sum::<i64>(), 200);
    admin.delete_groups(&["g1".into()]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_share_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    create(&Admin::new(client(&b)), "share", 4).await;
    let cfg = ConsumerConfig {
        client: client(&b),
        group_id: Some("g2".into()),
        auto_offset_reset: OffsetReset::Earliest,
        heartbeat_interval_ms: 100,
        session_timeout_ms: 6_000,
        rebalance_timeout_ms: 6_000,
        ..Default::default()
    };
    let mut c1 = Consumer::new(cfg.clone());
    c1.subscribe(&["share".into()]).unwrap();
    c1.poll(Duration::from_millis(200)).await.unwrap();
    assert_eq!(c1.assignment().len(), 4);
    // Each member polls on its own task, as applications do: a rebalance is only joined from
    // poll, so one member must not wait on the other.
    let sizes = Arc::new([AtomicUsize::new(4), AtomicUsize::new(0)]);
    let stop = Arc::new(AtomicBool::new(false));
    let spawn_member = |mut c: Consumer, i: usize| {
        let (sizes, stop) = (sizes.clone(), stop.clone());
        tokio::spawn(async move {
            let deadline = std::time::Instant::now() + POLL_DEADLINE;
            while !stop.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                c.poll(Duration::from_millis(100)).await.unwrap();
                sizes[i].store(c.assignment().len(), Ordering::Release);
            }
            c.close().await.unwrap();
        })
    };
    let t1 = spawn_member(c1, 0);
    let mut c2 = Consumer::new(cfg);
    c2.subscribe(&["share".into()]).unwrap();
    let t2 = spawn_member(c2, 1);
    let deadline = std::time::Instant::now() + POLL_DEADLINE;
    let (mut a1, mut a2) = (0, 0);
    while std::time::Instant::now() < deadline {
        a1 = sizes[0].load(Ordering::Acquire);
        a2 = sizes[1].load(Ordering::Acquire);
        if a1 == 2 && a2 == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Release);
    t1.await.unwrap();
    t2.await.unwrap();
    assert_eq!((a1, a2), (2, 2), "broker log:\n{}", b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_survives_broker_restart() {
    client_support::produce_across_broker_restart(true).await;
}

//! Reassignment throttles (KIP-73) between two brokers in one process, over their real Kafka
//! listeners, each side on its own: a follower outside the ISR that must copy the leader's log
//! takes at least (log − one fetch) / rate when only the leader throttles it, and again when
//! only the follower throttles itself; once it has caught up it joins the ISR, and then new
//! batches reach it at once although the quota is still exceeded (an in-sync replica is never
//! throttled). The test plays the controller, as in `replication.rs`.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use streamforge_broker::partition::replica::LeaderAndIsr;
use streamforge_broker::quota::replication::{
    FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS, Side,
};
use streamforge_broker::{BrokerConfig, BrokerHandle};
use support::group_client::RawClient;
use support::{controller, replica_config, start_with_topic, wait_for};

const TOPIC: &str = "throttled";
/// Small fetches, so a few dozen KB take several of them.
const FETCH_MAX_BYTES: usize = 4096;
const RATE_BYTES_PER_S: u64 = 20_000;
/// Batches produced before the follower starts (5 records of 40 bytes each).
const BATCHES: usize = 200;

async fn start(dir: &std::path::Path, node_id: i32) -> BrokerHandle {
    let config = BrokerConfig {
        replica_fetch_max_bytes: FETCH_MAX_BYTES,
        ..replica_config(dir, node_id)
    };
    start_with_topic(config, TOPIC, BTreeMap::new()).await
}

fn log_end(b: &BrokerHandle) -> i64 {
    support::offsets(b, TOPIC).log_end_offset
}

fn size_bytes(b: &BrokerHandle) -> u64 {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.size_bytes().unwrap()
}

fn isr(b: &BrokerHandle) -> Vec<i32> {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.replica_status().map(|s| s.1).unwrap_or_default()
}

/// Throttle partition 0 on `side` of broker `b` (its topic config names `0:<b's id>`), at
/// the test's rate.
fn throttle(b: &BrokerHandle, side: Side) {
    let (rate, replicas) = match side {
        Side::Leader => (LEADER_RATE, LEADER_REPLICAS),
        Side::Follower => (FOLLOWER_RATE, FOLLOWER_REPLICAS),
    };
    let quotas = b.state().replicas.replication_quotas().clone();
    let value = RATE_BYTES_PER_S.to_string();
    quotas.apply_broker_configs(|name| (name == rate).then_some(value.as_str()));
    let pair = format!("0:{}", b.state().node_id());
    let configs = BTreeMap::from([(replicas.to_string(), pair)]);
    quotas.apply_topic_configs(TOPIC, Some(&configs));
    assert!(quotas.is_throttled(side, TOPIC, 0));
}

/// Broker 1 holds `BATCHES` batches; broker 2 (throttled on `side` by the broker of that
/// side) joins as a follower outside the ISR: how long its copy takes, and the bytes copied.
async fn copy_with_throttle(side: Side) -> (Duration, u64) {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(dir_a.path(), 1).await;
    let b = start(dir_b.path(), 2).await;
    let mut client = RawClient::connect(a.kafka_addr()).await;
    for _ in 0..BATCHES {
        assert_eq!(support::produce(&mut client, TOPIC, 1, 10_000).await, 0);
    }
    match side {
        Side::Leader => throttle(&a, side),
        Side::Follower => throttle(&b, side),
    }
    // A reassignment's new replica: in the replicas, not in the ISR.
    let state = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1],
    };
    a.state()
        .lead(TOPIC, 0, state, controller(a.state(), 0))
        .unwrap();
    b.state().fetchers.set_peer(1, a.kafka_addr());
    let started = Instant::now();
    b.state().follow(TOPIC, 0, 1, 1).unwrap();
    let end = log_end(&a);
    wait_for("the follower to copy the log", || log_end(&b) == end).await;
    let took = started.elapsed();
    assert_eq!(size_bytes(&b), size_bytes(&a));

    // Caught up, it joins the ISR; from then on it is not throttled, whatever the rate.
    wait_for("the follower to join the ISR", || isr(&a) == vec![1, 2]).await;
    let quotas = match side {
        Side::Leader => a.state().replicas.replication_quotas().clone(),
        Side::Follower => b.state().replicas.replication_quotas().clone(),
    };
    quotas.record(side, 10 * RATE_BYTES_PER_S);
    assert!(quotas.is_exceeded(side));
    assert_eq!(support::produce(&mut client, TOPIC, -1, 10_000).await, 0);
    let end = log_end(&a);
    let in_sync = Instant::now();
    wait_for("an in-sync follower to get a new batch", || {
        log_end(&b) == end
    })
    .await;
    assert!(
        in_sync.elapsed() < Duration::from_secs(1),
        "{:?}",
        in_sync.elapsed()
    );
    (took, size_bytes(&a))
}

/// The least time a copy of `bytes` can take: everything but the first fetch is paced.
fn least(bytes: u64) -> Duration {
    Duration::from_secs_f64((bytes - FETCH_MAX_BYTES as u64) as f64 / RATE_BYTES_PER_S as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_serves_a_follower_outside_the_isr_at_its_throttle_rate() {
    let (took, bytes) = copy_with_throttle(Side::Leader).await;
    println!("leader-throttled copy of {bytes} bytes: {took:?}");
    assert!(took >= least(bytes), "{took:?} < {:?}", least(bytes));
    assert!(took < least(bytes) + Duration::from_secs(5), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_follower_fetches_at_its_throttle_rate() {
    let (took, bytes) = copy_with_throttle(Side::Follower).await;
    println!("follower-throttled copy of {bytes} bytes: {took:?}");
    assert!(took >= least(bytes), "{took:?} < {:?}", least(bytes));
    assert!(took < least(bytes) + Duration::from_secs(5), "{took:?}");
}

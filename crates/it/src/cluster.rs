//! Three `streamforge broker` processes as one cluster (combined mode: every broker is also a
//! controller-quorum voter), started with the flags tests/python/test_cluster.py uses, and each
//! broker's own view of a topic's placement through librdkafka's Metadata.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::{BrokerProcess, free_port};

/// Brokers in the cluster (node ids 1..=CLUSTER_SIZE).
pub const CLUSTER_SIZE: usize = 3;
/// A broker silent this long is fenced by the controller and loses its leaderships.
pub const BROKER_SESSION_TIMEOUT_MS: u32 = 3_000;
pub const BROKER_HEARTBEAT_INTERVAL_MS: u32 = 500;
const OFFSETS_TOPIC_PARTITIONS: u32 = 3;
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Start the cluster; the brokers are started together because the voters need each other to
/// elect a controller. `brokers[i]` has node id `i + 1`.
pub fn start_cluster() -> Result<Vec<BrokerProcess>> {
    let voters = (1..=CLUSTER_SIZE)
        .map(|id| Ok(format!("{id}@127.0.0.1:{}", free_port()?)))
        .collect::<Result<Vec<_>>>()?
        .join(",");
    std::thread::scope(|s| {
        let starts: Vec<_> = (1..=CLUSTER_SIZE)
            .map(|id| {
                let voters = &voters;
                s.spawn(move || {
                    let args = [
                        "--node-id".to_string(),
                        id.to_string(),
                        "--controller-quorum-voters".into(),
                        voters.clone(),
                        "--broker-session-timeout-ms".into(),
                        BROKER_SESSION_TIMEOUT_MS.to_string(),
                        "--broker-heartbeat-interval-ms".into(),
                        BROKER_HEARTBEAT_INTERVAL_MS.to_string(),
                        "--offsets-topic-partitions".into(),
                        OFFSETS_TOPIC_PARTITIONS.to_string(),
                    ];
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    BrokerProcess::start(&args).with_context(|| format!("start broker {id}"))
                })
            })
            .collect();
        starts
            .into_iter()
            .map(|h| h.join().expect("broker start thread panicked"))
            .collect()
    })
}

/// One partition as a broker answers Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub leader: i32,
    /// Sorted.
    pub isr: Vec<i32>,
}

/// `{partition: view}` of `topic` as the broker at `bootstrap` itself answers Metadata; `None`
/// while it does not answer or does not know the topic (a client bootstrapped with the whole
/// cluster may ask a broker that was just killed, or one whose view lags).
pub fn placement(bootstrap: &str, topic: &str) -> Option<BTreeMap<i32, PartitionView>> {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .ok()?;
    let md = client.fetch_metadata(Some(topic), METADATA_TIMEOUT).ok()?;
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    if t.error().is_some() || t.partitions().is_empty() {
        return None;
    }
    let out: BTreeMap<i32, PartitionView> = t
        .partitions()
        .iter()
        .map(|p| {
            let mut isr = p.isr().to_vec();
            isr.sort_unstable();
            (
                p.id(),
                PartitionView {
                    leader: p.leader(),
                    isr,
                },
            )
        })
        .collect();
    Some(out)
}

/// Every partition led and all of the cluster's brokers in its ISR.
pub fn full_isr(p: &BTreeMap<i32, PartitionView>) -> bool {
    let all: Vec<i32> = (1..=CLUSTER_SIZE as i32).collect();
    !p.is_empty() && p.values().all(|v| v.leader > 0 && v.isr == all)
}

/// Poll `f` until it returns `Some`, for at most `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(WAIT_POLL);
    }
}

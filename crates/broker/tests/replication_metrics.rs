//! Replication metrics with two brokers in one process, over their real Kafka listeners and the
//! leader's real `/metrics` endpoint: once the follower caught up the leader shows ISR 2 and lag
//! 0 (and the follower a fetcher lag of 0); when the follower stops, its lag grows, and the ISR
//! shrink the controller accepts is counted, with the partition under-replicated. The test plays
//! the controller (`tests/support/pair.rs`).

mod support {
    #![allow(dead_code)]
    pub mod group_client;
    pub mod pair;
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::BrokerHandle;
use streamforge_broker::partition::Partition;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use support::group_client::RawClient;
use support::pair::{replicate, start_broker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "replicated-metrics";
/// `replica.lag.time.max.ms` of both brokers: short, so the shrink comes quickly.
const REPLICA_LAG_MS: i64 = 1_000;
/// Bound on each wait for a replication state.
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// Largest `/metrics` answer the test reads.
const SCRAPE_BYTES_MAX: u64 = 8 << 20;

fn hosted(b: &BrokerHandle) -> Arc<Partition> {
    b.state().replicas.partition(TOPIC, 0).unwrap()
}

async fn produce_one(client: &mut RawClient, acks: i16) {
    let mut data = PartitionProduceData::default();
    data.records = Some(Bytes::from(build_simple(BatchSpec::default(), 4, 30)));
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_static_str(TOPIC));
    topic.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = 10_000;
    request.topic_data = vec![topic];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await;
    let code = response.responses[0].partition_responses[0].error_code;
    assert_eq!(code, 0, "produce acks={acks}");
}

/// GET /metrics from the leader's dashboard listener (HTTP/1.0: the answer ends at close).
async fn scrape(b: &BrokerHandle) -> String {
    let mut stream = tokio::net::TcpStream::connect(b.http_addr().unwrap())
        .await
        .unwrap();
    let request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut body = String::new();
    stream
        .take(SCRAPE_BYTES_MAX)
        .read_to_string(&mut body)
        .await
        .unwrap();
    assert!(body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"));
    body
}

/// The value of the one sample `series` (name with labels) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < WAIT_LIMIT, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_isr_lag_and_a_counted_shrink_when_the_follower_stops() {
    let (dir_1, dir_2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = start_broker(dir_1.path(), 1, REPLICA_LAG_MS, true, TOPIC).await;
    let follower = start_broker(dir_2.path(), 2, REPLICA_LAG_MS, false, TOPIC).await;
    replicate(&leader, &follower, TOPIC);

    let mut client = RawClient::connect(leader.kafka_addr()).await;
    for _ in 0..5 {
        produce_one(&mut client, -1).await;
    }
    let end = hosted(&leader).offsets().unwrap().log_end_offset;
    eventually("the follower's log end and HW", || {
        let o = hosted(&follower).offsets().unwrap();
        o.log_end_offset == end && o.high_watermark == end
    })
    .await;
    // The leader learns the follower's position at its next fetch.
    eventually("lag 0 on the leader", || {
        let progress = hosted(&leader).replica_progress(0).unwrap();
        progress.followers[0].lag_messages == Some(0)
    })
    .await;
    let isr_size = format!("streamforge_partition_isr_size{{topic=\"{TOPIC}\",partition=\"0\"}}");
    let lag = format!(
        "streamforge_replica_lag_messages{{topic=\"{TOPIC}\",partition=\"0\",follower=\"2\"}}"
    );
    let text = scrape(&leader).await;
    assert_eq!(sample(&text, &isr_size), Some(2.0), "{text}");
    assert_eq!(sample(&text, &lag), Some(0.0));
    assert_eq!(
        sample(&text, "streamforge_under_replicated_partitions"),
        Some(0.0)
    );
    assert_eq!(sample(&text, "streamforge_isr_shrinks_total"), Some(0.0));
    assert_eq!(hosted(&follower).replica_fetcher_lag(), Some(0));
    let fetcher_lag = format!("streamforge_replica_fetcher_lag{{topic=\"{TOPIC}\"");
    assert!(
        !text.contains(&fetcher_lag),
        "the leader fetches from no one"
    );

    // The follower stops: the leader keeps taking acks=1 writes, so the lag grows; after
    // replica.lag.time.max.ms the leader drops it and the accepted shrink is counted.
    follower.shutdown().await;
    for _ in 0..3 {
        produce_one(&mut client, 1).await;
    }
    let progress = hosted(&leader).replica_progress(0).unwrap();
    assert_eq!(
        progress.followers[0].lag_messages,
        Some(12),
        "3 batches of 4"
    );
    let text = scrape(&leader).await;
    assert_eq!(sample(&text, &lag), Some(12.0));
    eventually("the ISR shrink", || {
        hosted(&leader).replica_status().unwrap().1 == vec![1]
    })
    .await;
    let text = scrape(&leader).await;
    assert_eq!(
        sample(&text, "streamforge_isr_shrinks_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "streamforge_isr_expands_total"), Some(0.0));
    assert_eq!(sample(&text, &isr_size), Some(1.0));
    assert_eq!(
        sample(&text, "streamforge_under_replicated_partitions"),
        Some(1.0)
    );
    assert_eq!(sample(&text, &lag), Some(12.0), "still behind");
    leader.shutdown().await;
}

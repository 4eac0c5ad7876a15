//! An in-memory cluster view and a fake benchmark runner, shared by the API tests and the
//! `demo` example.
#![allow(dead_code)]

pub mod client;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::json;
use streamforge_http::*;

#[derive(Default)]
pub struct MemView {
    pub topics: Mutex<BTreeMap<String, Vec<Message>>>,
}

pub fn batch(offset: i64) -> BatchInfo {
    BatchInfo {
        base_offset: offset,
        last_offset: offset,
        partition_leader_epoch: 0,
        compression: "none".into(),
        timestamp_type: "create_time".into(),
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        transactional: false,
        control: false,
        size_bytes: 80,
    }
}

impl MemView {
    fn info(&self, name: &str, messages: &[Message]) -> TopicInfo {
        TopicInfo {
            name: name.to_string(),
            topic_id: None,
            internal: false,
            replication_factor: 1,
            partitions: vec![PartitionInfo {
                partition: 0,
                leader: 1,
                leader_epoch: 0,
                replicas: vec![1],
                isr: vec![1],
                log_start_offset: 0,
                log_end_offset: messages.len() as i64,
                high_watermark: messages.len() as i64,
                size_bytes: 80 * messages.len() as u64,
                remote_size_bytes: None,
                led_here: true,
                replication: None,
                fetcher_lag: None,
            }],
        }
    }
}

impl ClusterView for MemView {
    fn cluster(&self) -> ViewFuture<'_, ClusterInfo> {
        Box::pin(async {
            Ok(ClusterInfo {
                cluster_id: "mem-cluster".into(),
                node_id: 1,
                controller_id: 1,
                brokers: vec![BrokerInfo {
                    node_id: 1,
                    host: "127.0.0.1".into(),
                    port: 9092,
                    rack: None,
                    fenced: false,
                }],
                version: "test".into(),
                started_at_ms: 1,
                quorum: None,
                isr_changes: Default::default(),
            })
        })
    }

    fn topics(&self) -> ViewFuture<'_, Vec<TopicInfo>> {
        Box::pin(async {
            Ok(self
                .topics
                .lock()
                .iter()
                .map(|(n, m)| self.info(n, m))
                .collect())
        })
    }

    fn topic(&self, name: String) -> ViewFuture<'_, TopicDetail> {
        Box::pin(async move {
            let topics = self.topics.lock();
            let messages = topics
                .get(&name)
                .ok_or_else(|| ViewError::NotFound(format!("topic '{name}' not found")))?;
            Ok(TopicDetail {
                topic: self.info(&name, messages),
                configs: vec![ConfigEntry {
                    name: "retention.ms".into(),
                    value: Some("604800000".into()),
                    source: "DEFAULT_CONFIG".into(),
                    is_default: true,
                    sensitive: false,
                }],
            })
        })
    }

    fn read_messages(&self, query: MessageQuery) -> ViewFuture<'_, MessagePage> {
        Box::pin(async move {
            let topics = self.topics.lock();
            let messages = topics
                .get(&query.topic)
                .ok_or_else(|| ViewError::NotFound(format!("topic '{}' not found", query.topic)))?;
            let start = match query.start {
                ReadStart::Offset(o) => o,
                ReadStart::Timestamp(ts) => messages
                    .iter()
                    .find(|m| m.timestamp_ms >= ts)
                    .map_or(messages.len() as i64, |m| m.offset),
            };
            let page: Vec<Message> = messages
                .iter()
                .skip(start.max(0) as usize)
                .take(query.limit)
                .cloned()
                .collect();
            Ok(MessagePage {
                log_start_offset: 0,
                high_watermark: messages.len() as i64,
                next_offset: page.last().map_or(start, |m| m.offset + 1),
                messages: page,
            })
        })
    }

    fn groups(&self) -> ViewFuture<'_, Vec<GroupInfo>> {
        Box::pin(async { Ok(vec![group()]) })
    }

    fn group(&self, group_id: String) -> ViewFuture<'_, GroupInfo> {
        Box::pin(async move {
            if group_id == "g1" {
                Ok(group())
            } else {
                Err(ViewError::NotFound(format!("group '{group_id}' not found")))
            }
        })
    }

    fn create_topic(&self, request: CreateTopic) -> ViewFuture<'_, ()> {
        Box::pin(async move {
            let mut topics = self.topics.lock();
            if topics.contains_key(&request.name) {
                return Err(ViewError::Conflict(format!(
                    "topic '{}' already exists",
                    request.name
                )));
            }
            let messages = (0..3)
                .map(|i| Message {
                    offset: i,
                    timestamp_ms: 1000 + i,
                    key: Some(Bytes::from(format!("k{i}"))),
                    value: Some(if i == 2 {
                        Bytes::from_static(&[0, 159, 255])
                    } else {
                        Bytes::from(format!("value {i}"))
                    }),
                    headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
                    batch: batch(i),
                })
                .collect();
            topics.insert(request.name, messages);
            Ok(())
        })
    }

    fn delete_topic(&self, name: String) -> ViewFuture<'_, ()> {
        Box::pin(async move {
            self.topics
                .lock()
                .remove(&name)
                .map(|_| ())
                .ok_or_else(|| ViewError::NotFound(format!("topic '{name}' not found")))
        })
    }

    fn bootstrap_address(&self) -> String {
        "127.0.0.1:9092".into()
    }

    /// Refuses like the broker does for a group with members.
    fn delete_group(&self, group: String) -> ViewFuture<'_, ()> {
        Box::pin(async move {
            Err(ViewError::Kafka(
                kafka_protocol::ResponseError::NonEmptyGroup,
                format!("The group '{group}' is not empty."),
            ))
        })
    }

    /// Only retention.ms, and only numbers (enough to see the error shape).
    fn alter_topic_configs(
        &self,
        _topic: String,
        changes: Vec<ConfigChange>,
    ) -> ViewFuture<'_, ()> {
        Box::pin(async move {
            for c in changes {
                if c.value
                    .as_deref()
                    .is_some_and(|v| v.parse::<i64>().is_err())
                {
                    return Err(ViewError::Kafka(
                        kafka_protocol::ResponseError::InvalidConfig,
                        format!("Invalid value for configuration {}", c.name),
                    ));
                }
            }
            Ok(())
        })
    }
}

pub fn group() -> GroupInfo {
    GroupInfo {
        group_id: "g1".into(),
        state: "Stable".into(),
        protocol_type: "consumer".into(),
        protocol: "range".into(),
        generation: 3,
        coordinator: 1,
        members: vec![GroupMember {
            member_id: "m-1".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            assignment: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![0],
            }],
        }],
        offsets: vec![GroupOffset {
            topic: "t".into(),
            partition: 0,
            committed_offset: 1,
            metadata: String::new(),
            high_watermark: Some(3),
        }],
    }
}

pub struct FakeBench;

impl BenchRunner for FakeBench {
    fn run(
        &self,
        target: BenchTarget,
        params: BenchParams,
        progress: BenchProgressSink,
    ) -> BenchFuture {
        Box::pin(async move {
            for i in 1..=4u64 {
                progress(BenchProgress {
                    phase: "produce".into(),
                    messages_done: params.messages * i / 4,
                    messages_total: params.messages,
                    bytes_done: 0,
                    elapsed_ms: i * 10,
                });
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(BenchReport {
                rows: vec![BenchRow {
                    metric: "produce throughput".into(),
                    value: 123.0,
                    unit: "msg/s".into(),
                }],
                latency_percentiles: vec![LatencyPoint {
                    percentile: 50.0,
                    latency_ms: 1.5,
                }],
                details: json!({"topic": target.topic}),
            })
        })
    }
}

/// A dashboard server on a free loopback port over an empty [`MemView`] and the fake bench.
pub async fn start() -> HttpServer {
    let options = HttpOptions {
        bench_runner: Some(Arc::new(FakeBench)),
        bench_history_path: None,
        metrics: None,
        ..Default::default()
    };
    serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemView::default()),
        options,
    )
    .await
    .unwrap()
}

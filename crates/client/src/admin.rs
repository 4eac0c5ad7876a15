//! Admin operations: topics, configs, partitions, cluster, groups, lag, offset resets and
//! record deletion.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, DescribeGroupsRequest, GroupId,
    IncrementalAlterConfigsRequest, ListGroupsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::assignor;
use crate::cluster::{ClientConfig, Cluster, Metadata, TopicInfo};
use crate::conn::Connection;
use crate::error::{ClientError, Result};
use crate::group;
use crate::offsets::{self, CommittedOffset, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition};

const CREATE_TOPICS_MAX_VERSION: i16 = 7;
const DELETE_TOPICS_MAX_VERSION: i16 = 5;
const DESCRIBE_CONFIGS_MAX_VERSION: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_MAX_VERSION: i16 = 1;
const CREATE_PARTITIONS_MAX_VERSION: i16 = 3;
const LIST_GROUPS_MAX_VERSION: i16 = 4;
const DESCRIBE_GROUPS_MAX_VERSION: i16 = 5;
const DELETE_GROUPS_MAX_VERSION: i16 = 2;
const DELETE_RECORDS_MAX_VERSION: i16 = 2;
/// Server-side timeout for admin operations.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// ConfigResource type of a topic.
const RESOURCE_TOPIC: i8 = 2;

#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    /// -1 uses the broker default.
    pub partitions: i32,
    /// -1 uses the broker default.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: &'static str,
    pub is_default: bool,
    pub read_only: bool,
    pub sensitive: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupMemberDescription {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub assignment: BTreeMap<String, Vec<i32>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<GroupMemberDescription>,
}

/// Committed offset, end offset and lag of one partition for a group.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: Option<i64>,
    pub log_end_offset: i64,
    pub lag: Option<i64>,
}

/// Where `reset_offsets` moves a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    Earliest,
    Latest,
    Offset(i64),
    Timestamp(i64),
    /// Move by this many records (negative goes back).
    ShiftBy(i64),
}

fn config_source_name(s: i8) -> &'static str {
    match s {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// An admin client.
pub struct Admin {
    cluster: Arc<Cluster>,
}

impl Admin {
    pub fn new(config: ClientConfig) -> Self {
        Self {
            cluster: Cluster::new(config),
        }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The controller if known (admin writes go there), else any broker.
    pub(crate) async fn controller(&self) -> Result<Arc<Connection>> {
        let m = self.cluster.refresh_metadata(&[]).await?;
        if m.controller_id >= 0 && m.brokers.contains_key(&m.controller_id) {
            return self.cluster.broker(m.controller_id).await;
        }
        self.cluster.any_broker().await
    }

    /// Cluster metadata: brokers, controller, every topic.
    pub async fn describe_cluster(&self) -> Result<Arc<Metadata>> {
        self.cluster.refresh_metadata(&[]).await
    }

    /// Topics by name (all topics when `names` is empty), sorted by name.
    pub async fn describe_topics(&self, names: &[String]) -> Result<Vec<TopicInfo>> {
        let m = self.cluster.refresh_metadata(names).await?;
        let mut out: Vec<TopicInfo> = if names.is_empty() {
            m.topics.values().cloned().collect()
        } else {
            let mut v = Vec::new();
            for n in names {
                match m.topics.get(n) {
                    Some(t) if t.error_code == 0 => v.push(t.clone()),
                    Some(t) => return Err(ClientError::kafka(t.error_code, format!("topic {n}"))),
                    None => return Err(ClientError::UnknownTopicOrPartition(n.clone())),
                }
            }
            v
        };
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub async fn list_topics(&self) -> Result<Vec<String>> {
        Ok(self
            .describe_topics(&[])
            .await?
            .into_iter()
            .filter(|t| !t.is_internal)
            .map(|t| t.name)
            .collect())
    }

    /// Creates topics; fails on the first per-topic error.
    pub async fn create_topics(&self, topics: &[NewTopic], validate_only: bool) -> Result<()> {
        let conn = self.controller().await?;
        let version = conn.version_for::<CreateTopicsRequest>(CREATE_TOPICS_MAX_VERSION)?;
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_validate_only(validate_only)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(TopicName(s(&t.name)))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(s(k))
                                            .with_value(Some(s(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let r = conn.send(&req, version).await?;
        for t in r.topics {
            let msg = t.error_message.map(|m| m.to_string()).unwrap_or_default();
            ClientError::check(t.error_code, || format!("create topic {}: {msg}", t.name.0))?;
        }
        self.cluster.invalidate_metadata();
        Ok(())
    }

    pub async fn delete_topics(&self, names: &[String]) -> Result<()> {
        let conn = self.controller().await?;
        let version = conn.version_for::<DeleteTopicsRequest>(DELETE_TOPICS_MAX_VERSION)?;
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
        if version >= 6 {
            req = req.with_topics(
                names
                    .iter()
                    .map(|n| DeleteTopicState::default().with_name(Some(TopicName(s(n)))))
                    .collect(),
            );
        } else {
            req = req.with_topic_names(names.iter().map(|n| TopicName(s(n))).collect());
        }
        let r = conn.send(&req, version).await?;
        for t in r.responses {
            let name = t.name.map(|n| n.0.to_string()).unwrap_or_default();
            let msg = t.error_message.map(|m| m.to_string()).unwrap_or_default();
            ClientError::check(t.error_code, || match msg.as_str() {
                "" => format!("delete topic {name}"),
                m => format!("delete topic {name}: {m}"),
            })?;
        }
        self.cluster.invalidate_metadata();
        Ok(())
    }

    /// Every config of a topic with its value, source and flags.
    pub async fn describe_topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let conn = self.cluster.any_broker().await?;
        let version = conn.version_for::<DescribeConfigsRequest>(DESCRIBE_CONFIGS_MAX_VERSION)?;
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(s(topic))
                .with_configuration_keys(None),
        ]);
        let r = conn.send(&req, version).await?;
        let mut out = Vec::new();
        for res in r.results {
            let msg = res.error_message.map(|m| m.to_string()).unwrap_or_default();
            ClientError::check(res.error_code, || {
                format!("describe configs of {topic}: {msg}")
            })?;
            for c in res.configs {
                out.push(ConfigEntry {
                    name: c.name.to_string(),
                    value: c.value.map(|v| v.to_string()),
                    source: config_source_name(c.config_source),
                    is_default: c.config_source == 5,
                    read_only: c.read_only,
                    sensitive: c.is_sensitive,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Sets and deletes topic configs (IncrementalAlterConfigs).
    pub async fn alter_topic_configs(
        &self,
        topic: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<()> {
        let conn = self.controller().await?;
        let version = conn
            .version_for::<IncrementalAlterConfigsRequest>(INCREMENTAL_ALTER_CONFIGS_MAX_VERSION)?;
        let mut configs: Vec<AlterableConfig> = set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(s(k))
                    .with_config_operation(0)
                    .with_value(Some(s(v)))
            })
            .collect();
        configs.extend(delete.iter().map(|k| {
            AlterableConfig::default()
                .with_name(s(k))
                .with_config_operation(1)
                .with_value(None)
        }));
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(s(topic))
                .with_configs(configs),
        ]);
        let r = conn.send(&req, version).await?;
        for res in r.responses {
            let msg = res.error_message.map(|m| m.to_string()).unwrap_or_default();
            ClientError::check(res.error_code, || {
                format!("alter configs of {topic}: {msg}")
            })?;
        }
        Ok(())
    }

    /// Grows a topic to `total_partitions` partitions.
    pub async fn create_partitions(&self, topic: &str, total_partitions: i32) -> Result<()> {
        let conn = self.controller().await?;
        let version = conn.version_for::<CreatePartitionsRequest>(CREATE_PARTITIONS_MAX_VERSION)?;
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_count(total_partitions)
                    .with_assignments(None),
            ]);
        let r = conn.send(&req, version).await?;
        for res in r.results {
            let msg = res.error_message.map(|m| m.to_string()).unwrap_or_default();
            ClientError::check(res.error_code, || {
                format!("create partitions of {topic}: {msg}")
            })?;
        }
        self.cluster.invalidate_metadata();
        Ok(())
    }

    /// Deletes records before `offset` on each partition; returns the new low watermarks.
    pub async fn delete_records(
        &self,
        targets: &[(TopicPartition, i64)],
    ) -> Result<HashMap<TopicPartition, i64>> {
        let mut by_leader: HashMap<i32, Vec<&(TopicPartition, i64)>> = HashMap::new();
        for t in targets {
            let (leader, _) = self.cluster.leader_connection(&t.0.0, t.0.1).await?;
            by_leader.entry(leader).or_default().push(t);
        }
        let mut out = HashMap::new();
        for (leader, ts) in by_leader {
            let conn = self.cluster.broker(leader).await?;
            let version = conn.version_for::<DeleteRecordsRequest>(DELETE_RECORDS_MAX_VERSION)?;
            let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
            for ((t, p), o) in ts.iter().map(|x| (&x.0, x.1)) {
                topics.entry(t).or_default().push(
                    DeleteRecordsPartition::default()
                        .with_partition_index(*p)
                        .with_offset(o),
                );
            }
            let req = DeleteRecordsRequest::default()
                .with_timeout_ms(ADMIN_TIMEOUT_MS)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            DeleteRecordsTopic::default()
                                .with_name(TopicName(s(t)))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            let r = conn.send(&req, version).await?;
            for t in r.topics {
                for p in t.partitions {
                    ClientError::check(p.error_code, || {
                        format!("delete records {}-{}", t.name.0, p.partition_index)
                    })?;
                    out.insert((t.name.0.to_string(), p.partition_index), p.low_watermark);
                }
            }
        }
        Ok(out)
    }

    /// Groups known to every broker.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let m = self.cluster.refresh_metadata(&[]).await?;
        let mut ids: Vec<i32> = m.brokers.keys().copied().collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids {
            let conn = self.cluster.broker(id).await?;
            let version = conn.version_for::<ListGroupsRequest>(LIST_GROUPS_MAX_VERSION)?;
            let r = conn.send(&ListGroupsRequest::default(), version).await?;
            ClientError::check(r.error_code, || "ListGroups".into())?;
            out.extend(r.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out.dedup_by(|a, b| a.group_id == b.group_id);
        Ok(out)
    }

    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription> {
        let (_, coord) = group::find_coordinator(&self.cluster, group_id).await?;
        let version = coord.version_for::<DescribeGroupsRequest>(DESCRIBE_GROUPS_MAX_VERSION)?;
        let r = coord
            .send(
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group_id))]),
                version,
            )
            .await?;
        let g = r
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty DescribeGroups response".into()))?;
        ClientError::check(g.error_code, || format!("describe group {group_id}"))?;
        let consumer = g.protocol_type.as_str() == "consumer";
        Ok(GroupDescription {
            group_id: g.group_id.0.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| GroupMemberDescription {
                    member_id: m.member_id.to_string(),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: if consumer {
                        assignor::decode_assignment(m.member_assignment).unwrap_or_default()
                    } else {
                        BTreeMap::new()
                    },
                })
                .collect(),
        })
    }

    pub async fn delete_groups(&self, group_ids: &[String]) -> Result<()> {
        for g in group_ids {
            let (_, coord) = group::find_coordinator(&self.cluster, g).await?;
            let version = coord.version_for::<DeleteGroupsRequest>(DELETE_GROUPS_MAX_VERSION)?;
            let r = coord
                .send(
                    &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(g))]),
                    version,
                )
                .await?;
            for res in r.results {
                ClientError::check(res.error_code, || {
                    format!("delete group {}", res.group_id.0)
                })?;
            }
        }
        Ok(())
    }

    /// Committed offsets of a group (every partition it has committed).
    pub async fn committed_offsets(
        &self,
        group_id: &str,
    ) -> Result<HashMap<TopicPartition, CommittedOffset>> {
        let (_, coord) = group::find_coordinator(&self.cluster, group_id).await?;
        offsets::fetch_committed(&coord, group_id, None).await
    }

    /// Per-partition lag of a group: log end offset minus committed offset, for every
    /// partition of every topic the group has committed to.
    pub async fn group_lag(&self, group_id: &str) -> Result<Vec<PartitionLag>> {
        let committed = self.committed_offsets(group_id).await?;
        let mut topics: Vec<String> = committed.keys().map(|(t, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let mut query = Vec::new();
        for t in &topics {
            let info = self.cluster.topic(t, false).await?;
            for p in &info.partitions {
                query.push(((t.clone(), p.partition), LATEST_TIMESTAMP));
            }
        }
        let ends = offsets::list_offsets(&self.cluster, &query).await?;
        let mut out: Vec<PartitionLag> = query
            .into_iter()
            .map(|(tp, _)| {
                let end = ends.get(&tp).map_or(-1, |o| o.offset);
                let c = committed.get(&tp).map(|c| c.offset);
                PartitionLag {
                    lag: c.map(|c| (end - c).max(0)),
                    committed_offset: c,
                    log_end_offset: end,
                    topic: tp.0,
                    partition: tp.1,
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// Moves a group's committed offsets on `topic` (all partitions). The group should have no
    /// active members, as with Kafka's tool. Returns the new offsets.
    pub async fn reset_offsets(
        &self,
        group_id: &str,
        topic: &str,
        target: ResetTarget,
    ) -> Result<BTreeMap<i32, i64>> {
        let info = self.cluster.topic(topic, false).await?;
        let tps: Vec<TopicPartition> = info
            .partitions
            .iter()
            .map(|p| (topic.to_string(), p.partition))
            .collect();
        let plan = self.plan_reset(group_id, &tps, target).await?;
        self.commit_offsets(group_id, &plan).await?;
        Ok(plan.into_iter().map(|((_, p), o)| (p, o)).collect())
    }

    /// The offsets `reset_offsets` would commit on `tps` (clamped to each partition's earliest
    /// and latest offset), without committing anything: Kafka's `--dry-run`.
    pub async fn plan_reset(
        &self,
        group_id: &str,
        tps: &[TopicPartition],
        target: ResetTarget,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let q = |ts: i64| tps.iter().map(|tp| (tp.clone(), ts)).collect::<Vec<_>>();
        let earliest = offsets::list_offsets(&self.cluster, &q(EARLIEST_TIMESTAMP)).await?;
        let latest = offsets::list_offsets(&self.cluster, &q(LATEST_TIMESTAMP)).await?;
        let (_, coord) = group::find_coordinator(&self.cluster, group_id).await?;
        let current = offsets::fetch_committed(&coord, group_id, Some(tps)).await?;
        let by_time = match target {
            ResetTarget::Timestamp(ts) => offsets::list_offsets(&self.cluster, &q(ts)).await?,
            _ => HashMap::new(),
        };
        let mut out = BTreeMap::new();
        for tp in tps {
            let lo = earliest.get(tp).map_or(0, |o| o.offset);
            let hi = latest.get(tp).map_or(0, |o| o.offset);
            let want = match target {
                ResetTarget::Earliest => lo,
                ResetTarget::Latest => hi,
                ResetTarget::Offset(o) => o,
                ResetTarget::Timestamp(_) => by_time
                    .get(tp)
                    .map(|o| o.offset)
                    .filter(|o| *o >= 0)
                    .unwrap_or(hi),
                ResetTarget::ShiftBy(d) => current.get(tp).map_or(lo, |c| c.offset) + d,
            }
            .clamp(lo, hi);
            out.insert(tp.clone(), want);
        }
        Ok(out)
    }

    /// Commits `offsets` for a group as a standalone (non-member) client.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<()> {
        let (_, coord) = group::find_coordinator(&self.cluster, group_id).await?;
        let new: HashMap<TopicPartition, CommittedOffset> = offsets
            .iter()
            .map(|(tp, o)| {
                (
                    tp.clone(),
                    CommittedOffset {
                        offset: *o,
                        metadata: None,
                    },
                )
            })
            .collect();
        offsets::commit(&coord, group_id, -1, "", &new).await
    }
}

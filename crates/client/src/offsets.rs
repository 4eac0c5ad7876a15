//! Offset lookups and commits shared by the consumer and admin: ListOffsets, OffsetFetch,
//! OffsetCommit.
use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    BrokerId, GroupId, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::Cluster;
use crate::conn::Connection;
use crate::error::{ClientError, Result};

const LIST_OFFSETS_MAX_VERSION: i16 = 7;
const OFFSET_COMMIT_MAX_VERSION: i16 = 8;
/// v8+ batches groups; one group per request is all we need.
const OFFSET_FETCH_MAX_VERSION: i16 = 7;

/// ListOffsets special timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

/// A topic partition.
pub type TopicPartition = (String, i32);

/// Result of a ListOffsets lookup for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    /// -1 when no record matches (timestamp after the last record).
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// Looks up offsets by timestamp (or the special -1/-2/-3) on each partition's leader.
pub async fn list_offsets(
    cluster: &Cluster,
    query: &[(TopicPartition, i64)],
) -> Result<HashMap<TopicPartition, OffsetAndTimestamp>> {
    let mut by_leader: HashMap<i32, Vec<&(TopicPartition, i64)>> = HashMap::new();
    for q in query {
        let (leader, _) = cluster.leader_connection(&q.0.0, q.0.1).await?;
        by_leader.entry(leader).or_default().push(q);
    }
    let mut out = HashMap::new();
    for (leader, qs) in by_leader {
        let conn = cluster.broker(leader).await?;
        let version = conn.version_for::<ListOffsetsRequest>(LIST_OFFSETS_MAX_VERSION)?;
        let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
        for ((t, p), ts) in qs.iter().map(|q| (&q.0, q.1)) {
            topics.entry(t).or_default().push(
                ListOffsetsPartition::default()
                    .with_partition_index(*p)
                    .with_timestamp(ts)
                    .with_current_leader_epoch(-1),
            );
        }
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let r = conn.send(&req, version).await?;
        for t in r.topics {
            for p in t.partitions {
                ClientError::check(p.error_code, || {
                    format!("ListOffsets {}-{}", t.name.0, p.partition_index)
                })?;
                out.insert(
                    (t.name.0.to_string(), p.partition_index),
                    OffsetAndTimestamp {
                        offset: p.offset,
                        timestamp_ms: p.timestamp,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// A committed offset with its metadata string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub metadata: Option<String>,
}

/// Committed offsets of a group (for `partitions`, or every partition when `None`).
pub async fn fetch_committed(
    coord: &Connection,
    group_id: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<HashMap<TopicPartition, CommittedOffset>> {
    let version = coord.version_for::<OffsetFetchRequest>(OFFSET_FETCH_MAX_VERSION)?;
    let topics = partitions.map(|ps| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in ps {
            by_topic.entry(t).or_default().push(*p);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                    .with_partition_indexes(ps)
            })
            .collect()
    });
    if topics.is_none() && version < 2 {
        return Err(ClientError::InvalidArgument(
            "fetching all offsets needs OffsetFetch v2+".into(),
        ));
    }
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())))
        .with_topics(topics);
    let r = coord.send(&req, version).await?;
    ClientError::check(r.error_code, || format!("OffsetFetch for group {group_id}"))?;
    let mut out = HashMap::new();
    for t in r.topics {
        for p in t.partitions {
            ClientError::check(p.error_code, || {
                format!("OffsetFetch {}-{}", t.name.0, p.partition_index)
            })?;
            if p.committed_offset >= 0 {
                out.insert(
                    (t.name.0.to_string(), p.partition_index),
                    CommittedOffset {
                        offset: p.committed_offset,
                        metadata: p.metadata.map(|m| m.to_string()),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Commits offsets for a group. `generation_id` -1 and empty `member_id` commit as a
/// standalone (non-member) client, as Kafka allows.
pub async fn commit(
    coord: &Connection,
    group_id: &str,
    generation_id: i32,
    member_id: &str,
    offsets: &HashMap<TopicPartition, CommittedOffset>,
) -> Result<()> {
    let version = coord.version_for::<OffsetCommitRequest>(OFFSET_COMMIT_MAX_VERSION)?;
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((t, p), c) in offsets {
        by_topic.entry(t).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(c.offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_string(
                    c.metadata.clone().unwrap_or_default(),
                ))),
        );
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())))
        .with_generation_id_or_member_epoch(generation_id)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let r = coord.send(&req, version).await?;
    for t in r.topics {
        for p in t.partitions {
            ClientError::check(p.error_code, || {
                format!("OffsetCommit {}-{}", t.name.0, p.partition_index)
            })?;
        }
    }
    Ok(())
}

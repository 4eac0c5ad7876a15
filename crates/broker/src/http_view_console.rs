//! The dashboard's write actions and the broker page, on the broker side.
//!
//! Each action goes through the same checks as its Kafka request and fails with the error
//! code a Kafka client would get (shown by name in the UI): topic configs as
//! IncrementalAlterConfigs (`ReplicaManager::set_topic_configs`), partitions as
//! CreatePartitions, records as DeleteRecords (internal topics refused, as Kafka refuses
//! them), a message as Produce (the log validates the batch), group offsets as OffsetCommit /
//! OffsetDelete / DeleteGroups through the group coordinator.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::ResponseError;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use streamforge_coordinator as coord;
use streamforge_http::{
    BrokerDetail, ConfigChange, ConfigEntry, OffsetReset, OffsetTarget, ProduceMessage, Produced,
    ResetOffset, ViewError,
};

use crate::partition::{Acks, AppendParams, OffsetSpec, Partition};
use crate::replica_manager::{LookupError, TopicError, is_internal_topic};
use crate::{BrokerState, topic_config};

/// Kafka's error for `code`, with `message`; code 0 is not an error and must not get here.
pub(crate) fn kafka(code: i16, message: impl Into<String>) -> ViewError {
    match ResponseError::try_from_code(code) {
        Some(error) => ViewError::Kafka(error, message.into()),
        None => ViewError::Internal(format!("no error ({})", message.into())),
    }
}

/// A topic operation's error as Kafka reports it.
pub(crate) fn topic_error(e: TopicError, topic: &str) -> ViewError {
    match e {
        TopicError::UnknownTopic => {
            kafka(e.kafka_code(), format!("Topic '{topic}' does not exist."))
        }
        other => kafka(other.kafka_code(), other.to_string()),
    }
}

/// Partition `partition` of `topic` when hosted here; otherwise the error Produce would give.
fn hosted_partition(
    state: &BrokerState,
    topic: &str,
    partition: i32,
) -> Result<Arc<Partition>, ViewError> {
    state
        .replicas
        .lookup_partition(topic, partition)
        .map_err(|e| match e {
            LookupError::Unknown => kafka(
                e.kafka_code(),
                format!("Topic '{topic}' has no partition {partition}."),
            ),
            LookupError::NotHosted => kafka(
                e.kafka_code(),
                format!("Partition {partition} of topic '{topic}' is hosted by other brokers."),
            ),
        })
}

/// Applies set/delete changes to the topic's overrides like IncrementalAlterConfigs.
pub fn alter_configs(
    state: &BrokerState,
    topic: &str,
    changes: &[ConfigChange],
) -> Result<(), ViewError> {
    let current = state
        .replicas
        .topic(topic)
        .ok_or_else(|| topic_error(TopicError::UnknownTopic, topic))?;
    let mut configs: BTreeMap<String, String> = current.configs.clone();
    for change in changes {
        if topic_config::find(&change.name).is_none() {
            return Err(kafka(
                ResponseError::InvalidConfig.code(),
                format!("Unknown topic config name: {}", change.name),
            ));
        }
        match &change.value {
            Some(v) => configs.insert(change.name.clone(), v.clone()),
            None => configs.remove(&change.name),
        };
    }
    state
        .replicas
        .set_topic_configs(topic, configs, false)
        .map_err(|e| topic_error(e, topic))
}

pub fn create_partitions(state: &BrokerState, topic: &str, total: i32) -> Result<(), ViewError> {
    state
        .replicas
        .create_partitions(topic, total, false)
        .map_err(|e| topic_error(e, topic))
}

/// DeleteRecords of one partition below `before_offset` (-1: the high watermark). Returns the
/// new log start offset.
pub async fn delete_records(
    state: &BrokerState,
    topic: &str,
    partition: i32,
    before_offset: i64,
) -> Result<i64, ViewError> {
    if is_internal_topic(topic) {
        return Err(kafka(
            ResponseError::InvalidTopicException.code(),
            format!("Cannot delete records of internal topic {topic}"),
        ));
    }
    let part = hosted_partition(state, topic, partition)?;
    part.delete_records(before_offset)
        .await
        .map_err(|e| kafka(e.kafka_code(), e.to_string()))
}

/// Kafka's default partitioner for a keyed record: murmur2 of the key, made positive.
fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    ((murmur2(key) as u32 & 0x7fff_ffff) as usize % partitions.max(1)) as i32
}

/// Kafka's `Utils.murmur2`.
fn murmur2(key: &[u8]) -> i32 {
    let (seed, m, r) = (0x9747_b28c_u32, 0x5bd1_e995_u32, 24);
    let mut h = seed ^ key.len() as u32;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m) ^ k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(m);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h as i32
}

/// Appends one message like a Produce request with acks=1 (the log validates the batch).
pub fn produce(state: &BrokerState, message: ProduceMessage) -> Result<Produced, ViewError> {
    let topic = &message.topic;
    if is_internal_topic(topic) {
        return Err(kafka(
            ResponseError::InvalidTopicException.code(),
            format!("Cannot append to internal topic {topic}"),
        ));
    }
    let t = state
        .replicas
        .topic(topic)
        .ok_or_else(|| topic_error(TopicError::UnknownTopic, topic))?;
    let partition = match (message.partition, &message.key) {
        (Some(p), _) => p,
        (None, Some(key)) => partition_for_key(key, t.partition_count() as usize),
        (None, None) => 0,
    };
    let part = hosted_partition(state, topic, partition)?;
    let timestamp_ms = crate::util::now_ms();
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: timestamp_ms,
        key: message.key,
        value: message.value,
        headers: message
            .headers
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, std::iter::once(&record), &options)
        .map_err(|e| ViewError::Internal(format!("encoding the message: {e:#}")))?;
    let size = buf.len() as u64;
    let info = part
        .append(&mut buf, AppendParams { acks: Acks::All })
        .map_err(|e| kafka(e.kafka_code(), e.to_string()))?;
    metrics::counter!("streamforge_messages_in_total", "topic" => topic.clone()).increment(1);
    metrics::counter!("streamforge_bytes_in_total", "topic" => topic.clone()).increment(size);
    Ok(Produced {
        partition,
        offset: info.first_offset,
        timestamp_ms,
    })
}

/// Kafka's rule for the consumer-groups tool and AdminClient offset changes: only when no
/// member is active (Empty, or a group that only ever stored offsets).
fn require_inactive(state: &BrokerState, group: &str) -> Result<(), ViewError> {
    let described = state
        .groups
        .read(|c| c.describe_group(group, crate::http_view_groups::DESCRIBE_VERSION));
    match described.state.as_str() {
        "Empty" | "Dead" => Ok(()),
        other => Err(kafka(
            ResponseError::NonEmptyGroup.code(),
            format!(
                "Offsets can only be changed if the group '{group}' is inactive, but the current state is {other}. Stop its consumers first."
            ),
        )),
    }
}

/// Where `target` puts a group's position on one partition (clamped like Kafka's tool).
fn resolve_target(part: &Partition, target: OffsetTarget) -> Result<i64, ViewError> {
    let offsets = part
        .offsets()
        .map_err(|e| kafka(e.kafka_code(), e.to_string()))?;
    let (start, hw) = (offsets.log_start_offset, offsets.high_watermark);
    let by_time = match target {
        OffsetTarget::Timestamp(ts) => part
            .list_local_offset(OffsetSpec::Timestamp(ts))
            .map(|(_, offset)| (offset >= 0).then_some(offset)),
        _ => Ok(None),
    };
    Ok(match target {
        OffsetTarget::Earliest => start,
        OffsetTarget::Latest => hw,
        OffsetTarget::Offset(o) => o.clamp(start, hw),
        OffsetTarget::Timestamp(_) => by_time
            .map_err(|e| kafka(e.kafka_code(), e.to_string()))?
            .unwrap_or(hw),
    })
}

/// Commits new positions for an inactive group, like `kafka-consumer-groups --reset-offsets
/// --execute` (an OffsetCommit with generation -1 and no member).
pub fn reset_offsets(
    state: &BrokerState,
    reset: &OffsetReset,
) -> Result<Vec<ResetOffset>, ViewError> {
    require_inactive(state, &reset.group)?;
    let topic = state
        .replicas
        .topic(&reset.topic)
        .ok_or_else(|| topic_error(TopicError::UnknownTopic, &reset.topic))?;
    let indexes: Vec<i32> = if reset.partitions.is_empty() {
        // Every partition: one hosted elsewhere fails the reset rather than being skipped.
        (0..topic.partition_count()).collect()
    } else {
        reset.partitions.clone()
    };
    let mut partitions = Vec::with_capacity(indexes.len());
    for index in indexes {
        let part = hosted_partition(state, &reset.topic, index)?;
        partitions.push(coord::CommitPartition {
            partition: index,
            offset: resolve_target(&part, reset.target)?,
            leader_epoch: -1,
            metadata: None,
        });
    }
    let planned: Vec<ResetOffset> = partitions
        .iter()
        .map(|p| ResetOffset {
            topic: reset.topic.clone(),
            partition: p.partition,
            offset: p.offset,
        })
        .collect();
    let request = coord::OffsetCommitRequest {
        group_id: reset.group.clone(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        api_version: crate::http_view_groups::COMMIT_VERSION,
        topics: vec![coord::CommitTopic {
            name: reset.topic.clone(),
            partitions,
        }],
    };
    let group_id = request.group_id.clone();
    let (results, stored) = state
        .groups
        .with_group(&group_id, |c, now, out| c.commit_offsets(now, request, out))
        .map_err(|code| {
            kafka(
                code,
                "This broker does not coordinate the group.".to_string(),
            )
        })?;
    let durable = stored.is_ok();
    if let Some((p, code)) = results
        .iter()
        .flat_map(|(_, ps)| ps.iter())
        .find(|(_, code)| ResponseError::try_from_code(*code).is_some())
    {
        return Err(kafka(
            *code,
            format!("Committing the offset of partition {p} failed."),
        ));
    }
    if !durable {
        return Err(kafka(
            ResponseError::CoordinatorNotAvailable.code(),
            "The new offsets were not stored in __consumer_offsets; try again.",
        ));
    }
    Ok(planned)
}

/// OffsetDelete of one topic's committed offsets (all the group has there when `partitions`
/// is empty).
pub fn delete_group_offsets(
    state: &BrokerState,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Result<(), ViewError> {
    let partitions: Vec<i32> = if partitions.is_empty() {
        let fetched = state.groups.read(|c| c.fetch_offsets(group, None));
        fetched
            .topics
            .iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions.iter().map(|p| p.partition))
            .collect()
    } else {
        partitions.to_vec()
    };
    let known = vec![(topic.to_string(), partitions)];
    let result = state
        .groups
        .with_coordinator(|c, now, out| c.delete_offsets(now, group, &known, out));
    if ResponseError::try_from_code(result.error_code).is_some() {
        return Err(kafka(
            result.error_code,
            group_error_message(result.error_code, group),
        ));
    }
    for (_, ps) in &result.topics {
        if let Some((p, code)) = ps
            .iter()
            .find(|(_, c)| ResponseError::try_from_code(*c).is_some())
        {
            let why = if *code == ResponseError::GroupSubscribedToTopic.code() {
                format!(
                    "The group '{group}' is subscribed to '{topic}' (partition {p}); its offsets there cannot be deleted while it consumes the topic."
                )
            } else {
                format!("Deleting the offset of {topic}-{p} failed.")
            };
            return Err(kafka(*code, why));
        }
    }
    Ok(())
}

fn group_error_message(code: i16, group: &str) -> String {
    if code == ResponseError::GroupIdNotFound.code() {
        format!("Group '{group}' does not exist.")
    } else if code == ResponseError::NonEmptyGroup.code() {
        format!("The group '{group}' is not empty: stop its consumers first.")
    } else {
        format!("The request for group '{group}' failed.")
    }
}

/// DeleteGroups of one group (must be empty).
pub fn delete_group(state: &BrokerState, group: &str) -> Result<(), ViewError> {
    let code = state
        .groups
        .with_coordinator(|c, now, out| c.delete_group(now, group, out));
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(_) => Err(kafka(code, group_error_message(code, group))),
    }
}

/// The broker page: version, data directory with its disk use, listeners, configs.
pub fn broker_detail(state: &BrokerState, started_at_ms: i64) -> BrokerDetail {
    let data_dir = state.replicas.data_dir().to_path_buf();
    let log_bytes = state
        .replicas
        .all_partitions()
        .iter()
        .filter_map(|p| p.size_bytes().ok())
        .sum();
    let disk = rustix::fs::statvfs(&data_dir).ok();
    BrokerDetail {
        node_id: state.node_id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at_ms,
        data_dir: data_dir.display().to_string(),
        log_bytes,
        disk_total_bytes: disk.as_ref().map(|d| d.f_blocks.saturating_mul(d.f_frsize)),
        disk_free_bytes: disk.as_ref().map(|d| d.f_bavail.saturating_mul(d.f_frsize)),
        listeners: vec![
            format!("kafka {}", state.config.listen),
            format!(
                "advertised {}:{}",
                state.advertised_host, state.advertised_port
            ),
        ],
        configs: crate::handlers::configs::broker_config_values(state)
            .into_iter()
            .map(|(name, value)| ConfigEntry {
                name,
                value: Some(value),
                source: "STATIC_BROKER_CONFIG".to_string(),
                is_default: false,
                sensitive: false,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2 vectors.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"abc"), 479470107);
        assert!((0..3).contains(&partition_for_key(b"key-1", 3)));
    }
}

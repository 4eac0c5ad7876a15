//! The upgrade from a release before the metadata log: its topic registry (`topics.json` +
//! `topics.journal`, read with [`TopicStore`]) and producer-id block file become the first batch
//! of the metadata log, once. Every topic keeps its id, partition count and config overrides;
//! each partition is led by this broker with the leader epoch the logs were written in
//! ([`LEADER_EPOCH`]); the next producer-id block starts where the old file said, so no id is
//! handed out twice. Reading compacts the old journal into `topics.json` (as the earlier release
//! did on every start); after that the old files are neither written nor read again (an existing
//! metadata log is never re-imported).

use std::path::Path;

use streamforge_metadata::records::{
    ConfigRecord, ConfigResource, PartitionRecord, ProducerIdsRecord, Record, TopicRecord,
};
use uuid::Uuid;

use crate::partition::LEADER_EPOCH;
use crate::producer_ids::LEGACY_BLOCK_FILE;
use crate::topic_store::TopicStore;

/// The records that rebuild an earlier release's registry in `data_dir` (empty when there is
/// none: a fresh data dir).
pub fn legacy_records(data_dir: &Path, node_id: i32) -> std::io::Result<Vec<Record>> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut records = Vec::new();
    for topic in TopicStore::new(data_dir).load()? {
        let topic_id = Uuid::parse_str(&topic.id)
            .map_err(|e| bad(format!("topic {}: bad id: {e}", topic.name)))?;
        records.push(Record::Topic(TopicRecord {
            name: topic.name.clone(),
            topic_id,
        }));
        for partition in 0..topic.partitions.max(0) {
            records.push(Record::Partition(PartitionRecord {
                topic_id,
                partition,
                replicas: vec![node_id],
                isr: vec![node_id],
                leader: node_id,
                leader_epoch: LEADER_EPOCH,
                partition_epoch: 0,
            }));
        }
        for (name, value) in topic.configs {
            records.push(Record::Config(ConfigRecord {
                resource: ConfigResource::Topic(topic.name.clone()),
                name,
                value: Some(value),
            }));
        }
    }
    match std::fs::read_to_string(data_dir.join(LEGACY_BLOCK_FILE)) {
        Ok(text) => {
            let next: i64 = text
                .trim()
                .parse()
                .map_err(|_| bad("bad producer-id-block file".into()))?;
            if next > 0 {
                records.push(Record::ProducerIds(ProducerIdsRecord {
                    broker_id: node_id,
                    broker_epoch: 0,
                    next_producer_id: next,
                }));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(records)
}

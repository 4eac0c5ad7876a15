//! Snapshots: an image written as the records that rebuild it, and loaded back by replaying them.
//!
//! Encoding: `[offset: i64][epoch: i32][count: u32]` then `count` times `[len: u32][record]`.
//! Counts and lengths are checked against what is left before anything is allocated.

use crate::image::{ApplyError, LogPosition, MetadataImage};
use crate::records::{
    ConfigRecord, PartitionElr, PartitionReassignment, PartitionRecord, Reader, Record,
    RecordError, RegisterBroker, TopicRecord, decode_record_list, encode_record_list,
};

/// An image as records, with the log position it reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub position: LogPosition,
    pub records: Vec<Record>,
}

/// Why a snapshot could not be decoded or loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot encoding: {0}")]
    Record(#[from] RecordError),
    #[error("snapshot record {index} does not apply: {error}")]
    Apply { index: usize, error: ApplyError },
    #[error("{0} trailing bytes after the snapshot")]
    Trailing(usize),
}

impl MetadataImage {
    /// The records that rebuild this image: brokers, topics with their partitions (each
    /// followed by its reassignment when one is in progress and its `PartitionElr` when it has
    /// KIP-966 state) and configs, then the producer-id block.
    pub fn snapshot(&self) -> Snapshot {
        let mut records = Vec::new();
        for b in self.brokers().values() {
            records.push(Record::RegisterBroker(RegisterBroker {
                broker_id: b.id,
                broker_epoch: b.epoch,
                incarnation_id: b.incarnation_id,
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
            }));
        }
        for t in self.topics() {
            records.push(Record::Topic(TopicRecord {
                name: t.name.clone(),
                topic_id: t.id,
            }));
            for (&partition, p) in &t.partitions {
                records.push(Record::Partition(PartitionRecord {
                    topic_id: t.id,
                    partition,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                }));
                if p.is_reassigning() {
                    records.push(Record::PartitionReassignment(PartitionReassignment {
                        topic_id: t.id,
                        partition,
                        adding: p.adding_replicas.clone(),
                        removing: p.removing_replicas.clone(),
                    }));
                }
                if !p.elr.is_empty() || !p.last_known_elr.is_empty() {
                    records.push(Record::PartitionElr(PartitionElr {
                        topic_id: t.id,
                        partition,
                        elr: p.elr.clone(),
                        last_known_elr: p.last_known_elr.clone(),
                    }));
                }
            }
        }
        for (resource, entries) in self.configs() {
            for (name, value) in entries {
                records.push(Record::Config(ConfigRecord {
                    resource: resource.clone(),
                    name: name.clone(),
                    value: Some(value.clone()),
                }));
            }
        }
        if let Some(p) = self.producer_ids_record() {
            records.push(Record::ProducerIds(p.clone()));
        }
        Snapshot {
            position: self.position(),
            records,
        }
    }

    /// Rebuild an image from a snapshot.
    pub fn load(snapshot: &Snapshot) -> Result<MetadataImage, SnapshotError> {
        let mut image = MetadataImage::empty();
        for (index, record) in snapshot.records.iter().enumerate() {
            let at = LogPosition {
                offset: index as i64,
                epoch: snapshot.position.epoch,
            };
            image = image
                .apply(record, at)
                .map_err(|error| SnapshotError::Apply { index, error })?
                .0;
        }
        Ok(image.with_position(snapshot.position))
    }
}

impl Snapshot {
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.position.offset.to_be_bytes());
        out.extend_from_slice(&self.position.epoch.to_be_bytes());
        encode_record_list(&mut out, &self.records)?;
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        let mut r = Reader(bytes);
        let offset = r.i64()?;
        let epoch = r.u32()? as i32;
        let records = decode_record_list(&mut r)?;
        if !r.0.is_empty() {
            return Err(SnapshotError::Trailing(r.0.len()));
        }
        Ok(Snapshot {
            position: LogPosition { offset, epoch },
            records,
        })
    }
}

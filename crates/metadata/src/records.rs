//! The metadata log's records and their binary encoding.
//!
//! A record is `[type: u8][version: u8][body]`. Integers are big-endian, strings are a `u16`
//! length and UTF-8 bytes, optional values a presence byte, lists a `u16` count. Every length is
//! checked against a named bound before anything is allocated, and decoding returns
//! [`RecordError`] for every malformed input: it never panics, whatever the bytes.
//!
//! The record set follows KRaft's (`RegisterBrokerRecord`, `FenceBrokerRecord`, `TopicRecord`,
//! `PartitionRecord`, `PartitionChangeRecord`, `ConfigRecord`, `ProducerIdsRecord`,
//! `RemoveTopicRecord`), with only the fields this broker uses. Epochs are not carried by
//! `PartitionChange`: replaying the change derives them, so every replica of the log computes the
//! same epochs.

use bytes::{Buf, BufMut};
use uuid::Uuid;

/// A broker's (node's) id.
pub type BrokerId = i32;

/// "No leader" in a partition's `leader` field, as in Kafka.
pub const NO_LEADER: BrokerId = -1;
/// Bound on one encoded record.
pub const RECORD_BYTES_MAX: usize = 1024 * 1024;
/// Bound on a replica or ISR list.
pub const REPLICAS_MAX: usize = 1024;
/// Bound on a broker's listener list.
pub const ENDPOINTS_MAX: usize = 64;
/// The encoding version written by this build (and the highest one it reads).
pub const RECORD_VERSION: u8 = 0;

/// A broker listener (`name://host:port`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// A broker joined (or re-joined with a new incarnation). Brokers register fenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBroker {
    pub broker_id: BrokerId,
    /// Grows with every registration; requests carrying an older one are stale.
    pub broker_epoch: i64,
    /// Random per process start: tells a restart from a duplicate registration.
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// A topic is born with its id; its partitions follow as [`PartitionRecord`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    pub name: String,
    pub topic_id: Uuid,
}

/// A partition's full state (on creation and in snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRecord {
    pub topic_id: Uuid,
    pub partition: i32,
    /// The assignment; the first replica is the preferred leader.
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// A change to a partition. `None` fields are unchanged. Replaying it bumps the partition epoch
/// always, and the leader epoch when the leader changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader: Option<BrokerId>,
    pub isr: Option<Vec<BrokerId>>,
    pub replicas: Option<Vec<BrokerId>>,
}

/// The replicas a partition's reassignment adds and removes (Kafka's `addingReplicas` and
/// `removingReplicas` of `PartitionRecord` / `PartitionChangeRecord`, here a record of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReassignment {
    pub topic_id: Uuid,
    pub partition: i32,
    /// In the replicas, not yet in the ISR when the reassignment started.
    pub adding: Vec<BrokerId>,
    /// In the replicas until the reassignment completes.
    pub removing: Vec<BrokerId>,
}

/// KIP-966: a partition's eligible leader replicas and its last known leader, as a whole.
/// Written in the same batch right after the `Partition` / `PartitionChange` it belongs to (and
/// after a partition's `Partition` record in snapshots, when not empty), so the encoding of
/// those records stays as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionElr {
    pub topic_id: Uuid,
    pub partition: i32,
    /// Replicas outside the ISR that hold every committed record: they left the ISR while it
    /// was below `min.insync.replicas`, when the high watermark could no longer pass them.
    pub elr: Vec<BrokerId>,
    /// The last leader, kept when the ISR became empty: the replica to recover with when the
    /// ISR and ELR are both empty (an unclean election).
    pub last_known_elr: Vec<BrokerId>,
}

/// What a config entry belongs to.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum ConfigResource {
    Topic(String),
    Broker(BrokerId),
}

/// Set (`Some`) or delete (`None`) one config entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRecord {
    pub resource: ConfigResource,
    pub name: String,
    pub value: Option<String>,
}

/// A block of producer ids was handed to `broker_id`; the next block starts at
/// `next_producer_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerIdsRecord {
    pub broker_id: BrokerId,
    pub broker_epoch: i64,
    pub next_producer_id: i64,
}

/// One entry of the metadata log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    RegisterBroker(RegisterBroker),
    FenceBroker {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    UnfenceBroker {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    Topic(TopicRecord),
    Partition(PartitionRecord),
    PartitionChange(PartitionChange),
    Config(ConfigRecord),
    ProducerIds(ProducerIdsRecord),
    RemoveTopic {
        topic_id: Uuid,
    },
    /// A partition's reassignment (KIP-455) as of the record before it in the same batch (or
    /// its `Partition` record in a snapshot): the replicas being added and removed. Empty lists
    /// mean none is in progress.
    PartitionReassignment(PartitionReassignment),
    PartitionElr(PartitionElr),
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unknown record type {0}")]
    UnknownType(u8),
    #[error("record type {kind} version {version} is newer than this build reads")]
    UnsupportedVersion { kind: u8, version: u8 },
    #[error("{what} length {len} exceeds the bound {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("string is not UTF-8")]
    InvalidUtf8,
    #[error("invalid tag {tag} for {what}")]
    InvalidTag { what: &'static str, tag: u8 },
    #[error("{0} trailing bytes after the record")]
    Trailing(usize),
}

mod kind {
    pub const REGISTER_BROKER: u8 = 0;
    pub const FENCE_BROKER: u8 = 1;
    pub const UNFENCE_BROKER: u8 = 2;
    pub const TOPIC: u8 = 3;
    pub const PARTITION: u8 = 4;
    pub const PARTITION_CHANGE: u8 = 5;
    pub const CONFIG: u8 = 6;
    pub const PRODUCER_IDS: u8 = 7;
    pub const REMOVE_TOPIC: u8 = 8;
    pub const PARTITION_REASSIGNMENT: u8 = 9;
    pub const PARTITION_ELR: u8 = 10;

    /// Kinds this build reads.
    pub fn known(kind: u8) -> bool {
        kind <= PARTITION_REASSIGNMENT || kind == PARTITION_ELR
    }
}

impl Record {
    fn kind(&self) -> u8 {
        match self {
            Record::RegisterBroker(_) => kind::REGISTER_BROKER,
            Record::FenceBroker { .. } => kind::FENCE_BROKER,
            Record::UnfenceBroker { .. } => kind::UNFENCE_BROKER,
            Record::Topic(_) => kind::TOPIC,
            Record::Partition(_) => kind::PARTITION,
            Record::PartitionChange(_) => kind::PARTITION_CHANGE,
            Record::Config(_) => kind::CONFIG,
            Record::ProducerIds(_) => kind::PRODUCER_IDS,
            Record::RemoveTopic { .. } => kind::REMOVE_TOPIC,
            Record::PartitionReassignment(_) => kind::PARTITION_REASSIGNMENT,
            Record::PartitionElr(_) => kind::PARTITION_ELR,
        }
    }

    /// Encode; fails only when a field exceeds its bound (the controller never builds such a
    /// record, but a caller of this library might).
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        let mut out = Vec::with_capacity(64);
        out.put_u8(self.kind());
        out.put_u8(RECORD_VERSION);
        self.encode_body(&mut out)?;
        check_len("record", out.len(), RECORD_BYTES_MAX)?;
        Ok(out)
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), RecordError> {
        match self {
            Record::RegisterBroker(r) => {
                out.put_i32(r.broker_id);
                out.put_i64(r.broker_epoch);
                out.put_slice(r.incarnation_id.as_bytes());
                put_list(out, "endpoints", &r.endpoints, ENDPOINTS_MAX, |out, e| {
                    put_str(out, &e.name)?;
                    put_str(out, &e.host)?;
                    out.put_u16(e.port);
                    Ok(())
                })?;
                put_opt(out, r.rack.as_deref(), put_str)?;
                out.put_u8(u8::from(r.fenced));
            }
            Record::FenceBroker {
                broker_id,
                broker_epoch,
            }
            | Record::UnfenceBroker {
                broker_id,
                broker_epoch,
            } => {
                out.put_i32(*broker_id);
                out.put_i64(*broker_epoch);
            }
            Record::Topic(t) => {
                put_str(out, &t.name)?;
                out.put_slice(t.topic_id.as_bytes());
            }
            Record::Partition(p) => {
                out.put_slice(p.topic_id.as_bytes());
                out.put_i32(p.partition);
                put_ids(out, &p.replicas)?;
                put_ids(out, &p.isr)?;
                out.put_i32(p.leader);
                out.put_i32(p.leader_epoch);
                out.put_i32(p.partition_epoch);
            }
            Record::PartitionChange(c) => {
                out.put_slice(c.topic_id.as_bytes());
                out.put_i32(c.partition);
                put_opt(out, c.leader.as_ref(), |out, l| {
                    out.put_i32(*l);
                    Ok(())
                })?;
                put_opt(out, c.isr.as_deref(), put_ids)?;
                put_opt(out, c.replicas.as_deref(), put_ids)?;
            }
            Record::Config(c) => {
                match &c.resource {
                    ConfigResource::Topic(name) => {
                        out.put_u8(0);
                        put_str(out, name)?;
                    }
                    ConfigResource::Broker(id) => {
                        out.put_u8(1);
                        out.put_i32(*id);
                    }
                }
                put_str(out, &c.name)?;
                put_opt(out, c.value.as_deref(), put_str)?;
            }
            Record::ProducerIds(p) => {
                out.put_i32(p.broker_id);
                out.put_i64(p.broker_epoch);
                out.put_i64(p.next_producer_id);
            }
            Record::RemoveTopic { topic_id } => out.put_slice(topic_id.as_bytes()),
            Record::PartitionReassignment(r) => {
                out.put_slice(r.topic_id.as_bytes());
                out.put_i32(r.partition);
                put_ids(out, &r.adding)?;
                put_ids(out, &r.removing)?;
            }
            Record::PartitionElr(e) => {
                out.put_slice(e.topic_id.as_bytes());
                out.put_i32(e.partition);
                put_ids(out, &e.elr)?;
                put_ids(out, &e.last_known_elr)?;
            }
        }
        Ok(())
    }

    /// Decode exactly one record from `bytes` (no trailing bytes allowed).
    pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
        check_len("record", bytes.len(), RECORD_BYTES_MAX)?;
        let mut r = Reader(bytes);
        let kind = r.u8()?;
        let version = r.u8()?;
        if !kind::known(kind) {
            return Err(RecordError::UnknownType(kind));
        }
        if version > RECORD_VERSION {
            return Err(RecordError::UnsupportedVersion { kind, version });
        }
        let record = decode_body(kind, &mut r)?;
        if !r.0.is_empty() {
            return Err(RecordError::Trailing(r.0.len()));
        }
        Ok(record)
    }
}

fn decode_body(kind: u8, r: &mut Reader<'_>) -> Result<Record, RecordError> {
    Ok(match kind {
        kind::REGISTER_BROKER => Record::RegisterBroker(RegisterBroker {
            broker_id: r.i32()?,
            broker_epoch: r.i64()?,
            incarnation_id: r.uuid()?,
            endpoints: r.list("endpoints", ENDPOINTS_MAX, |r| {
                Ok(Endpoint {
                    name: r.string()?,
                    host: r.string()?,
                    port: r.u16()?,
                })
            })?,
            rack: r.opt(Reader::string)?,
            fenced: r.bool()?,
        }),
        kind::FENCE_BROKER => Record::FenceBroker {
            broker_id: r.i32()?,
            broker_epoch: r.i64()?,
        },
        kind::UNFENCE_BROKER => Record::UnfenceBroker {
            broker_id: r.i32()?,
            broker_epoch: r.i64()?,
        },
        kind::TOPIC => Record::Topic(TopicRecord {
            name: r.string()?,
            topic_id: r.uuid()?,
        }),
        kind::PARTITION => Record::Partition(PartitionRecord {
            topic_id: r.uuid()?,
            partition: r.i32()?,
            replicas: r.ids()?,
            isr: r.ids()?,
            leader: r.i32()?,
            leader_epoch: r.i32()?,
            partition_epoch: r.i32()?,
        }),
        kind::PARTITION_CHANGE => Record::PartitionChange(PartitionChange {
            topic_id: r.uuid()?,
            partition: r.i32()?,
            leader: r.opt(Reader::i32)?,
            isr: r.opt(Reader::ids)?,
            replicas: r.opt(Reader::ids)?,
        }),
        kind::CONFIG => {
            let resource = match r.u8()? {
                0 => ConfigResource::Topic(r.string()?),
                1 => ConfigResource::Broker(r.i32()?),
                tag => {
                    return Err(RecordError::InvalidTag {
                        what: "config resource",
                        tag,
                    });
                }
            };
            Record::Config(ConfigRecord {
                resource,
                name: r.string()?,
                value: r.opt(Reader::string)?,
            })
        }
        kind::PRODUCER_IDS => Record::ProducerIds(ProducerIdsRecord {
            broker_id: r.i32()?,
            broker_epoch: r.i64()?,
            next_producer_id: r.i64()?,
        }),
        kind::REMOVE_TOPIC => Record::RemoveTopic {
            topic_id: r.uuid()?,
        },
        kind::PARTITION_REASSIGNMENT => Record::PartitionReassignment(PartitionReassignment {
            topic_id: r.uuid()?,
            partition: r.i32()?,
            adding: r.ids()?,
            removing: r.ids()?,
        }),
        kind::PARTITION_ELR => Record::PartitionElr(PartitionElr {
            topic_id: r.uuid()?,
            partition: r.i32()?,
            elr: r.ids()?,
            last_known_elr: r.ids()?,
        }),
        _ => return Err(RecordError::UnknownType(kind)),
    })
}

fn check_len(what: &'static str, len: usize, max: usize) -> Result<(), RecordError> {
    if len > max {
        return Err(RecordError::TooLong { what, len, max });
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), RecordError> {
    check_len("string", s.len(), usize::from(u16::MAX))?;
    out.put_u16(s.len() as u16);
    out.put_slice(s.as_bytes());
    Ok(())
}

fn put_ids(out: &mut Vec<u8>, ids: &[BrokerId]) -> Result<(), RecordError> {
    put_list(out, "replica list", ids, REPLICAS_MAX, |out, id| {
        out.put_i32(*id);
        Ok(())
    })
}

fn put_list<T>(
    out: &mut Vec<u8>,
    what: &'static str,
    items: &[T],
    max: usize,
    mut put: impl FnMut(&mut Vec<u8>, &T) -> Result<(), RecordError>,
) -> Result<(), RecordError> {
    check_len(what, items.len(), max)?;
    out.put_u16(items.len() as u16);
    items.iter().try_for_each(|item| put(out, item))
}

fn put_opt<T: ?Sized>(
    out: &mut Vec<u8>,
    value: Option<&T>,
    put: impl FnOnce(&mut Vec<u8>, &T) -> Result<(), RecordError>,
) -> Result<(), RecordError> {
    match value {
        None => {
            out.put_u8(0);
            Ok(())
        }
        Some(v) => {
            out.put_u8(1);
            put(out, v)
        }
    }
}

/// The smallest encoding of one record (type + version), used to bound a list's `count`.
const RECORD_BYTES_MIN: usize = 2;

/// Appends `[count: u32]` then `count` × `[len: u32][record]`: a list of records as the
/// snapshot and the quorum logs store it.
pub(crate) fn encode_record_list(out: &mut Vec<u8>, records: &[Record]) -> Result<(), RecordError> {
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for record in records {
        let bytes = record.encode()?;
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    Ok(())
}

/// Reads a list written by [`encode_record_list`]: a record over [`RECORD_BYTES_MAX`] is an
/// error, and a corrupt `count` allocates no more than the bytes left could hold.
pub(crate) fn decode_record_list(r: &mut Reader) -> Result<Vec<Record>, RecordError> {
    let count = r.u32()? as usize;
    let mut records = Vec::with_capacity(count.min(r.0.len() / (4 + RECORD_BYTES_MIN)));
    for _ in 0..count {
        let len = r.u32()? as usize;
        if len > RECORD_BYTES_MAX {
            return Err(RecordError::TooLong {
                what: "record",
                len,
                max: RECORD_BYTES_MAX,
            });
        }
        records.push(Record::decode(r.bytes(len)?)?);
    }
    Ok(records)
}

/// A bounds-checked cursor: every read returns `Truncated` instead of panicking.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl Reader<'_> {
    fn need(&self, n: usize) -> Result<(), RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Truncated {
                needed: n - self.0.len(),
            });
        }
        Ok(())
    }
    pub(crate) fn u8(&mut self) -> Result<u8, RecordError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }
    fn bool(&mut self) -> Result<bool, RecordError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(RecordError::InvalidTag { what: "bool", tag }),
        }
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        self.need(2)?;
        Ok(self.0.get_u16())
    }
    pub(crate) fn u32(&mut self) -> Result<u32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    pub(crate) fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    fn uuid(&mut self) -> Result<Uuid, RecordError> {
        Ok(Uuid::from_bytes(
            self.bytes(16)?
                .try_into()
                .map_err(|_| RecordError::Truncated { needed: 16 })?,
        ))
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&[u8], RecordError> {
        self.need(n)?;
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn string(&mut self) -> Result<String, RecordError> {
        let len = usize::from(self.u16()?);
        let bytes = self.bytes(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError::InvalidUtf8)
    }
    fn ids(&mut self) -> Result<Vec<BrokerId>, RecordError> {
        self.list("replica list", REPLICAS_MAX, Reader::i32)
    }
    fn opt<T>(
        &mut self,
        get: impl FnOnce(&mut Self) -> Result<T, RecordError>,
    ) -> Result<Option<T>, RecordError> {
        match self.u8()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            tag => Err(RecordError::InvalidTag {
                what: "option",
                tag,
            }),
        }
    }
    fn list<T>(
        &mut self,
        what: &'static str,
        max: usize,
        mut get: impl FnMut(&mut Self) -> Result<T, RecordError>,
    ) -> Result<Vec<T>, RecordError> {
        let len = usize::from(self.u16()?);
        check_len(what, len, max)?;
        let mut items = Vec::with_capacity(len.min(self.0.len()));
        for _ in 0..len {
            items.push(get(self)?);
        }
        Ok(items)
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;

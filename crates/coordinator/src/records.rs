//! The `__consumer_offsets` record formats and replay.
//!
//! Keys and values use Kafka's schemas so that tools reading the topic see familiar shapes:
//! - offset commit: key v1 `(group, topic, partition)`, value v3
//!   `(offset, leader_epoch, metadata, commit_timestamp)` or v1 (with `expire_timestamp`) when
//!   the commit carried a retention time;
//! - group metadata: key v2 `(group)`, value v3 `(protocol_type, generation, protocol, leader,
//!   current_state_timestamp, members[])`;
//! - a null value (tombstone) deletes the key.
//!
//! Replaying the records of a partition in order rebuilds the groups it stores.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::coordinator::GroupCoordinator;
use crate::group::{CommittedOffset, Group, GroupState, Member};
use crate::types::Protocol;

/// One record of `__consumer_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsRecord {
    pub key: Bytes,
    /// `None` is a tombstone.
    pub value: Option<Bytes>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordsError {
    #[error("record truncated while reading {0}")]
    Truncated(&'static str),
    #[error("invalid {0}")]
    Invalid(&'static str),
    #[error("unsupported {what} version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("record batch: {0}")]
    Batch(String),
}

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const OFFSET_VALUE_VERSION_WITH_EXPIRY: i16 = 1;
const GROUP_VALUE_VERSION: i16 = 3;
/// Bounds the members decoded from one group record.
const GROUP_RECORD_MEMBERS_MAX: i32 = 100_000;

/// What a key identifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

impl OffsetsKey {
    pub fn group(&self) -> &str {
        match self {
            OffsetsKey::Offset { group, .. } | OffsetsKey::Group { group } => group,
        }
    }
}

pub(crate) fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(2 + 2 + group.len() + 2 + topic.len() + 4);
    buf.put_i16(OFFSET_KEY_VERSION);
    put_str(&mut buf, group);
    put_str(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

pub(crate) fn group_key(group: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + group.len());
    buf.put_i16(GROUP_KEY_VERSION);
    put_str(&mut buf, group);
    buf.freeze()
}

pub(crate) fn offset_commit_record(
    group: &str,
    topic: &str,
    partition: i32,
    committed: &CommittedOffset,
) -> OffsetsRecord {
    let mut buf = BytesMut::with_capacity(32 + committed.metadata.len());
    match committed.expire_timestamp_ms {
        None => {
            buf.put_i16(OFFSET_VALUE_VERSION);
            buf.put_i64(committed.offset);
            buf.put_i32(committed.leader_epoch);
            put_str(&mut buf, &committed.metadata);
            buf.put_i64(committed.commit_timestamp_ms);
        }
        Some(expire_timestamp_ms) => {
            buf.put_i16(OFFSET_VALUE_VERSION_WITH_EXPIRY);
            buf.put_i64(committed.offset);
            put_str(&mut buf, &committed.metadata);
            buf.put_i64(committed.commit_timestamp_ms);
            buf.put_i64(expire_timestamp_ms);
        }
    }
    OffsetsRecord {
        key: offset_key(group, topic, partition),
        value: Some(buf.freeze()),
    }
}

pub(crate) fn offset_tombstone(group: &str, topic: &str, partition: i32) -> OffsetsRecord {
    OffsetsRecord {
        key: offset_key(group, topic, partition),
        value: None,
    }
}

pub(crate) fn group_tombstone(group: &str) -> OffsetsRecord {
    OffsetsRecord {
        key: group_key(group),
        value: None,
    }
}

pub(crate) fn group_metadata_record(group: &Group, now_ms: i64) -> OffsetsRecord {
    let protocol = group.protocol_name.as_deref().unwrap_or("");
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut buf, group.protocol_type.as_deref().unwrap_or(""));
    buf.put_i32(group.generation_id);
    put_nullable_str(&mut buf, group.protocol_name.as_deref());
    put_nullable_str(&mut buf, group.leader_id.as_deref());
    buf.put_i64(now_ms);
    let members: Vec<&Member> = group
        .join_order
        .iter()
        .filter_map(|id| group.members.get(id))
        .collect();
    buf.put_i32(members.len() as i32);
    for m in members {
        put_str(&mut buf, &m.member_id);
        put_nullable_str(&mut buf, m.group_instance_id.as_deref());
        put_str(&mut buf, &m.client_id);
        put_str(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.metadata_for(protocol));
        put_bytes(&mut buf, &m.assignment);
    }
    OffsetsRecord {
        key: group_key(&group.group_id),
        value: Some(buf.freeze()),
    }
}

pub fn decode_key(key: &[u8]) -> Result<OffsetsKey, RecordsError> {
    let mut r = Reader(key);
    let version = r.i16("key version")?;
    match version {
        0 | 1 => Ok(OffsetsKey::Offset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
        }),
        2 => Ok(OffsetsKey::Group {
            group: r.string("group")?,
        }),
        version => Err(RecordsError::UnsupportedVersion {
            what: "key",
            version,
        }),
    }
}

pub(crate) fn decode_offset_value(value: &[u8]) -> Result<CommittedOffset, RecordsError> {
    let mut r = Reader(value);
    let version = r.i16("offset value version")?;
    match version {
        0 | 1 => {
            let offset = r.i64("offset")?;
            let metadata = r.string("metadata")?;
            let commit_timestamp_ms = r.i64("commit timestamp")?;
            let expire = if version == 1 {
                Some(r.i64("expire timestamp")?)
            } else {
                None
            };
            Ok(CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata,
                commit_timestamp_ms,
                expire_timestamp_ms: expire.filter(|&t| t >= 0),
            })
        }
        3 => Ok(CommittedOffset {
            offset: r.i64("offset")?,
            leader_epoch: r.i32("leader epoch")?,
            metadata: r.string("metadata")?,
            commit_timestamp_ms: r.i64("commit timestamp")?,
            expire_timestamp_ms: None,
        }),
        version => Err(RecordsError::UnsupportedVersion {
            what: "offset value",
            version,
        }),
    }
}

/// A group as stored in its metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredGroup {
    pub protocol_type: String,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub state_timestamp_ms: i64,
    pub members: Vec<StoredMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

pub(crate) fn decode_group_value(value: &[u8]) -> Result<StoredGroup, RecordsError> {
    let mut r = Reader(value);
    let version = r.i16("group value version")?;
    if !(0..=3).contains(&version) {
        return Err(RecordsError::UnsupportedVersion {
            what: "group value",
            version,
        });
    }
    let protocol_type = r.string("protocol type")?;
    let generation_id = r.i32("generation")?;
    let protocol_name = r.nullable_string("protocol")?;
    let leader_id = r.nullable_string("leader")?;
    let state_timestamp_ms = if version >= 2 {
        r.i64("state timestamp")?
    } else {
        -1
    };
    let count = r.i32("member count")?;
    if !(0..=GROUP_RECORD_MEMBERS_MAX).contains(&count) {
        return Err(RecordsError::Invalid("member count"));
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let member_id = r.string("member id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_string("group instance id")?
        } else {
            None
        };
        let client_id = r.string("client id")?;
        let client_host = r.string("client host")?;
        let rebalance_timeout_ms = if version >= 1 {
            r.i32("rebalance timeout")?
        } else {
            -1
        };
        let session_timeout_ms = r.i32("session timeout")?;
        let rebalance_timeout_ms = if version >= 1 {
            rebalance_timeout_ms
        } else {
            session_timeout_ms
        };
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription: r.bytes("subscription")?,
            assignment: r.bytes("assignment")?,
        });
    }
    Ok(StoredGroup {
        protocol_type,
        generation_id,
        protocol_name,
        leader_id,
        state_timestamp_ms,
        members,
    })
}

/// Encodes records as uncompressed RecordBatch v2, each record in a batch of its own
/// (offsets are assigned by the log).
pub fn encode_batch(records: &[OffsetsRecord], now_ms: i64) -> Result<BytesMut, RecordsError> {
    encode(records, now_ms, None, |_| -1)
}

/// Encodes records as one uncompressed RecordBatch v2 (offsets are assigned by the log), so
/// its size is what the log's `max.message.bytes` bounds.
pub fn encode_one_batch(records: &[OffsetsRecord], now_ms: i64) -> Result<BytesMut, RecordsError> {
    // The encoder keeps records together while offset - sequence is constant; the batch's
    // base sequence is the first record's, -1 (no producer), as Kafka's coordinators write.
    encode(records, now_ms, None, |i| (-1i32).wrapping_add(i as i32))
}

/// Encodes records as one transactional batch of `producer` (id, epoch), as Kafka's group
/// coordinator writes a TxnOffsetCommit's offsets: they count once the producer's COMMIT
/// marker follows them in the partition. No sequence (the batch's base sequence is -1): the
/// log checks only the epoch (a stale producer's batch is refused), as for Kafka's
/// coordinator appends.
pub fn encode_txn_batch(
    records: &[OffsetsRecord],
    now_ms: i64,
    producer: (i64, i16),
) -> Result<BytesMut, RecordsError> {
    encode(records, now_ms, Some(producer), |i| {
        (-1i32).wrapping_add(i as i32)
    })
}

fn encode(
    records: &[OffsetsRecord],
    now_ms: i64,
    producer: Option<(i64, i16)>,
    sequence: impl Fn(usize) -> i32,
) -> Result<BytesMut, RecordsError> {
    let (producer_id, producer_epoch) = producer.unwrap_or((-1, -1));
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence(i),
            timestamp: now_ms,
            key: Some(r.key.clone()),
            value: r.value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| RecordsError::Batch(format!("{e:#}")))?;
    Ok(buf)
}

/// One entry of a `__consumer_offsets` partition as its load replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayItem {
    /// A plain record: applied as it comes.
    Record(OffsetsRecord),
    /// A record of producer `producer_id`'s transaction (TxnOffsetCommit): pending until
    /// the producer's marker.
    Transactional {
        producer_id: i64,
        producer_epoch: i16,
        record: OffsetsRecord,
    },
    /// A transaction marker (control batch) of `producer_id`.
    Marker { producer_id: i64, commit: bool },
}

/// Decodes whole record batches (as read from the log) with each entry's offset, keeping
/// what a load needs of the batch: transactional records and markers. Keyless data records
/// are skipped (they cannot be ours); a control record that is not a COMMIT counts as an
/// ABORT (its records must not become visible), as the log's own reading of markers.
pub fn decode_batches_for_replay(mut bytes: Bytes) -> Result<Vec<(i64, ReplayItem)>, RecordsError> {
    let sets = RecordBatchDecoder::decode_all(&mut bytes)
        .map_err(|e| RecordsError::Batch(format!("{e:#}")))?;
    Ok(sets
        .into_iter()
        .flat_map(|set| set.records)
        .filter_map(|r| {
            if r.control {
                // Control record key: version i16, type i16 (0 ABORT, 1 COMMIT).
                let commit = r
                    .key
                    .as_ref()
                    .is_some_and(|k| k.len() >= 4 && k[2..4] == [0, 1]);
                return Some((
                    r.offset,
                    ReplayItem::Marker {
                        producer_id: r.producer_id,
                        commit,
                    },
                ));
            }
            let record = OffsetsRecord {
                key: r.key?,
                value: r.value,
            };
            let item = if r.transactional && r.producer_id >= 0 {
                ReplayItem::Transactional {
                    producer_id: r.producer_id,
                    producer_epoch: r.producer_epoch,
                    record,
                }
            } else {
                ReplayItem::Record(record)
            };
            Some((r.offset, item))
        })
        .collect())
}

/// Decodes whole record batches (as read from the log) into records; keyless and control
/// records are skipped (they cannot be ours).
pub fn decode_batches(bytes: Bytes) -> Result<Vec<OffsetsRecord>, RecordsError> {
    Ok(decode_batches_with_offsets(bytes)?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// Like [`decode_batches`], with each record's offset in the log.
pub fn decode_batches_with_offsets(
    mut bytes: Bytes,
) -> Result<Vec<(i64, OffsetsRecord)>, RecordsError> {
    let sets = RecordBatchDecoder::decode_all(&mut bytes)
        .map_err(|e| RecordsError::Batch(format!("{e:#}")))?;
    Ok(sets
        .into_iter()
        .flat_map(|set| set.records)
        .filter(|r| !r.control)
        .filter_map(|r| {
            Some((
                r.offset,
                OffsetsRecord {
                    key: r.key?,
                    value: r.value,
                },
            ))
        })
        .collect())
}

impl GroupCoordinator {
    /// Applies one record read back from `__consumer_offsets` (start-up replay). Call
    /// [`finish_replay`](Self::finish_replay) once every partition has been replayed.
    pub fn replay(&mut self, record: &OffsetsRecord, now_ms: i64) -> Result<(), RecordsError> {
        let key = decode_key(&record.key)?;
        match (key, &record.value) {
            (
                OffsetsKey::Offset {
                    group,
                    topic,
                    partition,
                },
                Some(value),
            ) => {
                let committed = decode_offset_value(value)?;
                self.groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(&group, now_ms))
                    .offsets
                    .insert((topic, partition), committed);
            }
            (
                OffsetsKey::Offset {
                    group,
                    topic,
                    partition,
                },
                None,
            ) => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.offsets.remove(&(topic, partition));
                }
            }
            (OffsetsKey::Group { group }, Some(value)) => {
                let stored = decode_group_value(value)?;
                let entry = self
                    .groups
                    .entry(group.clone())
                    .or_insert_with(|| Group::new(&group, now_ms));
                load_group(entry, stored, now_ms);
            }
            (OffsetsKey::Group { group }, None) => {
                self.groups.remove(&group);
            }
        }
        Ok(())
    }

    /// Ends a replay: groups with members resume as Stable, waiting for heartbeats; groups
    /// holding nothing are dropped.
    pub fn finish_replay(&mut self, now_ms: i64) {
        self.groups.retain(|_, g| {
            !(g.members.is_empty() && g.offsets.is_empty() && g.protocol_type.is_none())
        });
        // Restored members' session timers start now (as Kafka's coordinator schedules them on
        // load); without this the earliest deadline stays unset and a dead member is never
        // expired until some other event touches the coordinator.
        self.reschedule_all();
        let mut out = crate::Effects::default();
        self.tick(now_ms, &mut out);
        debug_assert!(out.replies.is_empty(), "nothing is parked after a replay");
        tracing::info!(groups = self.groups.len(), "group coordinator state loaded");
    }

    /// The live state of one `__consumer_offsets` partition as records: every group's metadata
    /// and committed offsets. Writing these and then dropping everything before them keeps
    /// the partition bounded (snapshot-and-truncate).
    pub fn snapshot_records(&self, partition: i32, now_ms: i64) -> Vec<OffsetsRecord> {
        let mut ids: Vec<&String> = self
            .groups
            .keys()
            .filter(|id| self.partition_for(id) == partition)
            .collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids {
            let group = &self.groups[id];
            if group.is(GroupState::Dead) {
                continue;
            }
            if group.protocol_type.is_some() || !group.members.is_empty() {
                out.push(group_metadata_record(group, now_ms));
            }
            for ((topic, p), committed) in &group.offsets {
                out.push(offset_commit_record(id, topic, *p, committed));
            }
        }
        out
    }
}

fn load_group(group: &mut Group, stored: StoredGroup, now_ms: i64) {
    group.protocol_type = Some(stored.protocol_type.clone()).filter(|t| !t.is_empty());
    group.generation_id = stored.generation_id;
    group.protocol_name = stored.protocol_name.clone();
    group.leader_id = stored.leader_id.clone();
    group.members.clear();
    group.join_order.clear();
    group.static_members.clear();
    group.pending_sync.clear();
    group.pending_members.clear();
    group.join_timer = None;
    group.sync_deadline_ms = None;
    for m in stored.members {
        let protocols = vec![Protocol {
            name: stored.protocol_name.clone().unwrap_or_default(),
            metadata: m.subscription,
        }];
        if let Some(instance) = &m.group_instance_id {
            group
                .static_members
                .insert(instance.clone(), m.member_id.clone());
        }
        group.join_order.push(m.member_id.clone());
        group.members.insert(
            m.member_id.clone(),
            Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                protocol_type: stored.protocol_type.clone(),
                protocols,
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                heartbeat_deadline_ms: now_ms + i64::from(m.session_timeout_ms),
            },
        );
    }
    let state = if group.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
    group.state = state;
    group.state_since_ms = if stored.state_timestamp_ms >= 0 {
        stored.state_timestamp_ms
    } else {
        now_ms
    };
}

fn put_str(buf: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(&s.as_bytes()[..len]);
}

fn put_nullable_str(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(b.len() as i32);
    buf.put_slice(b);
}

/// A bounds-checked big-endian reader.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], RecordsError> {
        if self.0.len() < n {
            return Err(RecordsError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn i16(&mut self, what: &'static str) -> Result<i16, RecordsError> {
        Ok(i16::from_be_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, RecordsError> {
        Ok(i32::from_be_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, RecordsError> {
        Ok(i64::from_be_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, RecordsError> {
        let len = self.i16(what)?;
        if len < 0 {
            return Ok(None);
        }
        let raw = self.take(len as usize, what)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| RecordsError::Invalid(what))
    }
    fn string(&mut self, what: &'static str) -> Result<String, RecordsError> {
        self.nullable_string(what)?
            .ok_or(RecordsError::Invalid(what))
    }
    fn bytes(&mut self, what: &'static str) -> Result<Bytes, RecordsError> {
        let len = self.i32(what)?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(self.take(len as usize, what)?))
    }
}

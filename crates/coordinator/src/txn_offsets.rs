//! Offsets committed by a transaction (TxnOffsetCommit), as Kafka's group coordinator keeps
//! them: the broker appends them to the group's `__consumer_offsets` partition as a
//! transactional batch of the producer, and the coordinator holds them pending per (group,
//! producer id) until that producer's marker on the partition makes them committed (COMMIT)
//! or drops them (ABORT). A load replays the partition the same way (`replay_item`): what no
//! marker ended stays pending. Offsets held by the transaction service from older data dirs
//! (`__transaction_state` records) are still asked through [`PendingTxnOffsets`].

use std::collections::{BTreeMap, BTreeSet};

use crate::coordinator::{Effects, GroupCoordinator};
use crate::group::{CommittedOffset, Group};
use crate::offsets::validate_group_commit;
use crate::records::{self, OffsetsKey, OffsetsRecord, RecordsError, ReplayItem};
use kafka_protocol::ResponseError;

/// Transactional offsets waiting for their producer's marker: (group, producer id) → offsets
/// by (topic, partition).
pub(crate) type PendingTxn = BTreeMap<(String, i64), PendingSet>;

/// One producer's pending offsets of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingSet {
    /// The epoch of the producer's last batch of them (a snapshot appends them again under it).
    pub producer_epoch: i16,
    /// By (topic, partition).
    pub offsets: BTreeMap<(String, i32), TxnOffset>,
}

/// Which partitions have transactional offsets pending (TxnOffsetCommit taken, the
/// transaction's marker not yet written), as the group coordinator asks it. The broker's
/// answer comes from a lock taken last: implementations must not take any other lock.
pub trait PendingTxnOffsets: Send + Sync {
    /// The partitions of `group_id` with transactional offsets pending (any producer's).
    fn pending_partitions(&self, group_id: &str) -> std::collections::BTreeSet<(String, i32)>;
}

/// One pending transactional offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

impl GroupCoordinator {
    /// TxnOffsetCommit's check of the committing consumer against the group (KIP-447, Kafka's
    /// `validateTransactionalOffsetCommit`): a zombie whose member was removed gets
    /// UNKNOWN_MEMBER_ID, one whose static instance id was taken over FENCED_INSTANCE_ID, one
    /// of an older generation ILLEGAL_GENERATION. A group that does not exist takes offsets
    /// only without a generation (a simple group, made when they commit), else
    /// ILLEGAL_GENERATION; a Dead group answers COORDINATOR_NOT_AVAILABLE. Without a member id,
    /// instance id or generation (v0-2, or `sendOffsetsToTransaction(offsets, groupId)`) the
    /// offsets are taken whatever the group's state.
    pub fn validate_txn_offset_commit(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), i16> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId.code());
        }
        match self.groups.get(group_id) {
            None if generation_id < 0 => Ok(()),
            None => Err(ResponseError::IllegalGeneration.code()),
            Some(group) => {
                validate_group_commit(group, generation_id, member_id, group_instance_id, true)
            }
        }
    }

    /// Make a committed transaction's offsets for `group_id` visible (and durable).
    pub fn commit_txn_offsets(
        &mut self,
        now_ms: i64,
        group_id: &str,
        offsets: &[TxnOffset],
        out: &mut Effects,
    ) {
        if offsets.is_empty() || group_id.is_empty() {
            return;
        }
        let partition = self.partition_for(group_id);
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, now_ms));
        for o in offsets {
            let committed = CommittedOffset {
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: o.metadata.clone(),
                commit_timestamp_ms: now_ms,
                expire_timestamp_ms: None,
            };
            out.append(
                partition,
                records::offset_commit_record(group_id, &o.topic, o.partition, &committed),
            );
            group
                .offsets
                .insert((o.topic.clone(), o.partition), committed);
        }
        self.after_event(group_id, now_ms, out);
    }
}

impl GroupCoordinator {
    /// The records of a TxnOffsetCommit, to append as the producer's transactional batch
    /// (`records::encode_txn_batch`) before [`hold_txn_offsets`](Self::hold_txn_offsets).
    pub fn txn_offset_records(
        &self,
        now_ms: i64,
        group_id: &str,
        offsets: &[TxnOffset],
    ) -> Vec<OffsetsRecord> {
        offsets
            .iter()
            .map(|o| {
                records::offset_commit_record(
                    group_id,
                    &o.topic,
                    o.partition,
                    &committed(o, now_ms),
                )
            })
            .collect()
    }

    /// Holds offsets whose transactional batch (of `producer` id and epoch) is in the group's
    /// partition: pending until the producer's marker there (a later commit of the same
    /// partition replaces it).
    pub fn hold_txn_offsets(
        &mut self,
        group_id: &str,
        producer: (i64, i16),
        offsets: Vec<TxnOffset>,
    ) {
        let set = self
            .txn_pending
            .entry((group_id.to_string(), producer.0))
            .or_default();
        set.producer_epoch = producer.1;
        for o in offsets {
            set.offsets.insert((o.topic.clone(), o.partition), o);
        }
    }

    /// The pending offsets of the groups stored in `partition` as records, per producer (id,
    /// epoch): a snapshot-and-truncate appends them, as each producer's transactional batch,
    /// after its plain records of the committed offsets, so the log keeps the transaction's
    /// offsets after the plain ones (a load, and the log cleaner keeping the latest record of a
    /// key, then come to what the running coordinator has).
    pub fn snapshot_txn_records(
        &self,
        partition: i32,
        now_ms: i64,
    ) -> Vec<((i64, i16), Vec<OffsetsRecord>)> {
        self.txn_pending
            .iter()
            .filter(|((g, _), set)| self.partition_for(g) == partition && !set.offsets.is_empty())
            .map(|((g, pid), set)| {
                let offsets: Vec<TxnOffset> = set.offsets.values().cloned().collect();
                (
                    (*pid, set.producer_epoch),
                    self.txn_offset_records(now_ms, g, &offsets),
                )
            })
            .collect()
    }

    /// The marker of `producer_id` on `__consumer_offsets` partition `partition` (written
    /// there, or met by a load): its pending offsets of the groups stored there become
    /// committed offsets (COMMIT) or are dropped (ABORT). Nothing is appended: the
    /// transactional records and the marker are the durable form. Returns the groups touched.
    pub fn complete_txn(
        &mut self,
        now_ms: i64,
        partition: i32,
        producer_id: i64,
        commit: bool,
    ) -> Vec<String> {
        let keys: Vec<(String, i64)> = self
            .txn_pending
            .keys()
            .filter(|(g, pid)| *pid == producer_id && self.partition_for(g) == partition)
            .cloned()
            .collect();
        let mut groups = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(PendingSet { offsets, .. }) = self.txn_pending.remove(&key) else {
                continue;
            };
            let (group_id, _) = key;
            if commit && !offsets.is_empty() {
                let group = self
                    .groups
                    .entry(group_id.clone())
                    .or_insert_with(|| Group::new(&group_id, now_ms));
                for (tp, o) in offsets {
                    group.offsets.insert(tp, committed(&o, now_ms));
                }
            }
            groups.push(group_id);
        }
        groups
    }

    /// Whether another (group, producer id) set of pending offsets would pass `max` sets
    /// (a new TxnOffsetCommit is refused then; the offsets of a set held already are taken).
    pub fn txn_pending_full(&self, group_id: &str, producer_id: i64, max: usize) -> bool {
        self.txn_pending.len() >= max
            && !self
                .txn_pending
                .contains_key(&(group_id.to_string(), producer_id))
    }

    /// The partitions of `group_id` with transactional offsets pending here (any producer's).
    pub fn pending_txn_partitions(&self, group_id: &str) -> BTreeSet<(String, i32)> {
        self.txn_pending
            .range((group_id.to_string(), i64::MIN)..=(group_id.to_string(), i64::MAX))
            .flat_map(|(_, set)| set.offsets.keys().cloned())
            .collect()
    }

    /// Every pending (group, producer id) and its offsets (tests, the dashboard).
    pub fn pending_txn_offsets(&self) -> impl Iterator<Item = (&(String, i64), &PendingSet)> {
        self.txn_pending.iter()
    }

    /// Applies one entry read back from `__consumer_offsets` partition `partition` during a
    /// load (Kafka's `GroupMetadataManager` loading): plain records as
    /// [`replay`](Self::replay), a producer's transactional offset records pending, its
    /// marker committing or dropping them. What no marker ended stays pending.
    pub fn replay_item(
        &mut self,
        partition: i32,
        item: &ReplayItem,
        now_ms: i64,
    ) -> Result<(), RecordsError> {
        match item {
            ReplayItem::Record(record) => self.replay(record, now_ms),
            ReplayItem::Transactional {
                producer_id,
                producer_epoch,
                record,
            } => {
                let key = records::decode_key(&record.key)?;
                match (key, &record.value) {
                    (
                        OffsetsKey::Offset {
                            group,
                            topic,
                            partition,
                        },
                        Some(value),
                    ) => {
                        let c = records::decode_offset_value(value)?;
                        let offset = TxnOffset {
                            topic,
                            partition,
                            offset: c.offset,
                            leader_epoch: c.leader_epoch,
                            metadata: c.metadata,
                        };
                        self.hold_txn_offsets(
                            &group,
                            (*producer_id, *producer_epoch),
                            vec![offset],
                        );
                        Ok(())
                    }
                    // Kafka writes only offset commits transactionally; anything else is
                    // taken as it is.
                    _ => self.replay(record, now_ms),
                }
            }
            ReplayItem::Marker {
                producer_id,
                commit,
            } => {
                self.complete_txn(now_ms, partition, *producer_id, *commit);
                Ok(())
            }
        }
    }
}

fn committed(o: &TxnOffset, now_ms: i64) -> CommittedOffset {
    CommittedOffset {
        offset: o.offset,
        leader_epoch: o.leader_epoch,
        metadata: o.metadata.clone(),
        commit_timestamp_ms: now_ms,
        expire_timestamp_ms: None,
    }
}

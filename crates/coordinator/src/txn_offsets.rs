//! Offsets committed by a transaction (TxnOffsetCommit): held by the transaction service until
//! the transaction's marker reaches the group's `__consumer_offsets` partition, then written
//! here as ordinary committed offsets (Kafka makes them visible only on COMMIT, and drops them
//! on ABORT).

use crate::coordinator::{Effects, GroupCoordinator};
use crate::group::{CommittedOffset, Group};
use crate::offsets::validate_group_commit;
use crate::records;
use kafka_protocol::ResponseError;

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

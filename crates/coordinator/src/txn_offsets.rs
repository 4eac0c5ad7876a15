//! Offsets committed by a transaction (TxnOffsetCommit): held by the transaction service until
//! the transaction's marker reaches the group's `__consumer_offsets` partition, then written
//! here as ordinary committed offsets (Kafka makes them visible only on COMMIT, and drops them
//! on ABORT).

use crate::coordinator::{Effects, GroupCoordinator};
use crate::group::{CommittedOffset, Group};
use crate::records;

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

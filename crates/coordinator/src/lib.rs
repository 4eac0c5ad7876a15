//! The consumer-group coordinator as a sans-io state machine (issue 5).
//!
//! Events go in as method calls on [`GroupCoordinator`] with the current time passed explicitly
//! (`now_ms`); effects come out in an [`Effects`] value: records to append to the internal
//! `__consumer_offsets` topic and replies to requests that were parked (JoinGroup waits for the
//! rebalance, SyncGroup waits for the leader's assignment). The coordinator never sleeps, never
//! does I/O and never reads a clock, so every transition is testable deterministically.
//!
//! The broker owns the sockets, the log of `__consumer_offsets` and a timer that calls
//! [`GroupCoordinator::tick`]. It must apply `Effects::appends` (in order) before sending
//! `Effects::replies`, so that nothing is acknowledged before it is in the log.
#![forbid(unsafe_code)]

mod admin;
mod coordinator;
mod group;
mod membership;
mod offsets;
pub mod records;
pub mod txn;
mod txn_offsets;
mod types;

#[cfg(test)]
mod tests;

pub use coordinator::{CoordinatorConfig, Effects, GroupCoordinator, OffsetsAppend};
pub use group::{GroupState, parse_subscription_topics};
pub use records::{OffsetsRecord, RecordsError};
pub use txn_offsets::{PendingSet, PendingTxnOffsets, TxnOffset};
pub use types::*;

/// The name of the internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// `offsets.topic.num.partitions` default.
pub const DEFAULT_OFFSETS_TOPIC_PARTITIONS: i32 = 50;

/// Java's `String.hashCode` over UTF-16 code units, as Kafka computes it for `groupId.hashCode`.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The `__consumer_offsets` partition that owns `group_id`: `Utils.abs(groupId.hashCode) % N`,
/// exactly as Kafka computes it, so a group maps to the same partition number as on Kafka.
pub fn partition_for_group(group_id: &str, num_partitions: i32) -> i32 {
    assert!(
        num_partitions > 0,
        "offsets topic must have at least one partition"
    );
    let hash = java_string_hash(group_id);
    // Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}

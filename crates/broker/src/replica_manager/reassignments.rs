//! Partition reassignment (KIP-455) through the controller: AlterPartitionReassignments and
//! ListPartitionReassignments are controller events, answered once what they wrote has
//! committed and been applied here. The data moves without a mechanism of its own: a broker
//! that the delta makes a replica opens the partition and follows the leader, the leader
//! proposes it for the ISR once it has caught up, and the ISR change completes the
//! reassignment; a broker that leaves the replicas stops and deletes its copy (`apply.rs`).

use kafka_protocol::ResponseError;
use streamforge_metadata::controller::{Event, OngoingReassignment, ReassignPartition, Reply};

use super::{ReplicaManager, TopicError};

/// One partition's answer to AlterPartitionReassignments.
pub type ReassignResult = ((String, i32), Result<(), ResponseError>);

impl ReplicaManager {
    /// Start, change or cancel (`replicas: None`) reassignments, an answer per partition.
    pub fn alter_partition_reassignments(
        &self,
        partitions: Vec<ReassignPartition>,
        allow_replication_factor_change: bool,
    ) -> Result<Vec<ReassignResult>, TopicError> {
        let _admin = self.admin.lock();
        let event = Event::AlterPartitionReassignments {
            partitions,
            allow_replication_factor_change,
        };
        match self.request(event)?.0 {
            Reply::AlterPartitionReassignments(results) => {
                for ((topic, partition), result) in &results {
                    if result.is_ok() {
                        tracing::info!(topic, partition, "partition reassignment accepted");
                    }
                }
                Ok(results)
            }
            _ => Err(not_answered()),
        }
    }

    /// The reassignments in progress: all of them (`None`), or those of the named partitions.
    pub fn list_partition_reassignments(
        &self,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<OngoingReassignment>, TopicError> {
        let _admin = self.admin.lock();
        match self.request(Event::ListPartitionReassignments(topics))?.0 {
            Reply::ListPartitionReassignments(ongoing) => Ok(ongoing),
            _ => Err(not_answered()),
        }
    }
}

/// No active controller answered within the wait: the request may be sent again.
fn not_answered() -> TopicError {
    TopicError::Controller(
        ResponseError::RequestTimedOut,
        "no active controller answered in time".into(),
    )
}

#[cfg(test)]
#[path = "reassignments_tests.rs"]
mod tests;

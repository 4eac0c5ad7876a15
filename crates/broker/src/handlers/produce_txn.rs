//! Transactional Produce (KIP-890): the first transactional batch of a producer on a partition
//! is checked with the transaction coordinator before it is appended. Produce v12+ (transaction
//! version 2) adds the partition to the producer's transaction, as Kafka's partition leader
//! does with AddPartitionsToTxn v5; older versions must have added it themselves
//! (AddPartitionsToTxn) or get INVALID_TXN_STATE, as Kafka with
//! `transaction.partition.verification.enable=true` (its default). Later batches of the same
//! transaction find it open in the log and go straight to the append.

use streamforge_log::AppendInfo;
use streamforge_protocol::batch::RecordBatchHeader;

use super::produce::Rejection;
use crate::BrokerState;
use crate::partition::{AppendParams, Partition, PartitionError};

/// What a Produce request says about its transaction.
pub(crate) struct TxnProduce {
    pub transactional_id: String,
    /// Produce v12+: add the partition to the transaction rather than verify it.
    pub add_partitions: bool,
}

/// Append `batches` (one partition's) for a Produce carrying a transactional id.
pub(crate) fn append(
    state: &BrokerState,
    txn: &TxnProduce,
    partition: &Partition,
    batches: &mut [u8],
    params: AppendParams,
) -> Result<AppendInfo, Rejection> {
    let producer = RecordBatchHeader::parse(batches)
        .ok()
        .filter(|h| h.is_transactional())
        .map(|h| (h.producer_id(), h.producer_epoch()));
    let Some((pid, epoch)) = producer else {
        // Not a transactional batch (the log's own checks apply).
        return partition
            .append(batches, params)
            .map_err(Rejection::from_partition);
    };
    // The common case: the producer's transaction is already open here.
    let open = |log: &streamforge_log::Log| {
        if log.has_open_transaction(pid, epoch) {
            Ok(())
        } else {
            Err(PartitionError::NotInTransaction)
        }
    };
    match partition.append_checked(batches, params, open) {
        Err(PartitionError::NotInTransaction) => {}
        other => return other.map_err(Rejection::from_partition),
    }
    let appended = state.txns.verified_append(
        state,
        (&txn.transactional_id, pid, epoch),
        (partition.topic.to_string(), partition.index),
        txn.add_partitions,
        || partition.append(batches, params),
    );
    match appended {
        Ok(result) => result.map_err(Rejection::from_partition),
        Err(e) => {
            let message = match e {
                kafka_protocol::ResponseError::InvalidTxnState => {
                    "Partition was not added to the transaction".to_string()
                }
                other => format!("transaction check failed: {other:?}"),
            };
            Err(Rejection::new(e, Some(message)))
        }
    }
}

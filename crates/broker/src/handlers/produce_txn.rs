//! Transactional Produce (KIP-890): the first transactional batch of a producer on a partition
//! is checked with the transaction coordinator before it is appended. Produce v12+ (transaction
//! version 2) adds the partition to the producer's transaction, as Kafka's partition leader
//! does with AddPartitionsToTxn v5; older versions must have added it themselves
//! (AddPartitionsToTxn) or get INVALID_TXN_STATE, as Kafka with
//! `transaction.partition.verification.enable=true` (its default). Later batches of the same
//! transaction find it open in the log and go straight to the append. When the coordinator is
//! this broker the check runs in-process under its lock; when it is another broker the check
//! goes there (`txn_verify_sender::check`) and the append follows the answer.
//! Either way the partition hands out a verification guard for the producer before the check
//! (Kafka's `VerificationGuard`) and the append carries it: a transactional batch of the
//! producer appended in between (a marker ending its transaction, say a version 1 client's own
//! EndTxn racing its Produce) voids the guard and the append is refused with INVALID_TXN_STATE
//! ("Record was not part of an ongoing transaction"), as Kafka's `UnifiedLog` does.

use streamforge_log::{AppendInfo, VerificationGuard};
use streamforge_protocol::batch::RecordBatchHeader;

use super::produce::Rejection;
use crate::BrokerState;
use crate::partition::{AppendParams, Partition, PartitionError};
use crate::txn_verify::{FIRST_ADD_PARTITION_PRODUCE_VERSION, produce_error};

/// What a Produce request says about its transaction.
pub(crate) struct TxnProduce {
    pub transactional_id: String,
    /// The Produce version: v12+ adds the partition to the transaction rather than verify it,
    /// and the version decides how coordinator errors are reported.
    pub produce_version: i16,
}

impl TxnProduce {
    /// Produce v12+: add the partition to the transaction rather than verify it.
    pub fn add_partitions(&self) -> bool {
        self.produce_version >= FIRST_ADD_PARTITION_PRODUCE_VERSION
    }

    /// A coordinator's error `code` as this Produce reports it (Kafka's translations).
    pub fn rejection(&self, code: i16) -> Rejection {
        let (code, message) = produce_error(code, self.produce_version);
        Rejection::with_code(code, message)
    }
}

/// What became of one partition's transactional batches.
pub(crate) enum TxnAppend {
    Done(Result<AppendInfo, Rejection>),
    /// The producer's coordinator is another broker: check with it (the producer's id and
    /// epoch), then append (`Partition::append_verified` with `guard`) if it answers 0.
    Remote {
        producer_id: i64,
        producer_epoch: i16,
        guard: Option<VerificationGuard>,
    },
}

/// Append `batches` (one partition's) for a Produce carrying a transactional id.
pub(crate) fn append(
    state: &BrokerState,
    txn: &TxnProduce,
    partition: &Partition,
    batches: &mut [u8],
    params: AppendParams,
) -> TxnAppend {
    let producer = RecordBatchHeader::parse(batches)
        .ok()
        .filter(|h| h.is_transactional())
        .map(|h| (h.producer_id(), h.producer_epoch()));
    let Some((pid, epoch)) = producer else {
        // Not a transactional batch (the log's own checks apply).
        return TxnAppend::Done(
            partition
                .append(batches, params)
                .map_err(Rejection::from_partition),
        );
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
        other => return TxnAppend::Done(other.map_err(Rejection::from_partition)),
    }
    // The guard goes before the check: whatever of the producer lands after it voids it.
    let guard = match partition.start_txn_verification(pid, epoch, txn.add_partitions()) {
        Ok(guard) => guard,
        Err(e) => return TxnAppend::Done(Err(Rejection::from_partition(e))),
    };
    let appended = state.txns.verified_append(
        state,
        (&txn.transactional_id, pid, epoch),
        (partition.topic.to_string(), partition.index),
        txn.add_partitions(),
        || partition.append_verified(batches, params, (pid, epoch), guard),
    );
    let remote = TxnAppend::Remote {
        producer_id: pid,
        producer_epoch: epoch,
        guard,
    };
    match appended {
        Ok(result) => TxnAppend::Done(result.map_err(Rejection::from_partition)),
        // CONCURRENT_TRANSACTIONS on an add (the previous transaction's markers are still
        // going out) is retried off the coordinator's lock, as Kafka's leader retries it.
        Err(kafka_protocol::ResponseError::NotCoordinator) => remote,
        Err(kafka_protocol::ResponseError::ConcurrentTransactions) if txn.add_partitions() => {
            remote
        }
        Err(e) => {
            if e == kafka_protocol::ResponseError::InvalidTxnState {
                // Fatal for most clients: worth a line in the log.
                tracing::info!(transactional_id = %txn.transactional_id, producer_id = pid, producer_epoch = epoch, topic = %partition.topic, partition = partition.index, produce_version = txn.produce_version, "transactional Produce answered INVALID_TXN_STATE");
            }
            TxnAppend::Done(Err(txn.rejection(e.code())))
        }
    }
}

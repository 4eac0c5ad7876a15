//! Transactions on a partition: the markers the transaction coordinator writes (Kafka's
//! WriteTxnMarkers path) and the open transactions shown by DescribeProducers and the tools.

use streamforge_log::{AppendInfo, LogError, TxnMarker, VerificationGuard};

use super::{AppendParams, Partition, PartitionError, PartitionRole};
use crate::util::now_ms;

/// What writing one marker did.
pub type MarkerResult = Result<AppendInfo, PartitionError>;

impl Partition {
    /// Append a COMMIT or ABORT marker as leader, advance the high watermark and wake fetches
    /// (read_committed consumers wait on the last stable offset, which the marker may move).
    pub fn write_txn_marker(&self, marker: TxnMarker) -> MarkerResult {
        let appended = self.with_state(|serving, log| {
            if serving.role != PartitionRole::Leader {
                return Err(PartitionError::NotLeaderOrFollower);
            }
            let info = log
                .append_txn_marker(marker, serving.leader_epoch, now_ms())
                .map_err(PartitionError::Log)?;
            let leo = log.log_end_offset();
            // As a data append: alone the high watermark follows the log end; with followers
            // it moves as they fetch the marker (a marker counts once the ISR has it).
            match &mut serving.replica {
                None => log.set_high_watermark(leo),
                Some(replica) => replica.on_local_append(log, leo),
            }
            Ok((info, log.high_watermark()))
        })?;
        if let Err(PartitionError::Log(e)) = &appended
            && matches!(e, LogError::Io(_) | LogError::Corrupted(_))
        {
            crate::storage_errors::record(&self.topic, self.index, e);
        }
        let (info, hw) = appended?;
        self.hw_tx.send_replace(hw);
        Ok(info)
    }

    /// Before the producer's transaction coordinator is asked about this partition (KIP-890):
    /// the guard the append must carry, `None` when its transaction is open here already.
    /// `epoch_bump`: a transaction version 2 producer (Produce v12+).
    pub fn start_txn_verification(
        &self,
        producer_id: i64,
        epoch: i16,
        epoch_bump: bool,
    ) -> Result<Option<VerificationGuard>, PartitionError> {
        self.with_log(|log| log.start_txn_verification(producer_id, epoch, epoch_bump, now_ms()))
    }

    /// Appends `batches` of a producer the coordinator verified under `guard`: refused with
    /// INVALID_TXN_STATE when a marker of the producer landed since the guard was taken
    /// (Kafka's verification guard), unless its transaction is open here.
    pub fn append_verified(
        &self,
        batches: &mut [u8],
        params: AppendParams,
        producer: (i64, i16),
        guard: Option<VerificationGuard>,
    ) -> Result<AppendInfo, PartitionError> {
        let (producer_id, epoch) = producer;
        // A retry of a batch already in the log passes (the append answers it as a duplicate).
        let sequences = streamforge_protocol::batch::RecordBatchHeader::parse(batches)
            .ok()
            .map(|h| (h.base_sequence(), h.last_sequence()))
            .filter(|&(first, _)| first >= 0);
        self.append_checked(batches, params, |log| {
            if log.txn_verified(producer_id, epoch, sequences, guard) {
                Ok(())
            } else {
                Err(PartitionError::TxnNotVerified)
            }
        })
    }

    /// Open transactions as (first offset, producer id), oldest first.
    pub fn open_transactions(&self) -> Result<Vec<(i64, i64)>, PartitionError> {
        self.with_log(|log| log.open_transactions())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use streamforge_log::LogConfig;
    use streamforge_protocol::batch::TRANSACTIONAL;
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
    use streamforge_protocol::control::ControlType;

    use super::super::*;
    use streamforge_log::TxnMarker;

    fn read(p: &Partition, isolation: FetchIsolation) -> ReadResult {
        p.read_local(FetchParams {
            fetch_offset: 0,
            max_bytes: 1 << 20,
            min_one_message: true,
            isolation,
            replica_id: -1,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn read_committed_stops_at_the_lso_and_reports_aborts() {
        let dir = tempfile::tempdir().unwrap();
        let topic: Arc<str> = Arc::from("t");
        let p = Partition::create(
            &topic,
            0,
            dir.path(),
            LogConfig::default(),
            Default::default(),
        )
        .unwrap();
        let mut b = build_simple(
            BatchSpec {
                producer_id: 5,
                producer_epoch: 0,
                base_sequence: 0,
                attributes: TRANSACTIONAL,
                ..BatchSpec::default()
            },
            3,
            10,
        );
        let params = AppendParams { acks: Acks::All };
        p.append(&mut b, params).unwrap();
        let offsets = p.offsets().unwrap();
        assert_eq!((offsets.high_watermark, offsets.last_stable_offset), (3, 0));
        let committed = read(&p, FetchIsolation::TxnCommitted);
        assert_eq!(committed.records.unwrap().bytes, 0);
        assert!(
            read(&p, FetchIsolation::HighWatermark)
                .records
                .unwrap()
                .bytes
                > 0
        );
        let found = p.list_offsets(OffsetSpec::LastStable, -1).await.unwrap();
        assert_eq!(found.offset, 0);
        assert_eq!(p.open_transactions().unwrap(), vec![(0, 5)]);

        let marker = TxnMarker {
            producer_id: 5,
            producer_epoch: 0,
            coordinator_epoch: 0,
            kind: ControlType::Abort,
        };
        assert_eq!(p.write_txn_marker(marker).unwrap().first_offset, 3);
        assert_eq!(*p.watch_high_watermark().borrow(), 4);
        let committed = read(&p, FetchIsolation::TxnCommitted);
        assert_eq!(committed.offsets.last_stable_offset, 4);
        assert!(committed.records.unwrap().bytes > 0);
        assert_eq!(committed.aborted.len(), 1);
        assert_eq!(committed.aborted[0].first_offset, 0);
        assert_eq!(p.producers().unwrap()[0].current_txn_first_offset, -1);
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
        build_simple(
            BatchSpec {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
                attributes: TRANSACTIONAL,
                ..BatchSpec::default()
            },
            1,
            10,
        )
    }

    fn marker(pid: i64, epoch: i16, kind: ControlType) -> TxnMarker {
        TxnMarker {
            producer_id: pid,
            producer_epoch: epoch,
            coordinator_epoch: 0,
            kind,
        }
    }

    /// The remote Produce path step by step: the guard is taken, the coordinator answers 0,
    /// the producer's EndTxn marker lands, then the append comes: refused INVALID_TXN_STATE,
    /// nothing appended. Without the marker in between the same append goes in.
    #[test]
    fn a_marker_between_the_coordinators_answer_and_the_append_fails_the_append() {
        let dir = tempfile::tempdir().unwrap();
        let topic: Arc<str> = Arc::from("t");
        let p = Partition::create(
            &topic,
            0,
            dir.path(),
            LogConfig::default(),
            Default::default(),
        )
        .unwrap();
        let params = AppendParams { acks: Acks::All };
        // Transaction 1 of producer 5 (transaction version 1: one epoch throughout).
        let guard = p.start_txn_verification(5, 0, false).unwrap();
        assert!(guard.is_some());
        p.append_verified(&mut txn_batch(5, 0, 0), params, (5, 0), guard)
            .unwrap();
        // Its next batch finds the transaction open: no guard needed.
        assert_eq!(p.start_txn_verification(5, 0, false).unwrap(), None);
        p.append_verified(&mut txn_batch(5, 0, 1), params, (5, 0), None)
            .unwrap();
        p.write_txn_marker(marker(5, 0, ControlType::Commit))
            .unwrap();

        // Transaction 2: checked, then the producer's own EndTxn (abort) lands first.
        let guard = p.start_txn_verification(5, 0, false).unwrap();
        p.write_txn_marker(marker(5, 0, ControlType::Abort))
            .unwrap();
        let end = p.offsets().unwrap().log_end_offset;
        let refused = p
            .append_verified(&mut txn_batch(5, 0, 2), params, (5, 0), guard)
            .unwrap_err();
        assert!(
            matches!(refused, PartitionError::TxnNotVerified),
            "{refused:?}"
        );
        assert_eq!(refused.kafka_code(), 48, "INVALID_TXN_STATE");
        assert_eq!(
            refused.to_string(),
            "Record was not part of an ongoing transaction"
        );
        assert_eq!(p.offsets().unwrap().log_end_offset, end, "nothing appended");
        assert!(p.open_transactions().unwrap().is_empty());
        // A retry of transaction 1's first batch is still answered as a duplicate.
        let retried = p
            .append_verified(&mut txn_batch(5, 0, 0), params, (5, 0), guard)
            .unwrap();
        assert!(retried.duplicate);

        // Checked again (the client's retry): a fresh guard, nothing in between, appended.
        let guard = p.start_txn_verification(5, 0, false).unwrap();
        p.append_verified(&mut txn_batch(5, 0, 2), params, (5, 0), guard)
            .unwrap();
        assert_eq!(p.open_transactions().unwrap(), vec![(end, 5)]);
    }

    /// Transaction version 2: the previous transaction's marker carries the epoch the next
    /// transaction's batches use; landing between the check (an add) and the append it keeps
    /// the guard. A fencing marker at a newer epoch does not.
    #[test]
    fn a_transaction_version_2_marker_at_the_batchs_epoch_keeps_the_guard() {
        let dir = tempfile::tempdir().unwrap();
        let topic: Arc<str> = Arc::from("t");
        let p = Partition::create(
            &topic,
            0,
            dir.path(),
            LogConfig::default(),
            Default::default(),
        )
        .unwrap();
        let params = AppendParams { acks: Acks::All };
        p.append_verified(
            &mut txn_batch(5, 0, 0),
            params,
            (5, 0),
            p.start_txn_verification(5, 0, true).unwrap(),
        )
        .unwrap();
        // EndTxn v5 bumps to epoch 1; the next transaction's batch at epoch 1 is checked while
        // the marker (epoch 1) is on its way.
        let guard = p.start_txn_verification(5, 1, true).unwrap();
        p.write_txn_marker(marker(5, 1, ControlType::Commit))
            .unwrap();
        p.append_verified(&mut txn_batch(5, 1, 0), params, (5, 1), guard)
            .unwrap();
        p.write_txn_marker(marker(5, 2, ControlType::Commit))
            .unwrap();
        // A timeout's abort at epoch 3 lands between the check of epoch 2 and its append.
        let guard = p.start_txn_verification(5, 2, true).unwrap();
        p.write_txn_marker(marker(5, 3, ControlType::Abort))
            .unwrap();
        let refused = p
            .append_verified(&mut txn_batch(5, 2, 0), params, (5, 2), guard)
            .unwrap_err();
        // The epoch is stale now: the log's own check answers first, as Kafka's.
        assert_eq!(
            refused.kafka_code(),
            47,
            "INVALID_PRODUCER_EPOCH: {refused:?}"
        );
    }
}

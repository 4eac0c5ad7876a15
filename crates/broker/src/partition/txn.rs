//! Transactions on a partition: the markers the transaction coordinator writes (Kafka's
//! WriteTxnMarkers path) and the open transactions shown by DescribeProducers and the tools.

use streamforge_log::{AppendInfo, LogError, TxnMarker};

use super::{Partition, PartitionError, PartitionRole};
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
}

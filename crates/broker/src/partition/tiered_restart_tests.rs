//! A follower restarted above the remote log (OFFSET_MOVED_TO_TIERED_STORAGE) takes its producer
//! state from the remote producer snapshot uploaded with the segment ending at its restart
//! point: a transaction open across that point is known there, and its ABORT is indexed.

use std::sync::Arc;

use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::batch::{RecordBatchMut, TRANSACTIONAL};
use streamforge_protocol::control::{ControlType, build_marker};
use streamforge_tiered::{
    LocalLog, PartitionId, StoreSpec, TierPolicy, TieredConfig, TieredStorage, TieringManager,
};

use super::*;

const APPEND: AppendParams = AppendParams { acks: Acks::All };

fn open(dir: &Path, tiering: &Arc<TieringManager>) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from("t");
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    };
    let remote = RemoteTier {
        tiering: Some(tiering.clone()),
        enabled: true,
    };
    Arc::new(Partition::create(&topic, 0, dir, config, remote).unwrap())
}

fn tiering(remote_dir: &Path) -> Arc<TieringManager> {
    let config = TieredConfig {
        store: StoreSpec::Local {
            path: remote_dir.to_path_buf(),
        },
        ..TieredConfig::default()
    };
    TieringManager::new(TieredStorage::new(config).unwrap())
}

const POLICY: TierPolicy = TierPolicy {
    remote_storage_enable: true,
    local_retention_ms: -1,
    local_retention_bytes: 0,
    retention_ms: -1,
    retention_bytes: -1,
};

#[tokio::test]
async fn a_follower_restarted_above_the_remote_log_knows_the_open_transaction_and_indexes_its_abort()
 {
    let root = tempfile::tempdir().unwrap();
    let remote_dir = root.path().join("remote");
    // The leader: a transaction of producer 9 opens, plain data rolls segments after it, the
    // sealed segments go remote and local retention 0 deletes them.
    let leader_tiering = tiering(&remote_dir);
    let leader = open(&root.path().join("leader"), &leader_tiering);
    let txn = BatchSpec {
        producer_id: 9,
        producer_epoch: 0,
        base_sequence: 0,
        attributes: TRANSACTIONAL,
        ..BatchSpec::default()
    };
    let txn_first = leader
        .append(&mut build_simple(txn, 10, 100), APPEND)
        .unwrap()
        .first_offset;
    for _ in 0..20 {
        let mut b = build_simple(BatchSpec::default(), 10, 100);
        leader.append(&mut b, APPEND).unwrap();
    }
    let id = PartitionId::new("t", "0123", 0);
    let log: Arc<dyn LocalLog> = leader.clone();
    leader_tiering
        .register(id.clone(), log, POLICY)
        .await
        .unwrap();
    leader_tiering.run_once(now_ms()).await;
    let local_start = leader.offsets().unwrap().local_log_start_offset;
    assert!(
        local_start > txn_first,
        "the transaction's start is remote only"
    );
    let end = leader.offsets().unwrap().log_end_offset;

    // The follower: another broker's tiering service over the same store.
    let follower_tiering = tiering(&remote_dir);
    let follower = open(&root.path().join("follower"), &follower_tiering);
    follower.make_follower(1, 1).unwrap();
    let log: Arc<dyn LocalLog> = follower.clone();
    follower_tiering.register(id, log, POLICY).await.unwrap();
    follower
        .restart_follower_above_remote(1, local_start)
        .await
        .unwrap();
    let (start, open_txns) = follower
        .with_log(|log| (log.log_start_offset(), log.open_transactions()))
        .unwrap();
    assert_eq!(start, local_start);
    assert_eq!(
        open_txns,
        vec![(txn_first, 9)],
        "known from the remote snapshot"
    );

    // The leader's data after the restart point, then its ABORT marker, copied.
    let mut copied = Vec::new();
    leader
        .with_log(|log| {
            let read = log.read(local_start, 1 << 20, end, true).unwrap();
            for s in read.slices {
                copied.extend_from_slice(&s);
            }
        })
        .unwrap();
    follower.append_as_follower(1, &copied, end, 0).unwrap();
    let mut marker = build_marker(9, 0, 0, ControlType::Abort, 10);
    RecordBatchMut::parse(&mut marker)
        .unwrap()
        .set_base_offset(end);
    follower.append_as_follower(1, &marker, end + 1, 0).unwrap();
    let aborted = follower
        .with_log(|log| log.aborted_transactions(0, end + 1))
        .unwrap();
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(
        (
            aborted[0].producer_id,
            aborted[0].first_offset,
            aborted[0].last_offset
        ),
        (9, txn_first, end)
    );
}

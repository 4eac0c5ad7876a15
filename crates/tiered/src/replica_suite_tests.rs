//! Tiering with replicas, end to end over the local-directory store: two "brokers" (each its
//! own `TieringManager` and partition directory) share one bucket. The leader uploads, the
//! follower only learns the manifest and deletes local copies; after a leader change the new
//! leader (whose segments rolled at other offsets) continues at the manifest's end with no
//! duplicate and no gap, and the deposed leader's late upload is fenced.

use std::path::Path as FsPath;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use object_store::ObjectStore;

use crate::batch::fixture::make_batch;
use crate::local::list_segments;
use crate::suite_tests::{DirLog, read_all, test_config};
use crate::tiering::{LocalLog, TierPolicy, TieringManager};
use crate::{PartitionId, TierRole, TieredConfig, TieredStorage};

const RECORDS_PER_BATCH: i32 = 5;
const BASE_TS: i64 = 1_000_000;

/// Write the same batches every replica holds (offsets `0..batches*5`), rolled into a new
/// segment file every `roll_every` offsets; returns each batch's bytes by base offset.
fn write_replica(dir: &FsPath, batches: i64, roll_every: i64) -> Vec<(i64, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    let mut out = Vec::new();
    let mut file = Vec::new();
    let mut base = 0;
    for g in 0..batches {
        let offset = g * i64::from(RECORDS_PER_BATCH);
        if offset > base && offset % roll_every == 0 {
            std::fs::write(dir.join(format!("{base:020}.log")), &file).unwrap();
            file.clear();
            base = offset;
        }
        let b = make_batch(
            offset,
            RECORDS_PER_BATCH,
            BASE_TS + g * 10,
            200 + (g as usize % 7) * 31,
        );
        file.extend(&b);
        out.push((offset, b));
    }
    std::fs::write(dir.join(format!("{base:020}.log")), &file).unwrap();
    out
}

/// Seal the active segment by starting an empty one at `offset` (what a roll does).
fn roll(dir: &FsPath, offset: i64) {
    std::fs::write(dir.join(format!("{offset:020}.log")), b"").unwrap();
}

async fn log_objects(
    store: &Arc<dyn ObjectStore>,
    storage: &TieredStorage,
    id: &PartitionId,
) -> Vec<String> {
    let mut keys: Vec<String> = store
        .list(Some(&storage.layout().partition_prefix(id)))
        .map(|m| m.unwrap().location.to_string())
        .filter(|k| futures::future::ready(k.ends_with(".log")))
        .collect()
        .await;
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_uploads_follower_deletes_new_leader_resumes_and_old_leader_is_fenced() {
    let tmp = tempfile::tempdir().unwrap();
    let config = TieredConfig {
        store: crate::StoreSpec::Local {
            path: tmp.path().join("remote"),
        },
        ..test_config()
    };
    let store = crate::build_store(&config).unwrap();
    let id = PartitionId::new("orders", "r3p1", 0);
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    };
    // Replica A rolls every 100 offsets, replica B every 150: the same 120 batches.
    let (dir_a, dir_b) = (tmp.path().join("a/orders-0"), tmp.path().join("b/orders-0"));
    let batches = write_replica(&dir_a, 120, 100);
    write_replica(&dir_b, 120, 150);
    let log_a = Arc::new(DirLog::leader(dir_a.clone()));
    *log_a.role.lock() = TierRole::Leader { leader_epoch: 1 };
    let log_b = Arc::new(DirLog::leader(dir_b.clone()));
    *log_b.role.lock() = TierRole::Follower;
    let storage_a = TieredStorage::with_store(config.clone(), store.clone());
    let storage_b = TieredStorage::with_store(config.clone(), store.clone());
    let (mgr_a, mgr_b) = (
        TieringManager::new(storage_a.clone()),
        TieringManager::new(storage_b.clone()),
    );
    let part_a = mgr_a
        .register(id.clone(), log_a.clone(), policy)
        .await
        .unwrap();
    let part_b = mgr_b
        .register(id.clone(), log_b.clone(), policy)
        .await
        .unwrap();

    // The follower runs first: it uploads nothing, deletes nothing.
    mgr_b.run_once(BASE_TS).await;
    assert!(log_objects(&store, &storage_a, &id).await.is_empty());
    assert_eq!(list_segments(&dir_b).unwrap().len(), 4);

    // The leader uploads its 5 sealed segments (0..500) and deletes them locally.
    mgr_a.run_once(BASE_TS).await;
    let m = part_a.manifest();
    assert_eq!(m.leader_epoch, 1);
    assert_eq!(m.next_offset(), Some(500));
    assert_eq!(log_objects(&store, &storage_a, &id).await.len(), 5);
    assert_eq!(log_a.local_log_start_offset(), 500);

    // The follower learns the manifest; its high watermark bounds what it deletes.
    log_b.high_watermark.store(320, Ordering::SeqCst);
    mgr_b.run_once(BASE_TS).await;
    assert_eq!(*part_b.manifest(), *m);
    assert_eq!(
        log_b.local_log_start_offset(),
        300,
        "only below its high watermark"
    );
    log_b.high_watermark.store(600, Ordering::SeqCst);
    mgr_b.run_once(BASE_TS).await;
    assert_eq!(
        log_b.local_log_start_offset(),
        450,
        "every local segment wholly remote is gone; 450.. straddles the remote end"
    );
    assert_eq!(
        log_objects(&store, &storage_a, &id).await.len(),
        5,
        "no copy by the follower"
    );
    // Clients of the follower see the true log start.
    assert_eq!(mgr_b.log_start_offset("orders", 0, 450), 0);

    // Leader change: B leads in epoch 2 and seals 450..600, which straddles the remote end.
    *log_b.role.lock() = TierRole::Leader { leader_epoch: 2 };
    roll(&dir_b, 600);
    mgr_b.run_once(BASE_TS).await;
    let m2 = part_b.manifest();
    assert_eq!(m2.leader_epoch, 2);
    let ranges: Vec<(i64, i64)> = m2
        .segments
        .iter()
        .map(|s| (s.base_offset, s.last_offset))
        .collect();
    assert_eq!(
        ranges,
        [
            (0, 99),
            (100, 199),
            (200, 299),
            (300, 399),
            (400, 499),
            (500, 599)
        ],
        "continues at the old leader's end: no duplicate, no gap"
    );
    assert_eq!(log_objects(&store, &storage_b, &id).await.len(), 6);
    assert_eq!(log_b.local_log_start_offset(), 600);

    // The deposed leader still thinks it leads in epoch 1 and seals 500..600: fenced.
    roll(&dir_a, 600);
    mgr_a.run_once(BASE_TS).await;
    let stored = crate::manifest::load(store.as_ref(), &storage_a.layout().manifest(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, *m2, "the newer leader's manifest stands");
    assert_eq!(
        log_objects(&store, &storage_a, &id).await.len(),
        6,
        "the fenced upload removed its objects"
    );
    assert_eq!(
        log_a.local_log_start_offset(),
        500,
        "nothing deleted on a fenced upload"
    );

    // Everything reads back from remote through the new leader, byte for byte.
    let want: Vec<u8> = batches
        .iter()
        .filter(|(o, _)| *o < 600)
        .flat_map(|(_, b)| b.clone())
        .collect();
    assert_eq!(read_all(&storage_b, &part_b, 0, 600).await.unwrap(), want);
}

//! Producer snapshots in remote storage: each segment goes up with the state at its end (the
//! local `<next base>.snapshot`), the manifest records that offset, and a replica starting at a
//! segment's end finds exactly that object.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::layout::ObjectKind;
use crate::local::list_segments;
use crate::suite_tests::{DirLog, test_config, write_partition};
use crate::tiering::{TierPolicy, TieringManager};
use crate::{PartitionId, TieredStorage};

fn snapshot_bytes(offset: i64) -> Vec<u8> {
    format!("state as of {offset}").into_bytes()
}

#[tokio::test]
async fn each_segment_is_uploaded_with_the_snapshot_at_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    std::fs::create_dir_all(&dir).unwrap();
    write_partition(&dir);
    let bases: Vec<i64> = list_segments(&dir).unwrap().iter().map(|s| s.0).collect();
    assert!(bases.len() >= 4, "{bases:?}");
    // The log writes `<offset>.snapshot` when it rolls at `offset`; the one at the third
    // segment's end is missing (lost: snapshots are not fsynced).
    let missing = bases[3];
    for &b in &bases {
        if b != missing {
            std::fs::write(dir.join(format!("{b:020}.snapshot")), snapshot_bytes(b)).unwrap();
        }
    }
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let storage = TieredStorage::with_store(test_config(), store.clone());
    let mgr = TieringManager::new(storage.clone());
    let id = PartitionId::new("orders", "s1n2p3", 0);
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: -1,
        retention_ms: -1,
        retention_bytes: -1,
    };
    let log = Arc::new(DirLog::leader(dir.clone()));
    let part = mgr.register(id.clone(), log, policy).await.unwrap();
    mgr.run_once(1_000_000).await;
    let m = part.manifest();
    assert_eq!(m.segments.len(), bases.len() - 1);
    for (i, seg) in m.segments.iter().enumerate() {
        let end = bases[i + 1];
        if end == missing {
            assert_eq!(seg.producer_snapshot_offset, None);
            assert!(!seg.objects.contains(&ObjectKind::ProducerSnapshot));
            assert!(
                storage
                    .producer_snapshot_at(&part, end)
                    .await
                    .unwrap()
                    .is_none()
            );
            continue;
        }
        assert_eq!(seg.producer_snapshot_offset, Some(end), "segment {i}");
        let key = storage.layout().segment_object(
            &id,
            seg.base_offset,
            &seg.segment_id,
            ObjectKind::ProducerSnapshot,
        );
        let object = store.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(
            &object[..],
            &snapshot_bytes(end)[..],
            "segment {i}: not its end state"
        );
        let found = storage.producer_snapshot_at(&part, end).await.unwrap();
        assert_eq!(found.as_deref(), Some(&snapshot_bytes(end)[..]));
        // A leader whose local log starts inside this segment: restart at its end.
        let (at, bytes) = storage
            .producer_snapshot_for_local_start(&part, seg.base_offset + 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((at, &bytes[..]), (end, &snapshot_bytes(end)[..]));
    }
    // No segment ends at the first base (that snapshot is the state at the start).
    assert!(
        storage
            .producer_snapshot_at(&part, bases[0])
            .await
            .unwrap()
            .is_none()
    );
}

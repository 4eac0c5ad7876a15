//! Remote transaction indexes end to end over an in-memory store: uploaded with their
//! segment, collected across segments as Kafka's `collectAbortedTransactions`, manifests from
//! before the field still read, damaged objects refused.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use streamforge_log::{AbortedTxn, encode_txn_index};

use crate::layout::ObjectKind;
use crate::local::LocalSegment;
use crate::suite_tests::{DirLog, test_config, write_partition};
use crate::tiering::{TierPolicy, TieringManager};
use crate::txn_index::{RemoteAborted, entries_for_upload};
use crate::{PartitionId, RemotePartition, TieredError, TieredStorage};

fn e(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

/// Segment 0 (offsets 0..=99) ends two aborted transactions, segment 2 (200..=299) one,
/// whose transaction began in segment 0; the others none.
fn indexes() -> [(i64, Vec<AbortedTxn>); 2] {
    [
        (0, vec![e(1, 3, 42, 43), e(2, 50, 77, 78)]),
        (200, vec![e(3, 5, 230, 231)]),
    ]
}

struct Tiered {
    _tmp: tempfile::TempDir,
    store: Arc<dyn ObjectStore>,
    storage: TieredStorage,
    part: Arc<RemotePartition>,
    id: PartitionId,
}

/// Five sealed segments with `.txnindex` files as the log writes them, uploaded.
async fn uploaded() -> Tiered {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    std::fs::create_dir_all(&dir).unwrap();
    write_partition(&dir);
    for (base, entries) in indexes() {
        let path = dir.join(format!("{base:020}.txnindex"));
        std::fs::write(path, encode_txn_index(&entries)).unwrap();
    }
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let storage = TieredStorage::with_store(test_config(), store.clone());
    let mgr = TieringManager::new(storage.clone());
    let id = PartitionId::new("orders", "q1w2e3", 0);
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    };
    let log = Arc::new(DirLog::leader(dir));
    let part = mgr.register(id.clone(), log, policy).await.unwrap();
    mgr.run_once(1_000_000).await;
    assert_eq!(part.manifest().segments.len(), 5);
    Tiered {
        _tmp: tmp,
        store,
        storage,
        part,
        id,
    }
}

async fn collect(t: &Tiered, start: i64, upper: i64) -> RemoteAborted {
    t.storage
        .aborted_transactions(&t.part, start, upper)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_upload_carries_the_segments_transaction_index() {
    let t = uploaded().await;
    let m = t.part.manifest();
    let counts: Vec<Option<u32>> = m.segments.iter().map(|s| s.txn_index_entries).collect();
    assert_eq!(counts, [Some(2), Some(0), Some(1), Some(0), Some(0)]);
    for (seg, (base, entries)) in [&m.segments[0], &m.segments[2]].into_iter().zip(indexes()) {
        assert_eq!(seg.base_offset, base);
        assert!(seg.objects.contains(&ObjectKind::TxnIndex));
        let key =
            t.storage
                .layout()
                .segment_object(&t.id, base, &seg.segment_id, ObjectKind::TxnIndex);
        assert!(key.as_ref().ends_with(".txnindex"));
        let stored = t.store.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(
            &stored[..],
            &encode_txn_index(&entries)[..],
            "the log's format"
        );
    }
    assert!(!m.segments[1].objects.contains(&ObjectKind::TxnIndex));
}

#[tokio::test]
async fn aborted_transactions_are_collected_from_the_segment_read_onward() {
    let t = uploaded().await;
    // Within segment 0: the first entry's LSO passes the range, the walk stops.
    let found = collect(&t, 0, 10).await;
    assert_eq!(found.aborted, vec![e(1, 3, 42, 43)]);
    assert!(found.complete);
    let found = collect(&t, 60, 70).await;
    assert_eq!(found.aborted, vec![e(2, 50, 77, 78)]);
    assert!(found.complete);
    // Segment 1 has no index; producer 3's transaction began before and ends in segment 2.
    let found = collect(&t, 150, 160).await;
    assert_eq!(found.aborted, vec![e(3, 5, 230, 231)]);
    assert!(found.complete);
    // Past every remote marker: nothing remote, and the local index must be asked.
    let found = collect(&t, 240, 250).await;
    assert_eq!(found, RemoteAborted::default());
    // Below the remote start no segment holds the offset: the walk starts at the first.
    assert_eq!(collect(&t, -5, 4).await.aborted, vec![e(1, 3, 42, 43)]);
}

#[tokio::test]
async fn a_manifest_from_before_transaction_indexes_reads_as_no_aborts() {
    let t = uploaded().await;
    // Rewrite the stored manifest as a broker without transaction indexes wrote it.
    let key = t.storage.layout().manifest(&t.id);
    let bytes = t.store.get(&key).await.unwrap().bytes().await.unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    for seg in json["segments"].as_array_mut().unwrap() {
        let seg = seg.as_object_mut().unwrap();
        assert!(seg.remove("txn_index_entries").is_some());
        seg["objects"]
            .as_array_mut()
            .unwrap()
            .retain(|k| k != "txn_index");
    }
    let old = serde_json::to_vec(&json).unwrap();
    t.store.put(&key, PutPayload::from(old)).await.unwrap();

    let storage = TieredStorage::with_store(test_config(), t.store.clone());
    let part = storage.open_partition(t.id.clone()).await.unwrap();
    let m = part.manifest();
    assert!(m.segments.iter().all(|s| s.txn_index_entries.is_none()));
    let found = storage.aborted_transactions(&part, 0, 500).await.unwrap();
    assert_eq!(found, RemoteAborted::default(), "unknown is read as none");
    let data = storage.read(&part, 0, 1 << 20, i64::MAX, true).await;
    assert!(!data.unwrap().is_empty(), "the data itself still reads");
}

#[tokio::test]
async fn a_damaged_remote_transaction_index_is_an_error() {
    let t = uploaded().await;
    let seg = t.part.manifest().segments[0].clone();
    let key = t
        .storage
        .layout()
        .segment_object(&t.id, 0, &seg.segment_id, ObjectKind::TxnIndex);
    let good = encode_txn_index(&indexes()[0].1);
    let mut bad_version = good.clone();
    bad_version[0] = 0x7f;
    let reversed = encode_txn_index(&[e(2, 50, 77, 78), e(1, 3, 42, 43)]);
    for damaged in [
        &good[..good.len() - 3],
        &bad_version[..],
        &reversed[..],
        &[][..],
    ] {
        t.store
            .put(&key, PutPayload::from(damaged.to_vec()))
            .await
            .unwrap();
        // A fresh service: nothing cached.
        let storage = TieredStorage::with_store(test_config(), t.store.clone());
        let part = storage.open_partition(t.id.clone()).await.unwrap();
        let err = storage
            .aborted_transactions(&part, 0, 10)
            .await
            .unwrap_err();
        assert!(
            matches!(err, TieredError::BadMetadata { .. } | TieredError::Store(_)),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_partial_upload_takes_only_the_markers_past_the_remote_end() {
    let tmp = tempfile::tempdir().unwrap();
    let seg = LocalSegment {
        base_offset: 0,
        next_base_offset: 100,
        log_path: tmp.path().join(format!("{:020}.log", 0)),
        size_bytes: 0,
    };
    assert_eq!(entries_for_upload(&seg, 0, 99).await.unwrap(), vec![]);
    let entries = &indexes()[0].1;
    std::fs::write(
        tmp.path().join(format!("{:020}.txnindex", 0)),
        encode_txn_index(entries),
    )
    .unwrap();
    assert_eq!(entries_for_upload(&seg, 0, 99).await.unwrap(), *entries);
    assert_eq!(
        entries_for_upload(&seg, 50, 99).await.unwrap(),
        vec![e(2, 50, 77, 78)]
    );
    // A marker past the uploaded range: the local file is wrong, the upload refused.
    assert!(entries_for_upload(&seg, 0, 60).await.is_err());
}

//! read_committed reads of tiered data: the aborted transactions come from the remote
//! transaction indexes (segments moved to object storage) and the local log's index (markers
//! not uploaded yet), as Kafka's `RemoteLogManager.collectAbortedTransactions`.

use std::sync::Arc;

use streamforge_log::{AbortedTxn, LogConfig, TxnMarker};
use streamforge_protocol::batch::TRANSACTIONAL;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::control::ControlType;
use streamforge_tiered::{
    LocalLog, ObjectKind, PartitionId, StoreSpec, TierPolicy, TieredConfig, TieredStorage,
    TieringManager,
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
        chunk_bytes: 8192,
        cache_bytes: 64 << 10,
        index_interval_bytes: 2048,
        ..TieredConfig::default()
    };
    TieringManager::new(TieredStorage::new(config).unwrap())
}

/// One producer's transactional batches (10 records each, sequences continued).
struct Producer {
    id: i64,
    sequence: i32,
}

impl Producer {
    /// Append one batch; returns its base offset.
    fn send(&mut self, p: &Partition) -> i64 {
        let spec = BatchSpec {
            producer_id: self.id,
            producer_epoch: 0,
            base_sequence: self.sequence,
            attributes: TRANSACTIONAL,
            ..BatchSpec::default()
        };
        self.sequence += 10;
        p.append(&mut build_simple(spec, 10, 100), APPEND)
            .unwrap()
            .first_offset
    }

    fn end(&self, p: &Partition, kind: ControlType) -> i64 {
        let marker = TxnMarker {
            producer_id: self.id,
            producer_epoch: 0,
            coordinator_epoch: 0,
            kind,
        };
        p.write_txn_marker(marker).unwrap().first_offset
    }
}

fn read_committed(offset: i64, max_bytes: usize) -> FetchParams {
    FetchParams {
        fetch_offset: offset,
        max_bytes,
        min_one_message: true,
        isolation: FetchIsolation::TxnCommitted,
        replica_id: -1,
    }
}

fn producers(aborted: &[AbortedTxn]) -> Vec<i64> {
    aborted.iter().map(|a| a.producer_id).collect()
}

/// Offsets of the scenario: which transaction began and ended where.
struct Layout {
    /// Producer 7: begun at 0, aborted by a marker several (remote) segments later.
    long_first: i64,
    long_marker: i64,
    /// Producer 5: aborted within the first segments.
    short_first: i64,
    /// Producer 9: begun in remote data, aborted by a marker in the local active segment.
    open_first: i64,
    open_marker: i64,
}

/// A transactional log: aborts, a commit, plain data to roll segments; then tiered with
/// local retention 0, so every sealed segment is remote only.
async fn tiered_transactional_log(p: &Arc<Partition>, tiering: &Arc<TieringManager>) -> Layout {
    let (mut long, mut short) = (
        Producer { id: 7, sequence: 0 },
        Producer { id: 5, sequence: 0 },
    );
    let (mut committed, mut open) = (
        Producer { id: 6, sequence: 0 },
        Producer { id: 9, sequence: 0 },
    );
    let long_first = long.send(p);
    let short_first = short.send(p);
    for _ in 0..2 {
        short.send(p);
    }
    short.end(p, ControlType::Abort);
    for _ in 0..3 {
        committed.send(p);
    }
    committed.end(p, ControlType::Commit);
    let open_first = open.send(p);
    for _ in 0..6 {
        long.send(p);
    }
    let long_marker = long.end(p, ControlType::Abort);
    for i in 0..20 {
        let spec = BatchSpec {
            base_timestamp: 1_000 + i,
            ..BatchSpec::default()
        };
        p.append(&mut build_simple(spec, 10, 100), APPEND).unwrap();
    }
    let open_marker = open.end(p, ControlType::Abort);
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    };
    let log: Arc<dyn LocalLog> = p.clone();
    tiering
        .register(PartitionId::new("t", "0123", 0), log, policy)
        .await
        .unwrap();
    tiering.run_once(now_ms()).await;
    Layout {
        long_first,
        long_marker,
        short_first,
        open_first,
        open_marker,
    }
}

#[tokio::test]
async fn read_committed_of_tiered_data_reports_the_aborts_of_remote_and_local_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let tiering = tiering(&dir.path().join("remote"));
    let p = open(dir.path(), &tiering);
    let at = tiered_transactional_log(&p, &tiering).await;
    let offsets = p.offsets().unwrap();
    assert!(
        offsets.local_log_start_offset > at.long_marker,
        "both earlier aborts are remote only (local start {})",
        offsets.local_log_start_offset
    );
    assert!(at.open_marker >= offsets.local_log_start_offset);
    let local = p
        .with_log(|log| log.aborted_transactions(0, i64::MAX))
        .unwrap();
    assert_eq!(
        producers(&local),
        vec![9],
        "local retention dropped the rest"
    );

    // The uploads carry a transaction index where a segment holds an ABORT marker.
    let remote = p.remote().unwrap();
    let manifest = remote.manifest();
    let counted: u32 = manifest
        .segments
        .iter()
        .map(|s| s.txn_index_entries.expect("known"))
        .sum();
    assert_eq!(counted, 2);
    let listed = manifest.segments.iter();
    assert_eq!(
        listed
            .filter(|s| s.objects.contains(&ObjectKind::TxnIndex))
            .count(),
        2
    );

    // The first batch only: producer 7's transaction began in it and its marker is in a
    // later remote segment (the walk goes on until an entry's LSO passes the range).
    let first = p.read(read_committed(0, 1)).await.unwrap();
    assert!(first.records.unwrap().bytes > 0);
    assert_eq!(producers(&first.aborted), vec![7]);
    assert_eq!(first.aborted[0].first_offset, at.long_first);

    // From producer 5's first batch: both remote aborts overlap it.
    let short = p
        .read(read_committed(at.short_first, 1 << 20))
        .await
        .unwrap();
    let mut found = producers(&short.aborted);
    found.sort_unstable();
    assert_eq!(found, vec![5, 7]);

    // From producer 9's first batch: its marker is local (the in-memory index), producer 7's
    // remote, and no remote entry's LSO reaches the range, so both are consulted.
    let open = p.read(read_committed(at.open_first, 1)).await.unwrap();
    assert_eq!(producers(&open.aborted), vec![7, 9]);

    // read_uncommitted reads the same remote data and gets no aborted transactions.
    let uncommitted = FetchParams {
        isolation: FetchIsolation::HighWatermark,
        ..read_committed(0, 1 << 20)
    };
    let all = p.read(uncommitted).await.unwrap();
    assert!(all.records.unwrap().bytes > 0);
    assert!(all.aborted.is_empty());
}

#[tokio::test]
async fn a_damaged_remote_transaction_index_fails_the_read_committed_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let remote_dir = dir.path().join("remote");
    let tiering = tiering(&remote_dir);
    let p = open(dir.path(), &tiering);
    tiered_transactional_log(&p, &tiering).await;
    // Cut every remote transaction index object short.
    let mut damaged = 0;
    for entry in walk(&remote_dir) {
        if entry.extension().is_some_and(|e| e == "txnindex") {
            let bytes = std::fs::read(&entry).unwrap();
            std::fs::write(&entry, &bytes[..bytes.len() - 1]).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 2);
    let read = p.read(read_committed(0, 1)).await.unwrap();
    let e = read.records.unwrap_err();
    assert_eq!(e.kafka_code(), ResponseError::KafkaStorageError.code());
    assert!(read.aborted.is_empty());
    // read_uncommitted does not need the index: served.
    let uncommitted = FetchParams {
        isolation: FetchIsolation::HighWatermark,
        ..read_committed(0, 1)
    };
    assert!(p.read(uncommitted).await.unwrap().records.is_ok());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

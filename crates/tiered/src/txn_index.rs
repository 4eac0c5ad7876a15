//! Remote aborted-transaction indexes (KIP-405's `LogSegmentData.transactionIndex`).
//!
//! Each uploaded segment that ends aborted transactions gets a `TxnIndex` object: the
//! segment's `.txnindex` entries (the log's format, `streamforge_log::encode_txn_index`) whose
//! ABORT marker lies in the uploaded range. The manifest entry counts them
//! (`txn_index_entries`), so a segment without aborts costs no GET, and a reader knows the
//! object's exact size before it asks for it.
//!
//! A read_committed Fetch below the local log start needs the aborted transactions that
//! overlap what it returns: Kafka's `RemoteLogManager.collectAbortedTransactions` walks the
//! remote segments from the one read onward (a transaction begun in the range read may be
//! aborted by a marker in any later segment), and stops at the first entry whose last stable
//! offset reaches the upper bound (no transaction begun before it is still open then); if no
//! remote entry does, the caller continues with the local log's index.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use streamforge_log::{AbortedTxn, TXN_INDEX_ENTRY_BYTES, decode_txn_index, encode_txn_index};

use crate::error::{Result, TieredError};
use crate::layout::ObjectKind;
use crate::local::LocalSegment;
use crate::manifest::{RemoteSegment, TXN_INDEX_ENTRIES_MAX};
use crate::stats::add;
use crate::{RemotePartition, Shared};

/// Bytes of decoded remote transaction indexes kept in memory at most.
pub const TXN_INDEX_CACHE_BYTES_MAX: u64 = 16 << 20;
/// Remote transaction index objects one read consults at most. The walk ends at the first
/// abort after the range read unless a transaction begun in that range is still open there,
/// so only a transaction open across this many segments with aborts reaches it; the read then
/// fails (retriable) rather than return aborted records as committed.
pub const TXN_INDEXES_PER_READ_MAX: usize = 1024;

/// The aborted transactions found in remote indexes for one read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RemoteAborted {
    /// Transactions aborted at or after the start and begun before the upper bound.
    pub aborted: Vec<AbortedTxn>,
    /// An entry's last stable offset reached the upper bound: later indexes (remote or local)
    /// cannot add anything.
    pub complete: bool,
}

/// The entries of a local segment's `.txnindex` to upload with it: those whose marker lies in
/// `[from_offset, last_offset]` (a partial upload starts at `from_offset`; entries below it
/// belong to the remote segment uploaded before). No file: no aborted transactions.
pub(crate) async fn entries_for_upload(
    seg: &LocalSegment,
    from_offset: i64,
    last_offset: i64,
) -> Result<Vec<AbortedTxn>> {
    let Some(path) = seg.companion(ObjectKind::TxnIndex) else {
        return Ok(Vec::new());
    };
    let path_str = path.display().to_string();
    let corrupt = |reason: String| TieredError::LocalCorrupt {
        path: path_str.clone(),
        position: 0,
        reason,
    };
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(TieredError::LocalIo {
                path: path_str,
                source: e,
            });
        }
    };
    let entries = decode_txn_index(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let kept: Vec<AbortedTxn> = entries
        .into_iter()
        .filter(|e| e.last_offset >= from_offset)
        .collect();
    if let Some(e) = kept.iter().find(|e| e.last_offset > last_offset) {
        return Err(corrupt(format!(
            "aborted transaction {e:?} ends past the segment's last offset {last_offset}"
        )));
    }
    if kept.len() > TXN_INDEX_ENTRIES_MAX as usize {
        return Err(corrupt(format!(
            "{} aborted transactions exceed {TXN_INDEX_ENTRIES_MAX}",
            kept.len()
        )));
    }
    Ok(kept)
}

/// Put the segment's aborted-transaction index (its entries from `from_offset` on) when it has
/// any; returns how many entries it holds (at most `TXN_INDEX_ENTRIES_MAX`).
pub(crate) async fn upload(
    sh: &Shared,
    seg: &LocalSegment,
    from_offset: Option<i64>,
    last_offset: i64,
    key: Path,
    written: &mut Vec<Path>,
) -> Result<u32> {
    let from = from_offset.unwrap_or(i64::MIN);
    let aborted = entries_for_upload(seg, from, last_offset).await?;
    if aborted.is_empty() {
        return Ok(0);
    }
    written.push(key.clone());
    let data = Bytes::from(encode(&aborted));
    sh.config
        .retry
        .run("put transaction index", || {
            let p = PutPayload::from(data.clone());
            async { Ok(sh.store.put(&key, p).await.map(|_| ())?) }
        })
        .await?;
    // `entries_for_upload` bounds the count by TXN_INDEX_ENTRIES_MAX (a u32).
    Ok(u32::try_from(aborted.len()).expect("bounded by TXN_INDEX_ENTRIES_MAX"))
}

/// The object bytes of `entries`.
pub(crate) fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    encode_txn_index(entries)
}

/// Decode a `TxnIndex` object of `seg`: exactly the counted entries, each ending in the
/// segment, in marker order. Damage is an error, never a panic or a silent drop.
pub fn decode(key: &str, seg: &RemoteSegment, bytes: &[u8]) -> Result<Vec<AbortedTxn>> {
    let bad = |reason: String| TieredError::BadMetadata {
        key: key.to_string(),
        reason,
    };
    let expected = seg.txn_index_entries.unwrap_or(0) as usize * TXN_INDEX_ENTRY_BYTES;
    if bytes.len() != expected {
        return Err(bad(format!(
            "{} bytes, the manifest counts {:?} entries ({expected} bytes)",
            bytes.len(),
            seg.txn_index_entries
        )));
    }
    let entries = decode_txn_index(bytes).map_err(|e| bad(e.to_string()))?;
    let mut previous = i64::MIN;
    for e in &entries {
        if e.last_offset < seg.base_offset || e.last_offset > seg.last_offset {
            return Err(bad(format!(
                "aborted transaction {e:?} ends outside the segment {}..={}",
                seg.base_offset, seg.last_offset
            )));
        }
        if e.last_offset <= previous {
            return Err(bad(format!(
                "aborted transaction {e:?} out of marker order"
            )));
        }
        previous = e.last_offset;
    }
    Ok(entries)
}

/// `seg`'s entries: from the cache, or one ranged GET of exactly the counted bytes.
async fn load(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    seg: &RemoteSegment,
) -> Result<Arc<[AbortedTxn]>> {
    let count = seg.txn_index_entries.unwrap_or(0);
    if count == 0 {
        return Ok(Arc::from(Vec::new()));
    }
    let id: Arc<str> = seg.segment_id.as_str().into();
    if let Some(entries) = sh.txn_indexes.lock().get(&id) {
        return Ok(entries);
    }
    let key = sh.layout.segment_object(
        &part.id,
        seg.base_offset,
        &seg.segment_id,
        ObjectKind::TxnIndex,
    );
    let bytes_len = count as usize * TXN_INDEX_ENTRY_BYTES;
    add(&sh.stats.get_requests, 1);
    let bytes = sh.store.get_range(&key, 0..bytes_len as u64).await?;
    let entries: Arc<[AbortedTxn]> = decode(key.as_ref(), seg, &bytes)?.into();
    sh.txn_indexes
        .lock()
        .insert(id, entries.clone(), bytes_len as u64);
    Ok(entries)
}

/// Kafka's `collectAbortedTransactions` over remote data: the transactions aborted at or
/// after `start` and begun before `upper`, from the remote segment holding `start` onward.
pub(crate) async fn collect(
    sh: &Arc<Shared>,
    part: &RemotePartition,
    start: i64,
    upper: i64,
) -> Result<RemoteAborted> {
    let manifest = part.manifest();
    let mut found = RemoteAborted::default();
    let first = manifest.segments.partition_point(|s| s.last_offset < start);
    let mut loaded = 0usize;
    for seg in &manifest.segments[first..] {
        if seg.txn_index_entries.unwrap_or(0) == 0 {
            continue;
        }
        loaded += 1;
        if loaded > TXN_INDEXES_PER_READ_MAX {
            return Err(TieredError::TxnIndexWalkTooLong {
                start,
                upper,
                indexes: TXN_INDEXES_PER_READ_MAX,
            });
        }
        for e in load(sh, part, seg).await?.iter() {
            if e.last_offset >= start && e.first_offset < upper {
                found.aborted.push(*e);
            }
            if e.last_stable_offset >= upper {
                found.complete = true;
                return Ok(found);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::TXN_INDEX_ENTRIES_MAX;

    fn e(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    fn seg(entries: u32) -> RemoteSegment {
        RemoteSegment {
            segment_id: "s".into(),
            base_offset: 10,
            last_offset: 19,
            size_bytes: 100,
            max_timestamp_ms: 0,
            max_timestamp_offset: 0,
            batch_count: 1,
            objects: vec![
                ObjectKind::Log,
                ObjectKind::RemoteIndex,
                ObjectKind::TxnIndex,
            ],
            uploaded_at_ms: 0,
            txn_index_entries: Some(entries),
            producer_snapshot_offset: None,
        }
    }

    #[test]
    fn an_index_object_round_trips() {
        let entries = vec![e(1, 3, 12), e(2, 11, 15)];
        let bytes = encode(&entries);
        assert_eq!(decode("k", &seg(2), &bytes).unwrap(), entries);
    }

    #[test]
    fn a_damaged_index_object_is_an_error() {
        let bytes = encode(&[e(1, 3, 12), e(2, 11, 15)]);
        // Shorter or longer than the manifest says (a torn object is not silently cut).
        assert!(decode("k", &seg(2), &bytes[..bytes.len() - 1]).is_err());
        assert!(decode("k", &seg(1), &bytes).is_err());
        assert!(decode("k", &seg(3), &bytes).is_err());
        // A bad version, impossible offsets, a marker outside the segment, out of order.
        let mut bad = bytes.clone();
        bad[1] = 7;
        assert!(decode("k", &seg(2), &bad).is_err());
        assert!(decode("k", &seg(1), &encode(&[e(1, 13, 12)])).is_err());
        assert!(decode("k", &seg(1), &encode(&[e(1, 3, 25)])).is_err());
        assert!(decode("k", &seg(2), &encode(&[e(1, 3, 15), e(2, 4, 12)])).is_err());
    }

    #[test]
    fn the_entry_bound_fits_the_cache() {
        let bytes = u64::from(TXN_INDEX_ENTRIES_MAX) * TXN_INDEX_ENTRY_BYTES as u64;
        assert!(
            bytes <= TXN_INDEX_CACHE_BYTES_MAX,
            "one full index is cacheable"
        );
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), n in 0u32..12) {
            let _ = decode("k", &seg(n), &bytes);
        }
    }
}

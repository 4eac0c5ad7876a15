//! The aborted-transaction index (Kafka's `.txnindex`): per segment, one entry per transaction
//! aborted by a marker in that segment, so a read_committed Fetch can tell the consumer which
//! producers' records in the range it reads to drop (`aborted_transactions`).
//!
//! File format (Kafka's, big-endian), 34 bytes per entry: version i16 (= 0), producer id i64,
//! first offset i64, last offset i64 (the ABORT marker), last stable offset i64 (the LSO right
//! after the abort). `<base>.txnindex` sits next to the segment's `.log` and is deleted with it.
//!
//! The log keeps every entry of its segments in memory (ordered by last offset, as markers are
//! appended in offset order): one entry per aborted transaction per partition, a few dozen bytes
//! against the transaction's data. Each entry is written (and fsynced: aborts are rare and a
//! lost entry would expose aborted records) when its marker is appended; recovery rebuilds the
//! entries of the replayed range from the markers themselves, so the files and the log agree.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::segment::file_stem;

/// Entry version Kafka writes.
const ENTRY_VERSION: i16 = 0;
/// Bytes of one entry on disk.
pub const ENTRY_BYTES: usize = 2 + 8 + 8 + 8 + 8;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The last stable offset right after the abort.
    pub last_stable_offset: i64,
}

pub fn txn_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.txnindex", file_stem(base_offset)))
}

fn encode(e: &AbortedTxn, out: &mut Vec<u8>) {
    out.extend_from_slice(&ENTRY_VERSION.to_be_bytes());
    out.extend_from_slice(&e.producer_id.to_be_bytes());
    out.extend_from_slice(&e.first_offset.to_be_bytes());
    out.extend_from_slice(&e.last_offset.to_be_bytes());
    out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
}

/// The file bytes of `entries` (the format of a whole `.txnindex` file).
pub fn encode_entries(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for e in entries {
        encode(e, &mut buf);
    }
    buf
}

fn be_i64(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    i64::from_be_bytes(a)
}

/// Decode a `.txnindex` file's bytes. A torn last entry (a crash mid-write) is dropped; an
/// entry with another version or impossible offsets is an error.
pub fn decode(bytes: &[u8]) -> io::Result<Vec<AbortedTxn>> {
    let mut out = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
    for chunk in bytes.chunks_exact(ENTRY_BYTES) {
        let version = i16::from_be_bytes([chunk[0], chunk[1]]);
        let e = AbortedTxn {
            producer_id: be_i64(&chunk[2..]),
            first_offset: be_i64(&chunk[10..]),
            last_offset: be_i64(&chunk[18..]),
            last_stable_offset: be_i64(&chunk[26..]),
        };
        if version != ENTRY_VERSION || e.first_offset > e.last_offset || e.first_offset < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad transaction index entry {e:?} (version {version})"),
            ));
        }
        out.push(e);
    }
    Ok(out)
}

/// Read the entries of segment `base` (none if the file does not exist).
pub fn read(dir: &Path, base: i64) -> io::Result<Vec<AbortedTxn>> {
    match fs::read(txn_index_path(dir, base)) {
        Ok(bytes) => decode(&bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Append one entry to segment `base`'s file and fsync it.
pub fn append(dir: &Path, base: i64, entry: &AbortedTxn) -> io::Result<()> {
    let mut buf = Vec::with_capacity(ENTRY_BYTES);
    encode(entry, &mut buf);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(txn_index_path(dir, base))?;
    f.write_all(&buf)?;
    f.sync_data()
}

/// Replace segment `base`'s file with `entries` (temp file + rename; no file when empty).
pub fn rewrite(dir: &Path, base: i64, entries: &[AbortedTxn]) -> io::Result<()> {
    let path = txn_index_path(dir, base);
    if entries.is_empty() {
        return match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let buf = encode_entries(entries);
    let tmp = path.with_extension("txnindex.tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_data()?;
    }
    fs::rename(&tmp, &path)
}

/// `<base>.txnindex.swap`: a cleaned segment's index, written before the cleaner's swap and
/// installed with it (or by recovery, which completes the swap).
pub fn swap_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{}.txnindex.swap", file_stem(base)))
}

/// Write segment `base`'s swap index (possibly empty) and fsync it.
pub fn write_swap(dir: &Path, base: i64, entries: &[AbortedTxn]) -> io::Result<()> {
    let buf = encode_entries(entries);
    let mut f = fs::File::create(swap_path(dir, base))?;
    f.write_all(&buf)?;
    f.sync_data()
}

/// Install segment `base`'s swap index if there is one: it replaces `<base>.txnindex` (an
/// empty one removes it). Returns whether there was one.
pub fn install_swap(dir: &Path, base: i64) -> io::Result<bool> {
    let swap = swap_path(dir, base);
    let len = match fs::metadata(&swap) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len == 0 {
        for path in [txn_index_path(dir, base), swap] {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    } else {
        fs::rename(&swap, txn_index_path(dir, base))?;
    }
    Ok(true)
}

/// The in-memory aborted-transaction index of one log, ordered by `last_offset`.
#[derive(Debug, Default)]
pub struct AbortedTxns {
    entries: Vec<AbortedTxn>,
}

impl AbortedTxns {
    pub fn push(&mut self, e: AbortedTxn) {
        assert!(
            self.entries
                .last()
                .is_none_or(|prev| prev.last_offset < e.last_offset),
            "aborted transactions are indexed in marker order: {e:?} after {:?}",
            self.entries.last()
        );
        self.entries.push(e);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entries whose marker is in `[from, to)` become `entries` (a cleaned segment's).
    pub fn replace_markers_in(&mut self, from: i64, to: i64, entries: &[AbortedTxn]) {
        assert!(
            entries
                .iter()
                .all(|e| e.last_offset >= from && e.last_offset < to),
            "a cleaned segment's aborted transactions lie in its range [{from}, {to})"
        );
        self.entries
            .retain(|e| e.last_offset < from || e.last_offset >= to);
        let at = self.entries.partition_point(|e| e.last_offset < from);
        self.entries.splice(at..at, entries.iter().copied());
    }

    /// Keep only entries whose marker is in `[from, to)`.
    pub fn retain_markers_in(&mut self, from: i64, to: i64) {
        self.entries
            .retain(|e| e.last_offset >= from && e.last_offset < to);
    }

    /// Entries whose marker is at or after `offset`, in order.
    pub fn markers_from(&self, offset: i64) -> &[AbortedTxn] {
        let i = self.entries.partition_point(|e| e.last_offset < offset);
        &self.entries[i..]
    }

    /// Kafka's `collectAbortedTransactions`: the transactions that overlap `[start, upper)`,
    /// i.e. aborted at or after `start` and begun before `upper`.
    pub fn overlapping(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        self.markers_from(start)
            .iter()
            .filter(|e| e.first_offset < upper)
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn file_round_trip_drops_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), 0, &e(1, 0, 5)).unwrap();
        append(dir.path(), 0, &e(2, 3, 9)).unwrap();
        let mut bytes = fs::read(txn_index_path(dir.path(), 0)).unwrap();
        assert_eq!(bytes.len(), 2 * ENTRY_BYTES);
        assert_eq!(read(dir.path(), 0).unwrap(), vec![e(1, 0, 5), e(2, 3, 9)]);
        bytes.truncate(ENTRY_BYTES + 7);
        assert_eq!(decode(&bytes).unwrap(), vec![e(1, 0, 5)]);
        rewrite(dir.path(), 0, &[]).unwrap();
        assert!(!txn_index_path(dir.path(), 0).exists());
        assert_eq!(read(dir.path(), 7).unwrap(), vec![]);
    }

    #[test]
    fn overlapping_is_kafkas_rule() {
        let mut a = AbortedTxns::default();
        a.push(e(1, 0, 5));
        a.push(e(2, 3, 9));
        a.push(e(3, 10, 12));
        assert_eq!(a.overlapping(6, 10), vec![e(2, 3, 9)]);
        assert_eq!(a.overlapping(0, 4).len(), 2);
        assert_eq!(a.overlapping(13, 20), vec![]);
        assert_eq!(a.markers_from(6).len(), 2);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}

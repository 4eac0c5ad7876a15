//! Sparse, memory-mapped, binary-searched segment indexes, in Kafka's on-disk format:
//! - offset index (`.index`): 8-byte entries `(relative offset: u32, file position: u32)`;
//! - time index (`.timeindex`): 12-byte entries `(timestamp: i64, relative offset: u32)`.
//!
//! Files are preallocated to `segment.index.bytes` (rounded down to whole entries) while their
//! segment is active and trimmed to their entries when it is sealed or the log is closed, so an
//! existing file's length tells how many entries it holds.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::mmap::IndexMap;

/// Which kind of index a [`SparseIndex`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Offset,
    Time,
}

impl IndexKind {
    pub const fn entry_bytes(self) -> usize {
        match self {
            IndexKind::Offset => 8,
            IndexKind::Time => 12,
        }
    }
}

/// One decoded entry: `key` is the relative offset (offset index) or timestamp (time index);
/// `value` is the file position (offset index) or relative offset (time index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub key: i64,
    pub value: u32,
}

/// A memory-mapped sparse index file.
#[derive(Debug)]
pub struct SparseIndex {
    kind: IndexKind,
    path: PathBuf,
    file: File,
    /// `None` only transiently while resizing, or when the file is empty.
    map: Option<IndexMap>,
    entries: usize,
    max_entries: usize,
}

impl SparseIndex {
    /// Open (or create) `path`. A new file is preallocated to `max_bytes`; an existing file's
    /// entries are all of its whole entries (the file was trimmed when sealed/closed), unless
    /// `reset` is set (the caller will rebuild the index), in which case it starts empty.
    pub fn open(kind: IndexKind, path: &Path, max_bytes: u64, reset: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        let entry = kind.entry_bytes() as u64;
        let entries = if reset { 0 } else { (len / entry) as usize };
        let mut index = SparseIndex {
            kind,
            path: path.to_path_buf(),
            file,
            map: None,
            entries,
            max_entries: 0,
        };
        if reset {
            let want = (max_bytes / entry).max(1) * entry;
            if len == want {
                // Already preallocated (an active segment's index after a crash): map it as is;
                // a `set_len` to the same length still costs an inode update per file.
                index.max_entries = (want / entry) as usize;
                index.map = Some(IndexMap::new(&index.file)?);
            } else {
                index.resize_bytes(want)?;
            }
        } else if len == 0 {
            // A sealed segment with no entries: nothing to map (`expand` maps when needed).
            index.max_entries = 0;
        } else {
            // An existing file keeps its length (a sealed segment's index stays trimmed); the
            // active segment's owner calls `expand`.
            index.max_entries = entries;
            index.map = Some(IndexMap::new(&index.file)?);
        }
        Ok(index)
    }

    pub fn entries(&self) -> usize {
        self.entries
    }
    pub fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    fn resize_bytes(&mut self, bytes: u64) -> io::Result<()> {
        // Module rule 3 of `mmap`: drop the mapping before changing the file's length.
        self.map = None;
        self.file.set_len(bytes)?;
        self.max_entries = (bytes / self.kind.entry_bytes() as u64) as usize;
        if bytes > 0 {
            self.map = Some(IndexMap::new(&self.file)?);
        }
        Ok(())
    }

    /// Shrink the file to exactly its entries (on seal / close).
    pub fn trim(&mut self) -> io::Result<()> {
        let bytes = (self.entries * self.kind.entry_bytes()) as u64;
        if self.file.metadata()?.len() != bytes {
            self.resize_bytes(bytes)?;
        }
        Ok(())
    }

    /// Grow back to `max_bytes` (when a sealed segment becomes active again after truncation).
    pub fn expand(&mut self, max_bytes: u64) -> io::Result<()> {
        let entry = self.kind.entry_bytes() as u64;
        let want = (max_bytes / entry).max(self.entries as u64 + 1) * entry;
        if (self.max_entries as u64) * entry < want {
            self.resize_bytes(want)?;
        }
        Ok(())
    }

    /// Entry `i` (< entries).
    pub fn entry(&self, i: usize) -> Entry {
        let bytes = self.map.as_ref().map(|m| m.as_slice()).unwrap_or(&[]);
        let at = i * self.kind.entry_bytes();
        let e = &bytes[at..at + self.kind.entry_bytes()];
        match self.kind {
            IndexKind::Offset => Entry {
                key: i64::from(u32::from_be_bytes([e[0], e[1], e[2], e[3]])),
                value: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
            },
            IndexKind::Time => Entry {
                key: i64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]),
                value: u32::from_be_bytes([e[8], e[9], e[10], e[11]]),
            },
        }
    }

    pub fn last(&self) -> Option<Entry> {
        self.entries.checked_sub(1).map(|i| self.entry(i))
    }

    /// Append an entry; keys must be non-decreasing (offset keys strictly increasing). Returns
    /// false (and appends nothing) if the index is full. The entry is written with `pwrite`, so
    /// a full disk is an error (ENOSPC) here, not a SIGBUS on a store into an unallocated page.
    pub fn append(&mut self, key: i64, value: u32) -> io::Result<bool> {
        if self.is_full() || self.map.is_none() {
            return Ok(false);
        }
        if let Some(last) = self.last() {
            match self.kind {
                IndexKind::Offset => assert!(key > last.key, "offset index keys must increase"),
                IndexKind::Time => assert!(key >= last.key, "time index keys must not decrease"),
            }
        }
        let at = self.entries * self.kind.entry_bytes();
        let mut entry = [0u8; 12];
        let out = &mut entry[..self.kind.entry_bytes()];
        match self.kind {
            IndexKind::Offset => {
                out[..4].copy_from_slice(&(key as u32).to_be_bytes());
                out[4..8].copy_from_slice(&value.to_be_bytes());
            }
            IndexKind::Time => {
                out[..8].copy_from_slice(&key.to_be_bytes());
                out[8..12].copy_from_slice(&value.to_be_bytes());
            }
        }
        self.file.write_all_at(out, at as u64)?;
        self.entries += 1;
        Ok(true)
    }

    /// Make entry writes fail from now on (a read-only descriptor), as a full disk would.
    #[cfg(test)]
    pub fn fail_writes_for_test(&mut self) {
        self.file = File::open(&self.path).unwrap();
    }

    /// Forget entries past the first `entries` (undo of a failed append).
    pub fn truncate_entries(&mut self, entries: usize) {
        self.entries = self.entries.min(entries);
    }

    /// The last entry whose key is <= `key` (binary search), or `None`.
    pub fn floor(&self, key: i64) -> Option<Entry> {
        // partition_point: number of entries with entry.key <= key.
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).key <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1).map(|i| self.entry(i))
    }

    pub fn clear(&mut self) {
        self.entries = 0;
    }

    /// fsync the file (entries are written with `pwrite`; its length may have changed).
    pub fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Cheap consistency checks on load (as Kafka's `sanityCheck`): whole entries only, and the
    /// last entry within bounds. Returns a description of the problem.
    pub fn quick_check(&self, max_key: i64, max_value: u64) -> Result<(), String> {
        let len = self.file.metadata().map_err(|e| e.to_string())?.len();
        if len % self.kind.entry_bytes() as u64 != 0 {
            return Err(format!(
                "{}: length {len} is not a multiple of {}",
                self.path.display(),
                self.kind.entry_bytes()
            ));
        }
        if let Some(last) = self.last() {
            let ok = match self.kind {
                IndexKind::Offset => {
                    last.key <= max_key && u64::from(last.value) < max_value.max(1)
                }
                IndexKind::Time => i64::from(last.value) <= max_key,
            };
            if !ok {
                return Err(format!(
                    "{}: last entry {last:?} is out of bounds",
                    self.path.display()
                ));
            }
        }
        // Full ordering check: cheap (a 1 GiB segment has ~262k entries at the default
        // interval) and it keeps binary search meaningful.
        for i in 1..self.entries {
            let (prev, cur) = (self.entry(i - 1), self.entry(i));
            let ordered = match self.kind {
                IndexKind::Offset => cur.key > prev.key && cur.value > prev.value,
                IndexKind::Time => cur.key >= prev.key && cur.value >= prev.value,
            };
            if !ordered {
                return Err(format!(
                    "{}: entry {i} {cur:?} is not after entry {prev:?}",
                    self.path.display()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_floor_trim_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = SparseIndex::open(IndexKind::Offset, &path, 80, true).unwrap();
        for i in 0..10 {
            assert!(idx.append(i * 10 + 5, (i * 100) as u32).unwrap());
        }
        assert!(idx.is_full());
        assert!(!idx.append(1000, 1).unwrap());
        assert_eq!(idx.floor(4), None);
        assert_eq!(idx.floor(5).unwrap().value, 0);
        assert_eq!(idx.floor(44).unwrap().value, 300);
        assert_eq!(idx.floor(10_000).unwrap().value, 900);
        idx.trim().unwrap();
        drop(idx);
        let idx = SparseIndex::open(IndexKind::Offset, &path, 80, false).unwrap();
        assert_eq!(idx.entries(), 10);
        idx.quick_check(1000, 1000).unwrap();
    }

    #[test]
    fn time_index_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.timeindex");
        let mut idx = SparseIndex::open(IndexKind::Time, &path, 1200, true).unwrap();
        assert!(idx.append(1000, 3).unwrap());
        assert!(idx.append(1000, 4).unwrap());
        assert!(idx.append(2000, 9).unwrap());
        assert_eq!(idx.floor(1500).unwrap().value, 4);
        assert_eq!(idx.floor(999), None);
    }
}

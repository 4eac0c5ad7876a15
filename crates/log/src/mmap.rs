//! The only place that maps files into memory (and so the only module allowed `unsafe`).
//!
//! Two kinds of mappings:
//! - [`ReadMap`]: a read-only shared mapping of a segment's `.log` file, handed out to readers as
//!   zero-copy [`Bytes`] (each `Bytes` keeps the mapping alive through an `Arc`).
//! - [`IndexMap`]: a read-only shared mapping of a preallocated (sparse) index file. Entries are
//!   written with `pwrite`, never through the mapping: a store into a page of a sparse file that
//!   has no block behind it raises SIGBUS when the disk is full, where `pwrite` returns ENOSPC.
//!
//! Hazard: touching a page of a mapping past the end of its file raises SIGBUS, and bytes that
//! change under a `&[u8]` break Rust's aliasing rules. The log upholds, and documents in
//! docs/STORAGE.md, these rules:
//! 1. A `.log` file that has ever been mapped is never shrunk or overwritten in place: truncation
//!    writes the kept prefix to a new file and renames it over the old one (the old inode, and so
//!    every outstanding `Bytes`, stays valid until the last reference drops). Deleting (unlinking)
//!    a mapped file is fine for the same reason. Releasing a segment's preallocated blocks
//!    truncates the file to its own size, which changes neither its size nor any byte below it.
//! 2. Readers are only given slices of bytes below the segment's written size, and bytes once
//!    written below that size are never rewritten (appends only add bytes past it).
//! 3. Index files are only resized after their mapping is dropped, index mappings are never
//!    handed out, and nothing is stored through them (reads of a sparse file's holes see zeros).
//!
//! The files live in the broker's own data directory; another process modifying them is outside
//! what any storage engine can defend against (Kafka has the same exposure).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Advice, Mmap, MmapOptions};

/// Alignment of `populate` ranges (a smaller page size than the system's makes the advice fail,
/// which only costs the prefault).
const PAGE_BYTES: usize = 4096;

/// A read-only mapping of the first `len` bytes of a segment file (the file may be shorter than
/// `len` while it is still being appended to; only bytes below its written size are read).
#[derive(Debug, Clone)]
pub struct ReadMap {
    map: Arc<Mmap>,
}

impl ReadMap {
    /// Map `len` bytes of `file` read-only.
    pub fn new(file: &File, len: usize) -> io::Result<ReadMap> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map zero bytes",
            ));
        }
        // SAFETY: the mapping is shared and read-only. Per the module rules, the log never shrinks
        // or rewrites a mapped `.log` file in place (truncation = copy + rename, deletion = unlink
        // which keeps the inode alive while mapped), and readers only slice bytes below the
        // written size, so no page past EOF is touched and no byte changes under a live slice.
        let map = unsafe { MmapOptions::new().len(len).map(file)? };
        Ok(ReadMap { map: Arc::new(map) })
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Zero-copy `Bytes` of `start..end` (must lie within the file's written size; asserted to
    /// lie within the mapping).
    pub fn slice(&self, start: usize, end: usize) -> Bytes {
        assert!(
            start <= end && end <= self.map.len(),
            "slice {start}..{end} outside mapping of {} bytes",
            self.map.len()
        );
        Bytes::from_owner(MapSlice {
            map: Arc::clone(&self.map),
            start,
            end,
        })
    }

    /// Prefault the page tables for `start..end` (a recovery scan is about to read it all),
    /// saving a page fault per 4 KiB. Best effort: older kernels without MADV_POPULATE_READ
    /// just fault.
    pub fn populate(&self, start: usize, end: usize) {
        let end = end.min(self.map.len());
        // Page-aligned start (the mapping itself is).
        let start = start.min(end) & !(PAGE_BYTES - 1);
        if end > start {
            let _ = self
                .map
                .advise_range(Advice::PopulateRead, start, end - start);
        }
    }

    /// Borrow `start..end` (same rules as [`ReadMap::slice`]).
    pub fn bytes(&self, start: usize, end: usize) -> &[u8] {
        &self.map[start..end]
    }
}

/// A window of a shared mapping, owned by a `Bytes`.
struct MapSlice {
    map: Arc<Mmap>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}

/// A read-only shared mapping of a whole index file (entries are written with `pwrite`).
#[derive(Debug)]
pub struct IndexMap {
    map: Mmap,
}

impl IndexMap {
    /// Map the whole of `file` (its length must be > 0) read-only.
    pub fn new(file: &File) -> io::Result<IndexMap> {
        // SAFETY: index files are private to this log; the owning index is the only writer (with
        // `pwrite`, below the file's length, to bytes no reader holds: entries are read by value),
        // it resizes the file only after dropping this mapping (module rule 3), and it never hands
        // out references that outlive a `&self` borrow of the mapping.
        let map = unsafe { MmapOptions::new().map(file)? };
        // Entries are read one page at a time, far apart in time: without this, the first read
        // of a page of the sparse preallocated file faults in a whole readahead window
        // (`read_ahead_kb`, 8 MiB on some virtual disks) of zero-filled pages. Best effort: an
        // error only costs that readahead.
        let _ = map.advise(Advice::Random);
        Ok(IndexMap { map })
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }
}

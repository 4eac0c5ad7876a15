//! Appending to a segment: the write, the disk reservation ahead of it, the index entries, and
//! the undo of an append that failed (a full disk), so the next append retries from the same
//! state.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use streamforge_protocol::batch;

use super::{ReadMap, Segment, map_len};

/// The in-memory state an append changes, to restore when it fails.
#[derive(Debug, Clone, Copy)]
struct UndoPoint {
    offset_entries: usize,
    time_entries: usize,
    bytes_since_index_entry: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    rolling_base_timestamp: Option<i64>,
}

impl Segment {
    /// Append already validated batches with offsets assigned (`bytes` holds whole batches whose
    /// offsets continue from `next_offset`). No heap allocation. On an error (ENOSPC from the
    /// write or from an index entry) nothing changed: the segment's state is as before and the
    /// bytes past its end are cut again, so the next append simply retries.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let start = self.size_bytes;
        self.reserve_ahead(start + bytes.len() as u64);
        let undo = self.undo_point();
        if let Err(e) = self.write_and_index(bytes, start) {
            self.undo(undo, start);
            return Err(e);
        }
        self.size_bytes = start + bytes.len() as u64;
        Ok(())
    }

    fn write_and_index(&mut self, bytes: &[u8], start: u64) -> io::Result<()> {
        self.file.write_all_at(bytes, start)?;
        let new_size = start + bytes.len() as u64;
        if new_size as usize > self.map.len() {
            // Only when one append is larger than `segment.bytes`: map again, larger. The old
            // mapping stays alive for slices already handed out.
            self.map = ReadMap::new(&self.file, map_len(new_size, &self.sizing))?;
            self.map_shared.store(false, Ordering::Relaxed);
        }
        let mut position = start;
        for item in batch::BatchIter::new(bytes) {
            // Callers validated these batches; a failure here is a bug, not bad input.
            let (_, view) =
                item.map_err(|e| io::Error::other(format!("append of invalid batch: {e}")))?;
            self.index_batch(
                position,
                view.last_offset(),
                view.max_timestamp(),
                view.size_bytes() as u64,
            )?;
            position += view.size_bytes() as u64;
        }
        Ok(())
    }

    fn undo_point(&self) -> UndoPoint {
        UndoPoint {
            offset_entries: self.offset_index.entries(),
            time_entries: self.time_index.entries(),
            bytes_since_index_entry: self.bytes_since_index_entry,
            next_offset: self.next_offset,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
            rolling_base_timestamp: self.rolling_base_timestamp,
        }
    }

    /// Restore the state before a failed append at `start` (= the written size).
    fn undo(&mut self, undo: UndoPoint, start: u64) {
        debug_assert_eq!(start, self.size_bytes);
        self.offset_index.truncate_entries(undo.offset_entries);
        self.time_index.truncate_entries(undo.time_entries);
        self.bytes_since_index_entry = undo.bytes_since_index_entry;
        self.next_offset = undo.next_offset;
        self.max_timestamp = undo.max_timestamp;
        self.offset_of_max_timestamp = undo.offset_of_max_timestamp;
        self.rolling_base_timestamp = undo.rolling_base_timestamp;
        // Cut whatever part of the write reached the file. Only bytes at or past the written
        // size go (no reader holds them: mmap module rule 2), and the cut also releases the
        // reservation past it, which the next append makes again.
        if let Err(e) = self.file.set_len(start) {
            tracing::warn!(segment = self.base_offset, error = %e, "cannot cut a failed append; a clean open cuts it");
        }
        self.preallocated_to = start;
        self.reserved_tail = false;
    }

    /// Make sure disk blocks are reserved up to `end`, reserving a whole window past it when
    /// they are not (one `fallocate` per `preallocate_window_bytes` appended). Best effort: a
    /// file system without `fallocate` turns it off for this segment; a full disk just skips it
    /// this time (the write itself reports a full disk, and the next append tries again).
    pub(super) fn reserve_ahead(&mut self, end: u64) {
        let window = self.sizing.preallocate_window_bytes;
        if window == 0 || end <= self.preallocated_to {
            return;
        }
        let from = self.preallocated_to.max(self.size_bytes);
        // Never reserve past `segment.bytes` (unless one append is larger than that).
        let to = end
            .saturating_add(window)
            .min(self.sizing.segment_bytes.max(end));
        let reserved = rustix::fs::fallocate(
            &self.file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            from,
            to - from,
        );
        match reserved {
            Ok(()) => {
                self.preallocated_to = to;
                self.reserved_tail = true;
            }
            Err(rustix::io::Errno::NOSPC) => {
                tracing::debug!(
                    segment = self.base_offset,
                    "disk full: no reservation ahead"
                );
            }
            Err(e) => {
                tracing::debug!(segment = self.base_offset, error = %e, "preallocation off for this segment");
                self.preallocated_to = u64::MAX;
            }
        }
    }

    /// Release disk blocks reserved past the end of the file (ftruncate to its own size: the
    /// size, and so every mapped byte, stays as it is).
    pub(super) fn release_reserved_tail(&mut self) -> io::Result<()> {
        if self.reserved_tail {
            self.file.set_len(self.size_bytes)?;
            self.reserved_tail = false;
            self.preallocated_to = self.size_bytes;
        }
        Ok(())
    }

    /// Update in-memory state and indexes for a batch at `position`. The state is updated
    /// before the index entry is written, so an error (a full disk) leaves it consistent with
    /// the batch, only without that (sparse, optional) entry.
    pub(super) fn index_batch(
        &mut self,
        position: u64,
        last_offset: i64,
        max_timestamp: i64,
        size: u64,
    ) -> io::Result<()> {
        if self.rolling_base_timestamp.is_none() && max_timestamp >= 0 {
            self.rolling_base_timestamp = Some(max_timestamp);
        }
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        let entry_due = self.bytes_since_index_entry > self.sizing.index_interval_bytes;
        if entry_due {
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size;
        self.next_offset = last_offset + 1;
        if entry_due {
            let relative = last_offset - self.base_offset;
            if self.offset_index.append(relative, position as u32)? {
                self.maybe_append_time_entry()?;
            }
        }
        Ok(())
    }

    pub(super) fn maybe_append_time_entry(&mut self) -> io::Result<()> {
        if self.max_timestamp < 0 {
            return Ok(());
        }
        let relative = (self.offset_of_max_timestamp - self.base_offset) as u32;
        match self.time_index.last() {
            Some(last) if last.key >= self.max_timestamp => {}
            _ => {
                self.time_index.append(self.max_timestamp, relative)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

    use super::super::{Segment, SegmentSizing};

    fn batch(base_offset: i64, records: usize) -> Vec<u8> {
        build_simple(
            BatchSpec {
                base_offset,
                base_timestamp: 1_000 + base_offset,
                ..BatchSpec::default()
            },
            records,
            100,
        )
    }

    /// An append whose index entry cannot be written (ENOSPC on a full disk) changes nothing:
    /// same size, offsets, timestamps and entries, the file cut back; the retry succeeds.
    #[test]
    fn a_failed_index_write_undoes_the_whole_append() {
        let dir = tempfile::tempdir().unwrap();
        let sizing = SegmentSizing {
            segment_bytes: 1 << 20,
            index_max_bytes: 4096,
            index_interval_bytes: 100,
            preallocate_window_bytes: 64 << 10,
        };
        let mut seg = Segment::create(dir.path(), 0, sizing, 0).unwrap();
        let mut next = 0;
        for _ in 0..5 {
            seg.append(&batch(next, 3)).unwrap();
            next += 3;
        }
        let before = (
            seg.size_bytes,
            seg.next_offset,
            seg.max_timestamp,
            seg.undo_point(),
        );
        let entries = seg.offset_index.entries();
        seg.offset_index.fail_writes_for_test();
        // Two batches in one append: the first one's entry already fails.
        let mut two = batch(next, 3);
        two.extend(batch(next + 3, 3));
        assert!(seg.append(&two).is_err());
        let after = (
            seg.size_bytes,
            seg.next_offset,
            seg.max_timestamp,
            seg.undo_point(),
        );
        assert_eq!(format!("{before:?}"), format!("{after:?}"));
        assert_eq!(seg.offset_index.entries(), entries);
        assert_eq!(seg.file.metadata().unwrap().len(), seg.size_bytes);
        // Writes work again (space returned): the same append succeeds, at the same place.
        seg.offset_index = crate::index::SparseIndex::open(
            crate::index::IndexKind::Offset,
            &super::super::index_path(dir.path(), 0),
            4096,
            false,
        )
        .unwrap();
        seg.offset_index.truncate_entries(entries);
        seg.offset_index.expand(4096).unwrap();
        seg.append(&two).unwrap();
        assert_eq!(seg.next_offset(), next + 6);
        let read = seg.read(next, usize::MAX, i64::MAX, true).unwrap().unwrap();
        assert_eq!(read.0.as_ref(), &two[..]);
        assert!(seg.locate(next + 4).unwrap().is_some());
    }
}

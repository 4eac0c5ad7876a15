//! One log segment: a `.log` file of RecordBatch v2 bytes plus its offset and time indexes.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use streamforge_protocol::batch::{self, BatchError, HEADER_BYTES, RecordBatch};

use crate::index::{IndexKind, SparseIndex};
use crate::mmap::ReadMap;

mod append;
mod read;
mod scan;

/// Largest position an offset-index entry can hold (Kafka's indexes store u32 positions; a
/// segment never grows past `i32::MAX` bytes, as in Kafka where `segment.bytes` is an int).
pub const SEGMENT_MAX_BYTES: u64 = i32::MAX as u64;

/// Largest `last offset - base offset` of a batch in a segment: index entries store offsets
/// relative to the segment's base as u32. A batch past it on disk is damage (appends roll
/// long before it, `should_roll`).
pub const SEGMENT_RELATIVE_OFFSET_MAX: i64 = u32::MAX as i64;

/// `00000000000000000123` for base offset 123.
pub fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.log", file_stem(base_offset)))
}
pub fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.index", file_stem(base_offset)))
}
pub fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.timeindex", file_stem(base_offset)))
}

/// Sizing settings a segment needs.
#[derive(Debug, Clone, Copy)]
pub struct SegmentSizing {
    pub segment_bytes: u64,
    pub index_max_bytes: u64,
    pub index_interval_bytes: u64,
    /// See `LogConfig::preallocate_window_bytes` (0 = no preallocation).
    pub preallocate_window_bytes: u64,
}

/// A batch that failed validation during a recovery scan.
#[derive(Debug, Clone)]
pub struct BadBatch {
    /// Byte position of the batch in the `.log` file.
    pub position: u64,
    /// The offset the log expected there (the next offset after the last good batch).
    pub offset: i64,
    pub error: String,
}

/// Result of scanning a segment in recovery.
#[derive(Debug)]
pub struct ScanOutcome {
    /// Batches that passed validation.
    pub valid_batches: u64,
    /// Bytes of the batches whose CRC was checked (recovery cost; the rest was header-walked).
    pub checked_bytes: u64,
    /// The first bad batch, if any (everything from it on is not valid).
    pub bad: Option<BadBatch>,
}

/// Where a batch lies in a segment.
#[derive(Debug, Clone, Copy)]
pub struct BatchPosition {
    pub position: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub size_bytes: u64,
}

#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    file: File,
    size_bytes: u64,
    /// Read mapping covering at least `size_bytes`.
    map: ReadMap,
    /// A slice of `map` was handed out: the file must not be shrunk or rewritten in place.
    map_shared: AtomicBool,
    offset_index: SparseIndex,
    time_index: SparseIndex,
    bytes_since_index_entry: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// First batch's max timestamp (the clock of `segment.ms`), if any batch has one.
    rolling_base_timestamp: Option<i64>,
    created_ms: i64,
    sizing: SegmentSizing,
    /// Disk blocks are reserved (fallocate, keep size) up to this file position (>= size).
    preallocated_to: u64,
    /// Blocks past the end of the file may be reserved (by this process, or by one that
    /// crashed): sealing/closing releases them.
    reserved_tail: bool,
}

fn map_len(size_bytes: u64, sizing: &SegmentSizing) -> usize {
    size_bytes
        .max(sizing.segment_bytes)
        .clamp(1, SEGMENT_MAX_BYTES) as usize
}

/// `statfs` magic of tmpfs, where `fallocate` allocates (and zeroes) memory pages: reserving
/// ahead there costs more than it saves.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The sizing to use for an active segment in `file`: no preallocation on tmpfs.
#[allow(clippy::unnecessary_cast)] // `f_type`'s integer type differs between targets
fn preallocation_for(file: &File, mut sizing: SegmentSizing) -> SegmentSizing {
    if sizing.preallocate_window_bytes > 0
        && rustix::fs::fstatfs(file).is_ok_and(|s| s.f_type as i64 == TMPFS_MAGIC)
    {
        sizing.preallocate_window_bytes = 0;
    }
    sizing
}

impl Segment {
    /// Create a new, empty segment (replacing any leftover files of the same base offset).
    pub fn create(
        dir: &Path,
        base_offset: i64,
        sizing: SegmentSizing,
        now_ms: i64,
    ) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(log_path(dir, base_offset))?;
        let offset_index = SparseIndex::open(
            IndexKind::Offset,
            &index_path(dir, base_offset),
            sizing.index_max_bytes,
            true,
        )?;
        let time_index = SparseIndex::open(
            IndexKind::Time,
            &time_index_path(dir, base_offset),
            sizing.index_max_bytes,
            true,
        )?;
        let map = ReadMap::new(&file, map_len(0, &sizing))?;
        let sizing = preallocation_for(&file, sizing);
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            file,
            size_bytes: 0,
            map,
            map_shared: AtomicBool::new(false),
            offset_index,
            time_index,
            bytes_since_index_entry: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            rolling_base_timestamp: None,
            created_ms: now_ms,
            sizing,
            preallocated_to: 0,
            reserved_tail: false,
        })
    }

    /// Open an existing segment. With `rebuild`, its indexes are reset and must be rebuilt by
    /// [`Segment::scan`]; otherwise they are loaded as they are and the in-memory state is derived
    /// from them plus a header walk after the last offset-index entry.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        sizing: SegmentSizing,
        rebuild: bool,
        active: bool,
        now_ms: i64,
    ) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(log_path(dir, base_offset))?;
        let size_bytes = file.metadata()?.len();
        let ipath = index_path(dir, base_offset);
        let tpath = time_index_path(dir, base_offset);
        let rebuild = rebuild || !ipath.exists() || !tpath.exists();
        let offset_index =
            SparseIndex::open(IndexKind::Offset, &ipath, sizing.index_max_bytes, rebuild)?;
        let time_index =
            SparseIndex::open(IndexKind::Time, &tpath, sizing.index_max_bytes, rebuild)?;
        let map = ReadMap::new(&file, map_len(size_bytes, &sizing))?;
        let sizing = if active {
            preallocation_for(&file, sizing)
        } else {
            sizing
        };
        let mut segment = Segment {
            base_offset,
            dir: dir.to_path_buf(),
            file,
            size_bytes,
            map,
            map_shared: AtomicBool::new(false),
            offset_index,
            time_index,
            bytes_since_index_entry: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            rolling_base_timestamp: None,
            created_ms: now_ms,
            sizing,
            preallocated_to: size_bytes,
            // A crashed process may have left a reservation past the end of the active segment.
            reserved_tail: active,
        };
        if active && rebuild {
            // (A loaded active segment is expanded on its first append: `Log::mark_dirty`.)
            segment.unseal()?;
        }
        Ok(segment)
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    /// Offset after the last batch (= base offset when empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    /// What retention measures this segment's age from (Kafka's `largestTimestamp`): the largest
    /// record timestamp, or, when no record carries one, the `.log` file's modification time.
    /// `None` when neither is known.
    pub fn largest_timestamp_ms(&self) -> Option<i64> {
        if self.max_timestamp >= 0 {
            return Some(self.max_timestamp);
        }
        let modified = self.file.metadata().and_then(|m| m.modified()).ok()?;
        let ms = modified
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis();
        i64::try_from(ms).ok()
    }
    pub fn log_path(&self) -> PathBuf {
        log_path(&self.dir, self.base_offset)
    }

    /// Cheap index checks after loading without a rebuild.
    pub fn check_indexes(&self) -> Result<(), String> {
        self.offset_index
            .quick_check(i64::from(u32::MAX), self.size_bytes)?;
        self.time_index.quick_check(i64::from(u32::MAX), u64::MAX)
    }

    /// Milliseconds this segment has been "open" for `segment.ms` purposes.
    pub fn age_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.rolling_base_timestamp.unwrap_or(self.created_ms))
    }

    /// Whether appending `bytes` more bytes needs a new segment.
    pub fn should_roll(
        &self,
        bytes: u64,
        segment_bytes: u64,
        segment_ms: i64,
        now_ms: i64,
    ) -> bool {
        if self.is_empty() {
            return false;
        }
        self.size_bytes + bytes > segment_bytes.min(SEGMENT_MAX_BYTES)
            || self.age_ms(now_ms) > segment_ms
            || self.offset_index.is_full()
            || self.time_index.is_full()
            // relative offsets in indexes are u32
            || self.next_offset - self.base_offset > i64::from(u32::MAX) - 1_000_000
    }

    fn header_at(&self, position: u64) -> Result<BatchPosition, BatchError> {
        let start = position as usize;
        let end = self.size_bytes as usize;
        let head_end = (start + HEADER_BYTES).min(end);
        let head = self.map.bytes(start, head_end);
        let size = batch::batch_size(head)?;
        if start + size > end {
            return Err(BatchError::Truncated {
                needed: size,
                available: end - start,
            });
        }
        if head.len() < HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: HEADER_BYTES,
                available: head.len(),
            });
        }
        let view = RecordBatch::parse(self.map.bytes(start, start + size))?;
        Ok(BatchPosition {
            position,
            base_offset: view.base_offset(),
            last_offset: view.last_offset(),
            max_timestamp: view.max_timestamp(),
            size_bytes: size as u64,
        })
    }

    /// Bytes of the batch at `pos` (the position must come from this segment's walk).
    fn batch_bytes(&self, pos: &BatchPosition) -> &[u8] {
        self.map.bytes(
            pos.position as usize,
            (pos.position + pos.size_bytes) as usize,
        )
    }

    /// Keep only batches whose offsets are all below `offset`; batches containing or after it are
    /// removed. Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<u64> {
        let Some(cut) = self.translate_offset(offset) else {
            return Ok(0);
        };
        let keep = cut.position;
        let removed = self.size_bytes - keep;
        self.truncate_to_position(keep)?;
        self.size_bytes = keep;
        // The truncated segment becomes the active one: give its indexes room and rebuild them
        // (and the max timestamp) from a header walk of the kept prefix.
        self.unseal()?;
        if let Some(bad) = self.scan(i64::MAX).bad {
            return Err(io::Error::other(format!(
                "segment {} inconsistent after truncation at {}: {}",
                self.base_offset, bad.position, bad.error
            )));
        }
        Ok(removed)
    }

    /// Shrink the `.log` file to `keep` bytes without invalidating slices already handed out.
    fn truncate_to_position(&mut self, keep: u64) -> io::Result<()> {
        if keep >= self.size_bytes {
            return Ok(());
        }
        let path = self.log_path();
        if self.map_shared.load(Ordering::Relaxed) {
            // Readers may hold slices of this file: write the kept prefix to a new file and rename
            // it over the old one (the old inode stays mapped until the last slice drops).
            let tmp = path.with_extension("log.truncating");
            let out = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            const COPY_CHUNK_BYTES: usize = 1 << 20;
            let mut chunk = vec![0u8; COPY_CHUNK_BYTES];
            let mut at = 0u64;
            while at < keep {
                let want = ((keep - at) as usize).min(COPY_CHUNK_BYTES);
                self.file.read_exact_at(&mut chunk[..want], at)?;
                out.write_all_at(&chunk[..want], at)?;
                at += want as u64;
            }
            out.sync_data()?;
            fs::rename(&tmp, &path)?;
            self.file = out;
        } else {
            self.file.set_len(keep)?;
        }
        self.map = ReadMap::new(&self.file, map_len(keep, &self.sizing))?;
        self.map_shared.store(false, Ordering::Relaxed);
        // `set_len` released any reservation; the copy is a new file without one.
        self.preallocated_to = keep;
        self.reserved_tail = false;
        Ok(())
    }

    /// Cut the file at a bad batch found in recovery (before any reader exists).
    pub fn truncate_at_position(&mut self, position: u64) -> io::Result<()> {
        self.truncate_to_position(position)?;
        self.size_bytes = position.min(self.size_bytes);
        Ok(())
    }

    /// Seal: release the disk reservation past the end, add the final time index entry and trim
    /// both indexes (on roll).
    pub fn seal(&mut self) -> io::Result<()> {
        self.release_reserved_tail()?;
        self.maybe_append_time_entry()?;
        self.offset_index.trim()?;
        self.time_index.trim()?;
        Ok(())
    }

    /// Make a sealed segment active again (after truncation removed later segments).
    pub fn unseal(&mut self) -> io::Result<()> {
        self.offset_index.expand(self.sizing.index_max_bytes)?;
        self.time_index.expand(self.sizing.index_max_bytes)?;
        Ok(())
    }

    /// Close cleanly: like seal (the file is trimmed; a reopened active segment expands again).
    pub fn close(&mut self) -> io::Result<()> {
        self.seal()?;
        self.flush()
    }

    /// fsync the log file and msync the indexes.
    pub fn flush(&self) -> io::Result<()> {
        self.file.sync_data()?;
        self.offset_index.flush()?;
        self.time_index.flush()
    }

    /// A duplicate descriptor of the `.log` file (group commit fsyncs it outside the log's lock).
    pub fn file_handle(&self) -> io::Result<std::sync::Arc<File>> {
        Ok(std::sync::Arc::new(self.file.try_clone()?))
    }

    /// Delete the segment's files (mapped slices stay valid). The names go now; the pages are
    /// freed when the reaper thread drops the segment (`crate::reaper`).
    pub fn delete(self, runtime: &crate::LogRuntime) -> io::Result<()> {
        delete_files(&self.dir, self.base_offset)?;
        runtime.release(self);
        Ok(())
    }
}

/// Delete the files of segment `base` in `dir` (missing files are fine).
pub fn delete_files(dir: &Path, base: i64) -> io::Result<()> {
    {
        for path in [
            log_path(dir, base),
            index_path(dir, base),
            time_index_path(dir, base),
            crate::txn_index::txn_index_path(dir, base),
        ] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

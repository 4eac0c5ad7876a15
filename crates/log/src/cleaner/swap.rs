//! Installing a cleaned segment under the log's lock, crash-safely, and completing a swap a
//! crash interrupted (Kafka's rule: a `.cleaned` file is deleted, a `.swap` file is completed).
//!
//! Steps of [`Log::install_cleaned`] for a group `[X, Y, ...]` cleaned into `X.log.cleaned`
//! (already fsynced):
//! 0. write `X.txnindex.swap`: the aborted transactions whose markers the group keeps;
//! 1. rename `X.log.cleaned` → `X.log.swap`, fsync the directory (the commit point);
//! 2. delete the other segments of the group (`Y.log`, its indexes);
//! 3. delete `X.index`, `X.timeindex` (they describe the old `X.log`), install
//!    `X.txnindex.swap` as `X.txnindex` (none when it is empty);
//! 4. rename `X.log.swap` → `X.log` (replacing the old file atomically), fsync the directory;
//! 5. open the new segment, rebuild its indexes from its batches, seal and fsync them.
//!
//! A crash before 1 leaves the old segments, a `.cleaned` file and maybe a `.txnindex.swap`,
//! which recovery deletes. A
//! crash after 1 leaves a `.swap` file: recovery deletes every segment whose base offset lies in
//! `(X, last offset of the swap file]` and `X`'s indexes, installs `X.txnindex.swap` if it is
//! still there, then renames the swap file to `X.log`
//! — steps 2–4 again, each of which may already be done. Readers holding slices of the old
//! files keep them (unlinked inodes stay mapped).

use std::fs;
use std::io;
use std::path::Path;

use streamforge_protocol::batch::BatchIter;

use super::clean::{CLEANED_SUFFIX, CleanedGroup, SWAP_SUFFIX};
use crate::LogError;
use crate::checkpoint::sync_dir;
use crate::log::{Log, sizing};
use crate::segment::{self, Segment, index_path, log_path, time_index_path};
use crate::txn_index;

/// Test hook: where an install stops, to simulate a crash at each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapStep {
    /// Stop after renaming to `.swap`.
    AfterSwapRename,
    /// Stop after deleting the other segments of the group.
    AfterDeletingOld,
    /// Stop after deleting the first segment's indexes.
    AfterDeletingIndexes,
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn swap_path(dir: &Path, base: i64) -> std::path::PathBuf {
    let mut p = log_path(dir, base).into_os_string();
    p.push(SWAP_SUFFIX);
    p.into()
}

impl Log {
    /// Install a cleaned group (see the module comment). Returns `false`, removing the cleaned
    /// file, when the log changed meanwhile (a replaced segment is gone or has another size:
    /// retention, truncation or DeleteRecords got there first).
    pub fn install_cleaned(&mut self, group: &CleanedGroup, now_ms: i64) -> Result<bool, LogError> {
        self.install_cleaned_until(group, now_ms, None)
    }

    /// [`Log::install_cleaned`], stopping after `stop` (crash tests). The log must then be
    /// dropped without closing, as after a crash.
    pub fn install_cleaned_until(
        &mut self,
        group: &CleanedGroup,
        now_ms: i64,
        stop: Option<SwapStep>,
    ) -> Result<bool, LogError> {
        let active = self.active().base_offset();
        let unchanged = group.replaced.iter().all(|(base, size)| {
            *base != active
                && self
                    .segments
                    .get(base)
                    .is_some_and(|s| s.size_bytes() == *size)
        });
        if !unchanged {
            super::clean::discard(std::slice::from_ref(group));
            return Ok(false);
        }
        self.mark_dirty()?;
        let x = group.base_offset;
        let last = group.replaced.last().map_or(x, |(b, _)| *b);
        let group_end = self.segments.get(&last).map_or(x, |s| s.next_offset());
        let Some(cleaned) = &group.cleaned_path else {
            // Nothing kept: the segments just go (each deletion leaves a valid log).
            for (base, _) in &group.replaced {
                if let Some(seg) = self.segments.remove(base) {
                    seg.delete(&self.config.runtime)?;
                }
            }
            self.aborted
                .replace_markers_in(x, group_end, &group.aborted);
            self.refresh_group_files()?;
            return Ok(true);
        };
        txn_index::write_swap(&self.dir, x, &group.aborted)?;
        let swap = swap_path(&self.dir, x);
        fs::rename(cleaned, &swap)?;
        sync_dir(&self.dir)?;
        if stop == Some(SwapStep::AfterSwapRename) {
            return Ok(true);
        }
        for (base, _) in group.replaced.iter().filter(|(b, _)| *b != x) {
            if let Some(seg) = self.segments.remove(base) {
                seg.delete(&self.config.runtime)?;
            }
        }
        if stop == Some(SwapStep::AfterDeletingOld) {
            return Ok(true);
        }
        remove_if_present(&index_path(&self.dir, x))?;
        remove_if_present(&time_index_path(&self.dir, x))?;
        txn_index::install_swap(&self.dir, x)?;
        if stop == Some(SwapStep::AfterDeletingIndexes) {
            return Ok(true);
        }
        fs::rename(&swap, log_path(&self.dir, x))?;
        sync_dir(&self.dir)?;
        let mut seg = Segment::open(&self.dir, x, sizing(&self.config), true, false, now_ms)?;
        // Just written and fsynced by the cleaner: walk the headers, no CRC pass.
        if let Some(bad) = seg.scan(i64::MAX).bad {
            return Err(LogError::Corrupted(format!(
                "{}: cleaned segment {x} unreadable at byte {}: {}",
                self.dir.display(),
                bad.position,
                bad.error
            )));
        }
        // The indexes are fsynced by `sync_installed`, after the lock is released.
        seg.seal()?;
        if let Some(old) = self.segments.insert(x, seg) {
            // Its files are already replaced: only the descriptors and mappings go.
            self.config.runtime.release(old);
        }
        // The markers that went take their aborted-transaction entries with them.
        self.aborted
            .replace_markers_in(x, group_end, &group.aborted);
        self.refresh_group_files()?;
        Ok(true)
    }
}

/// fsync the indexes of the installed segment `base` (outside the log's lock).
pub fn sync_installed(dir: &Path, base: i64) -> io::Result<()> {
    for path in [index_path(dir, base), time_index_path(dir, base)] {
        match fs::File::open(&path) {
            Ok(f) => f.sync_all()?,
            // Deleted meanwhile (retention, truncation): nothing to make durable.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Recovery: complete every interrupted swap in `dir` and remove `.cleaned` leftovers. Runs
/// before the segments are listed. Returns whether anything changed.
pub(crate) fn complete_interrupted_swaps(dir: &Path) -> io::Result<bool> {
    let mut changed = false;
    let mut swaps = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(CLEANED_SUFFIX) {
            tracing::info!(dir = %dir.display(), file = name, "removing an unfinished cleaned segment");
            fs::remove_file(entry.path())?;
            changed = true;
        } else if let Some(stem) = name
            .strip_suffix(SWAP_SUFFIX)
            .and_then(|n| n.strip_suffix(".log"))
            && let Ok(base) = stem.parse::<i64>()
        {
            swaps.push(base);
        }
    }
    swaps.sort_unstable();
    for x in &swaps {
        complete_swap(dir, *x)?;
        changed = true;
    }
    // A swap index whose segment swap never started (a crash before step 1): the old files
    // are intact and keep their own indexes.
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(".txnindex.swap")) {
            fs::remove_file(entry.path())?;
            changed = true;
        }
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(changed)
}

fn complete_swap(dir: &Path, x: i64) -> io::Result<()> {
    let swap = swap_path(dir, x);
    let bytes = fs::read(&swap)?;
    let last = BatchIter::new(&bytes)
        .map_while(|b| b.ok().map(|(_, v)| v.last_offset()))
        .last()
        .unwrap_or(x);
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        if let Ok(base) = stem.parse::<i64>()
            && base > x
            && base <= last
        {
            segment::delete_files(dir, base)?;
        }
    }
    remove_if_present(&index_path(dir, x))?;
    remove_if_present(&time_index_path(dir, x))?;
    txn_index::install_swap(dir, x)?;
    fs::rename(&swap, log_path(dir, x))?;
    tracing::warn!(dir = %dir.display(), segment = x, last_offset = last, "completed an interrupted cleaner swap");
    Ok(())
}

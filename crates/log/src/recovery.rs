//! Opening a log: load segments, and after an unclean shutdown scan (CRC-check) everything past
//! the recovery point, rebuilding indexes and cutting off a torn tail.
//!
//! Rules (see docs/STORAGE.md):
//! - Clean shutdown marker present: no CRC scan; indexes are loaded and quickly checked, the
//!   active segment's tail is walked from its last index entry.
//! - Otherwise every segment holding offsets >= the recovery point is scanned: indexes rebuilt,
//!   CRC of every batch at or past the recovery point verified. The first bad batch there is a
//!   torn/corrupt tail: the log is truncated at it (logged with offset and byte position) and
//!   later segments are deleted.
//! - A bad batch below the recovery point (data that was fsynced) is never cut off silently:
//!   `open` fails with [`LogError::Corrupted`] naming the segment, offset and position.
//! - A missing or inconsistent index is rebuilt from its segment (logged).
//! - After an unclean shutdown nothing is fsynced that recovery did not change (Kafka's rule):
//!   the scanned data came from the page cache and may not be on disk, so the recovery point
//!   stays where the checkpoint had it (capped at the log end) and the next unclean open
//!   re-checks the same range. The checkpoint is rewritten only if that value changed, and the
//!   directory is fsynced only when files were cut, deleted or created. Background flushing
//!   (`Log::background_flush_ticket`) moves the recovery point forward later, off the open path.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::checkpoint::{self, CLEAN_SHUTDOWN_FILE, LOG_START_FILE, RECOVERY_POINT_FILE};
use crate::epoch::LeaderEpochCache;
use crate::group_commit::GroupCommit;
use crate::log::{Log, sizing};
use crate::producer_state::ProducerStateManager;
use crate::segment::{BadBatch, Segment};
use crate::{LogConfig, LogError};

/// Suffixes of files we write temporarily; left over only by a crash.
const TEMP_SUFFIXES: [&str; 3] = [".tmp", ".truncating", ".deleted"];

fn corrupted(dir: &Path, base: i64, bad: &BadBatch) -> LogError {
    LogError::Corrupted(format!(
        "{}: segment {base} has a bad batch at byte {} (expected offset {}) in flushed data: {}",
        dir.display(),
        bad.position,
        bad.offset,
        bad.error
    ))
}

/// A checkpoint whose contents cannot be parsed is treated as missing (logged at WARN with its
/// path and what happens instead); any other read error stays an error.
fn damaged_checkpoint_as_missing(
    read: std::io::Result<Option<i64>>,
    instead: &str,
) -> Result<Option<i64>, LogError> {
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            tracing::warn!(error = %e, "ignoring damaged checkpoint; {instead}");
            Ok(None)
        }
        other => Ok(other?),
    }
}

pub(crate) fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log, LogError> {
    fs::create_dir_all(dir)?;
    // Files removed, cut or created here: the directory needs an fsync before the open is done.
    // A cleaner swap a crash interrupted is completed first (`cleaner/swap.rs`).
    let mut dir_changed = crate::cleaner::swap::complete_interrupted_swaps(dir)?;
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if TEMP_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            tracing::info!(dir = %dir.display(), file = name, "removing leftover temporary file");
            fs::remove_file(entry.path())?;
            dir_changed = true;
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log")
            && let Ok(base) = stem.parse::<i64>()
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    // Orphan index files (their segment is gone) are removed.
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stem = name
            .strip_suffix(".index")
            .or_else(|| name.strip_suffix(".timeindex"))
            .or_else(|| name.strip_suffix(".txnindex"));
        if let Some(stem) = stem
            && let Ok(base) = stem.parse::<i64>()
            && bases.binary_search(&base).is_err()
        {
            fs::remove_file(entry.path())?;
            dir_changed = true;
        }
    }

    let clean = dir.join(CLEAN_SHUTDOWN_FILE).exists();
    let log_start_ckpt = damaged_checkpoint_as_missing(
        checkpoint::read_offset(dir, LOG_START_FILE),
        "the log start falls back to the first segment's base offset (or the leader-epoch \
         cache's first start offset)",
    )?;
    // A missing checkpoint means nothing is known to be flushed; so does a damaged one (the
    // whole log is CRC-checked, as Kafka does without a recovery point).
    let recovery_point_ckpt = if clean {
        None
    } else {
        damaged_checkpoint_as_missing(
            checkpoint::read_offset(dir, RECOVERY_POINT_FILE),
            "recovering from offset 0: every segment is CRC-checked",
        )?
    };
    let recovery_point = if clean {
        i64::MAX
    } else {
        recovery_point_ckpt.unwrap_or(0)
    };
    let sizing = sizing(&config);
    let mut segments: BTreeMap<i64, Segment> = BTreeMap::new();
    if bases.is_empty() {
        let base = log_start_ckpt.unwrap_or(0).max(0);
        segments.insert(base, Segment::create(dir, base, sizing, now_ms)?);
    }
    let mut truncated_at: Option<usize> = None;
    // Anything rebuilt or cut: the fast clean path (no fsync at open) does not apply.
    let mut repaired = false;
    let mut rebuilt = 0usize;
    let mut checked_bytes = 0u64;
    for (i, &base) in bases.iter().enumerate() {
        let last = i + 1 == bases.len();
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let unflushed = next_base > recovery_point;
        // Indexes rebuilt from the log start out preallocated like an active segment's.
        let mut seg_rebuilt = unflushed;
        let index_missing = !crate::segment::index_path(dir, base).exists()
            || !crate::segment::time_index_path(dir, base).exists();
        if index_missing {
            // `Segment::open` creates it.
            dir_changed = true;
        }
        let mut seg = if unflushed {
            let mut seg = Segment::open(dir, base, sizing, true, last, now_ms)?;
            rebuilt += 1;
            let outcome = seg.scan(recovery_point);
            checked_bytes += outcome.checked_bytes;
            tracing::debug!(
                dir = %dir.display(), segment = base, batches = outcome.valid_batches,
                checked_bytes = outcome.checked_bytes, "scanned segment"
            );
            if let Some(bad) = outcome.bad {
                if bad.offset < recovery_point && !clean {
                    return Err(corrupted(dir, base, &bad));
                }
                tracing::warn!(
                    dir = %dir.display(),
                    segment = base,
                    offset = bad.offset,
                    position = bad.position,
                    error = %bad.error,
                    "truncating torn or corrupt log tail found in recovery"
                );
                seg.truncate_at_position(bad.position)?;
                truncated_at = Some(i);
                repaired = true;
                dir_changed = true;
            }
            seg
        } else {
            let mut seg = Segment::open(dir, base, sizing, false, last, now_ms)?;
            // A missing index (a completed cleaner swap removes the old one) is rebuilt.
            let missing = index_missing.then(|| "index files missing".to_string());
            let problem = missing.or_else(|| seg.check_indexes().err()).or_else(|| {
                seg.load_tail().map(|b| {
                    format!(
                        "tail walk failed at byte {} (offset {}): {}",
                        b.position, b.offset, b.error
                    )
                })
            });
            if let Some(problem) = problem {
                tracing::warn!(dir = %dir.display(), segment = base, %problem, "rebuilding segment index");
                seg = Segment::open(dir, base, sizing, true, last, now_ms)?;
                repaired = true;
                rebuilt += 1;
                seg_rebuilt = true;
                // Flushed data: validate fully; anything bad here is reported, not cut off.
                let outcome = seg.scan(i64::MIN);
                checked_bytes += outcome.checked_bytes;
                if let Some(bad) = outcome.bad {
                    if clean && last {
                        tracing::warn!(
                            dir = %dir.display(), segment = base, offset = bad.offset,
                            position = bad.position, error = %bad.error,
                            "truncating corrupt tail of the active segment"
                        );
                        seg.truncate_at_position(bad.position)?;
                        dir_changed = true;
                    } else {
                        return Err(corrupted(dir, base, &bad));
                    }
                }
            }
            seg
        };
        if !last && truncated_at.is_some() {
            seg.unseal()?;
        } else if !last && seg_rebuilt {
            // A sealed segment's indexes are trimmed to their entries, as on roll: later
            // readers (a clean open, the tiered uploader) take the file length as the entries.
            seg.seal()?;
        }
        segments.insert(base, seg);
        if truncated_at.is_some() {
            // Everything after a cut is gone.
            for &later in &bases[i + 1..] {
                tracing::warn!(dir = %dir.display(), segment = later, "deleting segment after truncated tail");
                crate::segment::delete_files(dir, later)?;
            }
            break;
        }
    }

    // Offsets must be contiguous across segments.
    let mut prev_next: Option<i64> = None;
    for seg in segments.values() {
        if let Some(p) = prev_next
            && seg.base_offset() < p
        {
            return Err(LogError::Corrupted(format!(
                "{}: segment {} starts below the end {p} of the previous segment",
                dir.display(),
                seg.base_offset()
            )));
        }
        prev_next = Some(seg.next_offset());
    }

    let first_base = *segments.keys().next().expect("at least one segment");
    let next_offset = segments
        .values()
        .next_back()
        .map(Segment::next_offset)
        .expect("at least one segment");
    let epochs = match LeaderEpochCache::load(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            tracing::warn!(error = %e, "rebuilding the leader-epoch cache from the batches' partition leader epochs");
            LeaderEpochCache::rebuild(dir, segments.values())?
        }
        other => other?,
    };
    let log_start_offset = match log_start_ckpt {
        Some(start) => start,
        // The epoch cache's first entry is moved to the log start by DeleteRecords and
        // retention, so it remembers a log start inside the first segment.
        None => epochs
            .entries()
            .first()
            .map(|&(_, start)| start)
            .filter(|&start| start <= next_offset)
            .unwrap_or(first_base),
    }
    .max(first_base);
    let recovery_point = if clean {
        next_offset
    } else {
        recovery_point.min(next_offset)
    };
    let mut log = Log {
        dir: dir.to_path_buf(),
        config,
        segments,
        log_start_offset,
        next_offset,
        high_watermark: next_offset,
        recovery_point,
        recovery_point_checkpointed: -1,
        checkpoint: checkpoint::RecoveryCheckpoint::new(dir, recovery_point_ckpt),
        epochs,
        unflushed_messages: 0,
        last_flush_ms: now_ms,
        // Below the recovery point the data is on disk; everything above it (scanned from the
        // page cache) is fsynced by the first group commit or background flush.
        group: GroupCommit::new(recovery_point),
        producers: ProducerStateManager::new(),
        aborted: Default::default(),
        txn_verifications: Default::default(),
        dirty_pending: false,
        segments_rebuilt_at_open: rebuilt,
        recovery_checked_bytes: checked_bytes,
        background_flush_started_ms: now_ms,
        retention_checked_ms: now_ms,
        damaged_warnings: crate::log::damaged_warnings(),
    };
    if log_start_offset > next_offset {
        // The tail holding the log start was lost: nothing below it may be served.
        log.truncate_fully_and_start_at(log_start_offset)?;
        repaired = true;
    }
    log.epochs
        .truncate_to_log_on_open(log.log_start_offset, log.next_offset);
    if !clean {
        // The tail above the recovery point may hold epochs whose entries were not written.
        log.epochs
            .recover_from_batches(log.segments.values(), log.recovery_point);
    }
    log.rebuild_producer_state()?;
    if bases.is_empty() || (clean && !repaired) {
        // A new log, or a clean one loaded as it was: nothing to make durable, and the
        // checkpoints on disk are current. The marker goes on the first change (`mark_dirty`).
        log.recovery_point_checkpointed = log.recovery_point;
        log.dirty_pending = clean;
        if dir_changed {
            checkpoint::sync_dir(dir)?;
        }
    } else if clean {
        // Clean but repaired: make the repaired files durable before trusting them as flushed.
        log.flush()?;
        log.write_recovery_checkpoint()?;
        fs::remove_file(dir.join(CLEAN_SHUTDOWN_FILE))?;
        checkpoint::sync_dir(dir)?;
    } else {
        // Unclean: the recovery point did not move past the checkpoint, so nothing scanned is
        // trusted as flushed and nothing needs an fsync. Only a lowered value (the log ends
        // below the checkpoint) is written, and only changed directory entries are synced.
        if log.recovery_point_checkpointed < 0 {
            // (`truncate_fully_and_start_at` above may have written it already.)
            log.recovery_point_checkpointed = recovery_point_ckpt.unwrap_or(0);
        }
        if log.recovery_point != log.recovery_point_checkpointed {
            // Writes and syncs the directory.
            log.write_recovery_checkpoint()?;
        } else if dir_changed {
            checkpoint::sync_dir(dir)?;
        }
    }
    log.refresh_group_files()?;
    tracing::debug!(
        dir = %dir.display(),
        clean,
        log_start_offset = log.log_start_offset,
        log_end_offset = log.next_offset,
        segments = log.segments.len(),
        recovery_point = log.recovery_point,
        checked_bytes,
        "opened log"
    );
    Ok(log)
}

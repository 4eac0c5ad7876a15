//! One cleaning pass over a log's sealed segments, outside the log's lock: build the offset map
//! over the dirty section, then rewrite the segments below its end, in groups, into
//! `<base>.log.cleaned` files (fsynced). Installing them is `swap.rs`, under the lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;

use super::batch_filter::{FilterError, RetainRules, Scratch, filter_batch};
use super::offset_map::OffsetMap;
use super::throttle::Throttle;
use super::txn_filter::TxnFilter;
use super::view::{CleanPlan, CleanView, CleanableSegment};
use crate::segment::{SEGMENT_MAX_BYTES, SEGMENT_RELATIVE_OFFSET_MAX, log_path};
use crate::txn_index::AbortedTxn;

/// Suffix of a cleaned segment being written (deleted by recovery: the old segments are intact).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment being swapped in (recovery completes the swap).
pub const SWAP_SUFFIX: &str = ".swap";
/// Output is written in chunks of this size (bounds the writer's buffer).
const WRITE_CHUNK_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("cleaner I/O: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Filter(#[from] FilterError),
    #[error(transparent)]
    Stopped(#[from] super::throttle::Stopped),
    #[error("the offset map ({capacity} keys) cannot hold one batch of {records} records")]
    MapTooSmall { capacity: usize, records: i32 },
}

/// One group of segments rewritten into one cleaned segment (or into nothing).
#[derive(Debug, Clone)]
pub struct CleanedGroup {
    /// Base offset of the group's first segment: the cleaned segment takes its name.
    pub base_offset: i64,
    /// The segments it replaces: (base offset, size in bytes).
    pub replaced: Vec<(i64, u64)>,
    /// The `.cleaned` file, `None` if nothing was kept (the segments are just deleted).
    pub cleaned_path: Option<PathBuf>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// The aborted transactions whose ABORT marker the cleaned segment keeps (its new
    /// `.txnindex`; the entries of markers that went are dropped with them).
    pub aborted: Vec<AbortedTxn>,
}

/// What a pass produced.
#[derive(Debug, Clone, Default)]
pub struct CleanOutcome {
    /// Offsets below this are clean after the groups are installed (the next first dirty offset).
    pub end_offset: i64,
    pub groups: Vec<CleanedGroup>,
    pub records_kept: u64,
    pub records_removed: u64,
    /// Earliest delete horizon of a kept tombstone: the log needs a pass then.
    pub next_delete_horizon_ms: Option<i64>,
}

/// Put the keys of the dirty section into `map`, batch by batch, stopping before a batch that
/// might not fit. Returns the offset after the last batch put (the end of this pass).
pub fn build_offset_map(
    view: &CleanView,
    plan: &CleanPlan,
    map: &mut OffsetMap,
    throttle: &mut Throttle,
) -> Result<i64, CleanError> {
    let mut end = plan.first_dirty_offset;
    // Aborted transactions' records never win a key (Kafka's `buildOffsetMap`).
    let mut txn = TxnFilter::new(view.aborted.clone());
    for seg in &view.segments {
        if seg.base_offset >= plan.first_uncleanable_offset {
            break;
        }
        if seg.next_offset <= plan.first_dirty_offset {
            continue;
        }
        for batch in seg.batches() {
            if batch.last_offset() < plan.first_dirty_offset {
                continue;
            }
            if map.would_overflow(batch.record_count().max(0) as usize) {
                if map.is_empty() {
                    return Err(CleanError::MapTooSmall {
                        capacity: map.capacity(),
                        records: batch.record_count(),
                    });
                }
                return Ok(end);
            }
            throttle.account(batch.size_bytes() as u64)?;
            if batch.is_control() {
                txn.on_marker(&batch);
            } else if !txn.on_data_batch(&batch) {
                put_keys(&batch, map)?;
            }
            end = batch.last_offset() + 1;
        }
        end = end.max(seg.next_offset);
    }
    Ok(end)
}

fn put_keys(
    batch: &streamforge_protocol::batch::RecordBatch<'_>,
    map: &mut OffsetMap,
) -> Result<(), CleanError> {
    let mut buf = Vec::new();
    let records = if batch.compression() == 0 {
        batch.records_bytes()
    } else {
        let input = batch.records_bytes();
        let limit = streamforge_protocol::decompress::output_limit_bytes(input.len());
        streamforge_protocol::decompress::decompress_into(
            batch.compression(),
            input,
            limit,
            &mut buf,
        )
        .map_err(|source| FilterError::Decompress {
            offset: batch.base_offset(),
            source,
        })?;
        &buf[..]
    };
    for r in super::records::Records::new(records, batch.record_count()) {
        let r = r.map_err(|source| FilterError::Malformed {
            offset: batch.base_offset(),
            source,
        })?;
        if let Some(key) = r.key {
            map.put(key, batch.base_offset() + i64::from(r.offset_delta));
        }
    }
    Ok(())
}

/// Records in the dirty section (from batch headers): the most keys its offset map needs.
pub fn dirty_records(view: &CleanView, plan: &CleanPlan) -> usize {
    view.segments
        .iter()
        .filter(|s| s.base_offset < plan.first_uncleanable_offset)
        .filter(|s| s.next_offset > plan.first_dirty_offset)
        .flat_map(|s| s.batches())
        .filter(|b| b.last_offset() >= plan.first_dirty_offset)
        .map(|b| b.record_count().max(0) as usize)
        .sum()
}

/// Group the segments below `end` so that each group fits one segment: total size within
/// `segment.bytes` and offsets within an index's reach (Kafka's `groupSegmentsBySize`).
pub fn group_segments(view: &CleanView, end: i64) -> Vec<Vec<&CleanableSegment>> {
    let max_bytes = view.config.segment_bytes.min(SEGMENT_MAX_BYTES);
    // Each group's rebuilt index must fit its preallocation (one entry per interval, 8 bytes).
    let max_index_entries = view.config.segment_index_bytes / 8;
    let interval = view.config.index_interval_bytes.max(1);
    let mut groups: Vec<Vec<&CleanableSegment>> = Vec::new();
    let mut size = 0u64;
    for seg in view.segments.iter().take_while(|s| s.base_offset < end) {
        let fits = groups.last().is_some_and(|g| {
            size + seg.size_bytes <= max_bytes
                && (size + seg.size_bytes) / interval < max_index_entries
                && seg.next_offset - 1 - g[0].base_offset <= SEGMENT_RELATIVE_OFFSET_MAX
        });
        if fits {
            groups.last_mut().expect("a group").push(seg);
            size += seg.size_bytes;
        } else {
            groups.push(vec![seg]);
            size = seg.size_bytes;
        }
    }
    groups
}

/// Rewrite one group into `<base>.log.cleaned`, fsynced. Only whole batches are written.
pub fn clean_group(
    view: &CleanView,
    group: &[&CleanableSegment],
    rules: &RetainRules<'_>,
    txn: &mut TxnFilter,
    scratch: &mut Scratch,
    throttle: &mut Throttle,
    outcome: &mut CleanOutcome,
) -> Result<CleanedGroup, CleanError> {
    let base = group[0].base_offset;
    let path = cleaned_path(view, base);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let mut buf = Vec::with_capacity(WRITE_CHUNK_BYTES);
    let (mut read, mut written) = (0u64, 0u64);
    let mut aborted = Vec::new();
    for seg in group {
        for batch in seg.batches() {
            let done = filter_batch(&batch, rules, txn, scratch, &mut buf)?;
            aborted.extend(done.aborted_entry);
            outcome.records_kept += done.records_kept;
            outcome.records_removed += done.records_removed;
            if let Some(h) = done.delete_horizon_ms {
                outcome.next_delete_horizon_ms =
                    Some(outcome.next_delete_horizon_ms.map_or(h, |n: i64| n.min(h)));
            }
            read += batch.size_bytes() as u64;
            if buf.len() >= WRITE_CHUNK_BYTES {
                written += flush_chunk(&mut file, &mut buf, throttle)?;
            }
            throttle.account(batch.size_bytes() as u64)?;
        }
    }
    written += flush_chunk(&mut file, &mut buf, throttle)?;
    let cleaned_path = if written == 0 {
        drop(file);
        fs::remove_file(&path)?;
        None
    } else {
        file.sync_all()?;
        Some(path)
    };
    Ok(CleanedGroup {
        base_offset: base,
        replaced: group
            .iter()
            .map(|s| (s.base_offset, s.size_bytes))
            .collect(),
        cleaned_path,
        bytes_read: read,
        bytes_written: written,
        aborted,
    })
}

fn flush_chunk(
    file: &mut File,
    buf: &mut Vec<u8>,
    throttle: &mut Throttle,
) -> Result<u64, CleanError> {
    let n = buf.len() as u64;
    file.write_all(buf)?;
    buf.clear();
    throttle.account(n)?;
    Ok(n)
}

/// `<dir>/<base>.log.cleaned`.
pub fn cleaned_path(view: &CleanView, base: i64) -> PathBuf {
    let mut p = log_path(&view.dir, base).into_os_string();
    p.push(CLEANED_SUFFIX);
    PathBuf::from(p)
}

/// A whole pass: the offset map, then every group. On an error, the `.cleaned` files written
/// so far are removed (nothing was swapped).
pub fn clean_log(
    view: &CleanView,
    plan: &CleanPlan,
    map: &mut OffsetMap,
    now_ms: i64,
    throttle: &mut Throttle,
) -> Result<CleanOutcome, CleanError> {
    let end = build_offset_map(view, plan, map, throttle)?;
    let rules = RetainRules {
        map,
        now_ms,
        delete_retention_ms: view.config.delete_retention_ms.max(0),
        producer_last_offsets: &view.producer_last_offsets,
    };
    let mut outcome = CleanOutcome {
        end_offset: end,
        ..CleanOutcome::default()
    };
    let mut scratch = Scratch::default();
    let mut txn = TxnFilter::new(view.aborted.clone());
    for group in group_segments(view, end) {
        let cleaned = clean_group(
            view,
            &group,
            &rules,
            &mut txn,
            &mut scratch,
            throttle,
            &mut outcome,
        );
        match cleaned {
            Ok(g) => outcome.groups.push(g),
            Err(e) => {
                discard(&outcome.groups);
                let _ = fs::remove_file(cleaned_path(view, group[0].base_offset));
                return Err(e);
            }
        }
    }
    Ok(outcome)
}

/// Remove the `.cleaned` files of groups that will not be installed.
pub fn discard(groups: &[CleanedGroup]) {
    for g in groups {
        if let Some(p) = &g.cleaned_path {
            let _ = fs::remove_file(p);
        }
    }
}

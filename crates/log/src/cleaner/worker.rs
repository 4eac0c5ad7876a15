//! A cleaner thread: pick the dirtiest cleanable log, clean it without its lock, swap the
//! result in under the lock, advance the checkpoint; sleep `backoff_ms` when nothing is due.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{FAILED_LOG_RETRY, LockedLog, OffsetMap, Shared, Throttle, clean_log, offsets_file};
use crate::cleaner::view::{CleanPlan, CleanView};

/// A log chosen for a pass.
struct Picked {
    log: Arc<dyn LockedLog>,
    view: CleanView,
    plan: CleanPlan,
}

/// Nice value of the cleaner threads: their CPU (reading, hashing, recompressing whole
/// segments) comes after request handling on a busy machine; only the pass takes longer.
const CLEANER_NICE: i32 = 10;

pub(super) fn run(shared: &Shared, threads: usize) {
    // On Linux a thread id names one thread for setpriority(PRIO_PROCESS).
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), CLEANER_NICE) {
        tracing::debug!(error = %e, "log cleaner thread keeps the normal priority");
    }
    let map_bytes = shared.config.dedupe_buffer_bytes / threads;
    let rate = shared.config.io_max_bytes_per_second / threads as f64;
    loop {
        if shared.state.lock().expect("cleaner state").stopped {
            return;
        }
        let now_ms = (shared.clock)();
        match pick(shared, now_ms) {
            Some(picked) => {
                let dir = picked.view.dir.clone();
                clean_one(shared, picked, map_bytes, rate, now_ms);
                shared
                    .state
                    .lock()
                    .expect("cleaner state")
                    .in_progress
                    .remove(&dir);
            }
            None => {
                let state = shared.state.lock().expect("cleaner state");
                if state.stopped {
                    return;
                }
                let backoff = Duration::from_millis(shared.config.backoff_ms.max(1));
                let _ = shared.wake.wait_timeout(state, backoff);
            }
        }
    }
}

/// The cleanable log with the highest dirty ratio (Kafka's choice), marked in progress.
fn pick(shared: &Shared, now_ms: i64) -> Option<Picked> {
    let mut best: Option<Picked> = None;
    for log in shared.logs.logs() {
        let mut view = None;
        if !log.with_log_locked(&mut |l| view = l.clean_view()) {
            continue;
        }
        let Some(view) = view else { continue };
        let mut state = shared.state.lock().expect("cleaner state");
        if state.in_progress.contains(&view.dir)
            || state
                .failed_until
                .get(&view.dir)
                .is_some_and(|t| Instant::now() < *t)
        {
            continue;
        }
        let checkpoint = checkpoint_of(&mut state, &view);
        let force = state.horizons.get(&view.dir).is_some_and(|&h| now_ms >= h);
        drop(state);
        let Some(plan) = view.plan(checkpoint, now_ms, force) else {
            continue;
        };
        if best
            .as_ref()
            .is_none_or(|b| plan.dirty_ratio > b.plan.dirty_ratio)
        {
            best = Some(Picked { log, view, plan });
        }
    }
    let picked = best?;
    shared
        .state
        .lock()
        .expect("cleaner state")
        .in_progress
        .insert(picked.view.dir.clone());
    Some(picked)
}

fn checkpoint_of(state: &mut super::State, view: &CleanView) -> Option<i64> {
    let (data_dir, name) = offsets_file::log_key(&view.dir)?;
    let entries = state
        .checkpoints
        .entry(data_dir.clone())
        .or_insert_with(|| offsets_file::read(&data_dir));
    entries.get(&name).copied()
}

fn clean_one(shared: &Shared, picked: Picked, map_bytes: usize, rate: f64, now_ms: i64) {
    let Picked { log, view, plan } = picked;
    let started = Instant::now();
    let mut map = OffsetMap::with_memory_for(map_bytes, super::clean::dirty_records(&view, &plan));
    let mut throttle = Throttle::with_stop(rate, Arc::clone(&shared.stop));
    let outcome = match clean_log(&view, &plan, &mut map, now_ms, &mut throttle) {
        Ok(o) => o,
        Err(super::CleanError::Stopped(_)) => return,
        Err(e) => {
            fail(shared, &view, &e.to_string());
            return;
        }
    };
    let installed = super::install_each(&outcome, now_ms, &mut |f| log.with_log_locked(f));
    let stats = match installed {
        Ok(stats) => stats,
        Err(e) => {
            fail(shared, &view, &e.to_string());
            return;
        }
    };
    let totals = &shared.totals;
    totals.passes.fetch_add(1, Ordering::Relaxed);
    totals
        .bytes_read
        .fetch_add(stats.bytes_read, Ordering::Relaxed);
    totals
        .bytes_written
        .fetch_add(stats.bytes_written, Ordering::Relaxed);
    totals
        .records_removed
        .fetch_add(stats.records_removed, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    tracing::info!(
        dir = %view.dir.display(),
        first_dirty = plan.first_dirty_offset,
        end_offset = stats.end_offset,
        dirty_ratio = plan.dirty_ratio,
        groups = stats.groups_installed,
        bytes_read = stats.bytes_read,
        bytes_written = stats.bytes_written,
        records_removed = stats.records_removed,
        mb_per_s = stats.bytes_read as f64 / secs / 1e6,
        throttled_ms = throttle.slept.as_millis() as u64,
        complete = stats.complete,
        "cleaned log"
    );
    let mut state = shared.state.lock().expect("cleaner state");
    match stats.next_delete_horizon_ms {
        Some(h) => state.horizons.insert(view.dir.clone(), h),
        None => state.horizons.remove(&view.dir),
    };
    if stats.complete {
        save_checkpoint(&mut state, &view, stats.end_offset);
    }
}

fn save_checkpoint(state: &mut super::State, view: &CleanView, end_offset: i64) {
    let Some((data_dir, name)) = offsets_file::log_key(&view.dir) else {
        return;
    };
    let entries = state
        .checkpoints
        .entry(data_dir.clone())
        .or_insert_with(|| offsets_file::read(&data_dir));
    entries.insert(name, end_offset);
    if let Err(e) = offsets_file::write(&data_dir, entries) {
        // The next pass starts from the older checkpoint: more work, nothing lost.
        tracing::warn!(data_dir = %data_dir.display(), error = %e, "cannot write the cleaner checkpoint");
    }
}

fn fail(shared: &Shared, view: &CleanView, error: &str) {
    shared.totals.failures.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(dir = %view.dir.display(), error, "log cleaning failed; retrying this log later");
    shared
        .state
        .lock()
        .expect("cleaner state")
        .failed_until
        .insert(view.dir.clone(), Instant::now() + FAILED_LOG_RETRY);
}

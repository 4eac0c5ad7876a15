//! The log cleaner (`cleanup.policy=compact`): keeps the latest record per key, Kafka's
//! `LogCleaner` / `Cleaner` rules, on its own threads off the append path.
//!
//! A pass over one log: take a [`CleanView`] under the log's lock (zero-copy views of the
//! sealed segments; the active segment is never cleaned), plan it (`view.rs`: dirty ratio,
//! compaction lags), build the key → latest offset map over the dirty section and rewrite the
//! segments below its end into `.cleaned` files without the lock (`clean.rs`), then swap them
//! in under the lock (`swap.rs`, crash-safe). Offsets never change; see docs/STORAGE.md
//! "Compaction" for the rules and the test of each.

mod batch_filter;
mod clean;
mod offset_map;
mod offsets_file;
mod records;
pub(crate) mod swap;
mod throttle;
mod txn_filter;
mod view;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use batch_filter::FilterError;
pub use clean::{CLEANED_SUFFIX, CleanError, CleanOutcome, CleanedGroup, SWAP_SUFFIX, clean_log};
pub use offset_map::{OffsetMap, SLOT_BYTES as OFFSET_MAP_SLOT_BYTES};
pub use offsets_file::CLEANER_CHECKPOINT_FILE;
pub use swap::SwapStep;
pub use throttle::Throttle;
pub use view::{CleanPlan, CleanView, CleanableSegment};

use crate::LogError;
use crate::log::Log;

/// Broker-wide cleaner settings (Kafka's `log.cleaner.*`).
#[derive(Debug, Clone)]
pub struct CleanerConfig {
    /// `log.cleaner.threads` (default 1).
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size` (default 128 MiB), shared by the threads: bounds the
    /// offset map, so a pass over more keys cleans up to where the map filled.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.max.bytes.per.second` (default unlimited), shared by the threads.
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms` (default 15 s): sleep when no log needs cleaning.
    pub backoff_ms: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            threads: 1,
            dedupe_buffer_bytes: 128 << 20,
            io_max_bytes_per_second: f64::INFINITY,
            backoff_ms: 15_000,
        }
    }
}

/// Most cleaner threads (each holds an offset map of `dedupe_buffer_bytes / threads`).
pub const MAX_CLEANER_THREADS: usize = 16;

/// One log the cleaner may lock.
pub trait LockedLog: Send + Sync {
    /// Run `f` with the log locked; `false` if the log is gone or offline.
    fn with_log_locked(&self, f: &mut dyn FnMut(&mut Log)) -> bool;
}

/// Where the cleaner finds logs (the broker's partitions).
pub trait CleanerLogs: Send + Sync {
    fn logs(&self) -> Vec<Arc<dyn LockedLog>>;
}

/// What one pass over one log did.
#[derive(Debug, Clone, Default)]
pub struct CleanStats {
    pub end_offset: i64,
    pub groups_installed: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_kept: u64,
    pub records_removed: u64,
    pub next_delete_horizon_ms: Option<i64>,
    /// Every group was installed (the log did not change under the pass).
    pub complete: bool,
}

/// Clean `log` once, in the caller's thread and under the caller's `&mut` (tests, tools).
/// `first_dirty`: the checkpoint, if any. `None` when the plan says there is nothing to do.
pub fn clean_now(
    log: &mut Log,
    first_dirty: Option<i64>,
    map_memory_bytes: usize,
    now_ms: i64,
    force: bool,
) -> Result<Option<CleanStats>, LogError> {
    let Some(view) = log.clean_view() else {
        return Ok(None);
    };
    let Some(plan) = view.plan(first_dirty, now_ms, force) else {
        return Ok(None);
    };
    let mut map = OffsetMap::with_memory_for(map_memory_bytes, clean::dirty_records(&view, &plan));
    let outcome = clean_log(&view, &plan, &mut map, now_ms, &mut Throttle::unlimited())
        .map_err(|e| LogError::Corrupted(e.to_string()))?;
    install(log, &outcome, now_ms).map(Some)
}

/// Install every group of `outcome` (stopping at the first the log no longer matches).
pub fn install(log: &mut Log, outcome: &CleanOutcome, now_ms: i64) -> Result<CleanStats, LogError> {
    install_each(outcome, now_ms, &mut |f| {
        f(log);
        true
    })
}

/// Runs a closure with a log locked; `false` when the log is gone.
pub type LockFn<'a> = dyn FnMut(&mut dyn FnMut(&mut Log)) -> bool + 'a;

/// [`install`], taking the log's lock once per group through `lock` (which returns `false`
/// when the log is gone), so appends wait at most for one group's swap.
pub fn install_each(
    outcome: &CleanOutcome,
    now_ms: i64,
    lock: &mut LockFn<'_>,
) -> Result<CleanStats, LogError> {
    let mut stats = CleanStats {
        end_offset: outcome.end_offset,
        records_kept: outcome.records_kept,
        records_removed: outcome.records_removed,
        next_delete_horizon_ms: outcome.next_delete_horizon_ms,
        complete: true,
        ..CleanStats::default()
    };
    for (i, g) in outcome.groups.iter().enumerate() {
        let mut installed = None;
        let locked = lock(&mut |log| installed = Some(log.install_cleaned(g, now_ms)));
        match installed {
            Some(Ok(true)) if locked => {}
            Some(Err(e)) => {
                clean::discard(&outcome.groups[i..]);
                return Err(e);
            }
            _ => {
                // The log changed under the pass (or went away): the rest waits for the next.
                clean::discard(&outcome.groups[i..]);
                stats.complete = false;
                break;
            }
        }
        if let Some(dir) = g.cleaned_path.as_deref().and_then(std::path::Path::parent) {
            // The new segment's indexes, fsynced without holding up appends.
            swap::sync_installed(dir, g.base_offset)?;
        }
        stats.groups_installed += 1;
        stats.bytes_read += g.bytes_read;
        stats.bytes_written += g.bytes_written;
    }
    Ok(stats)
}

/// Totals since the cleaner started.
#[derive(Debug, Default)]
pub struct CleanerTotals {
    pub passes: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_removed: AtomicU64,
    pub failures: AtomicU64,
}

struct Shared {
    config: CleanerConfig,
    logs: Arc<dyn CleanerLogs>,
    clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    state: Mutex<State>,
    wake: Condvar,
    totals: CleanerTotals,
    /// Set on drop: a running pass ends at its next batch.
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    stopped: bool,
    /// Logs being cleaned by some thread (by directory).
    in_progress: HashSet<PathBuf>,
    /// Per data directory: `<topic>-<partition>` → first dirty offset.
    checkpoints: HashMap<PathBuf, BTreeMap<String, i64>>,
    /// Earliest delete horizon of a tombstone kept in each log.
    horizons: HashMap<PathBuf, i64>,
    /// Logs whose last pass failed, and when to try again.
    failed_until: HashMap<PathBuf, Instant>,
}

/// The cleaner threads; they stop (and are joined) when this is dropped.
pub struct LogCleaner {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl LogCleaner {
    /// Start `config.threads` cleaner threads over `logs`; `clock` gives the wall-clock time in
    /// milliseconds (passed in so the cleaner never reads a clock of its own).
    pub fn start(
        config: CleanerConfig,
        logs: Arc<dyn CleanerLogs>,
        clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> std::io::Result<LogCleaner> {
        let threads = config.threads.clamp(1, MAX_CLEANER_THREADS);
        let shared = Arc::new(Shared {
            config,
            logs,
            clock,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            totals: CleanerTotals::default(),
            stop: Arc::new(AtomicBool::new(false)),
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("log-cleaner-{i}"))
                .spawn(move || worker::run(&s, threads))?;
            handles.push(h);
        }
        Ok(LogCleaner {
            shared,
            threads: handles,
        })
    }

    /// Ask the threads to look for work now (e.g. after a config change).
    pub fn wake(&self) {
        self.shared.wake.notify_all();
    }

    pub fn totals(&self) -> &CleanerTotals {
        &self.shared.totals
    }
}

impl Drop for LogCleaner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.state.lock().expect("cleaner state").stopped = true;
        self.shared.wake.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// How long a log whose pass failed is left alone.
const FAILED_LOG_RETRY: Duration = Duration::from_secs(300);

mod worker;

//! `LogRuntime`: what the logs of one broker share — the clock, the background flusher thread
//! and the segment reaper thread.
//!
//! There is no process-wide state: a broker creates one runtime and hands it to every log it
//! opens (through `LogConfig::runtime`), so several brokers (or tests) in one process have
//! their own threads and their own time. The threads stop when the last handle to the runtime
//! is dropped (each log holds one): the queues close, the threads finish what was queued and
//! are joined. `LogConfig::default()` uses one runtime per process, created on first use, for
//! tools and tests that open a log on their own.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, ThreadId};

use streamforge_protocol::clock::{SharedClock, SystemClock};

use crate::background_flush::Flusher;
use crate::group_commit::GroupCommit;
use crate::reaper::Reaper;

/// The clock and background threads shared by a set of logs.
pub struct LogRuntime {
    clock: SharedClock,
    flusher: Flusher,
    reaper: Reaper,
    /// Background threads of this runtime still running.
    threads_running: Arc<AtomicUsize>,
}

impl LogRuntime {
    /// A runtime with its own flusher and reaper threads, reading time from `clock`.
    pub fn new(clock: SharedClock) -> Arc<LogRuntime> {
        let mut flusher = Flusher::start();
        let mut reaper = Reaper::start();
        let threads_running = Arc::new(AtomicUsize::new(0));
        flusher.thread.count_in(&threads_running);
        reaper.thread.count_in(&threads_running);
        Arc::new(LogRuntime {
            clock,
            flusher,
            reaper,
            threads_running,
        })
    }

    /// The runtime `LogConfig::default()` uses: one per process, with the system clock.
    pub fn process_default() -> Arc<LogRuntime> {
        static DEFAULT: OnceLock<Arc<LogRuntime>> = OnceLock::new();
        Arc::clone(DEFAULT.get_or_init(|| LogRuntime::new(SystemClock::shared())))
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Wall-clock milliseconds of this runtime's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A counter of this runtime's background threads still running (0 once it is dropped).
    pub fn threads_running(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.threads_running)
    }

    pub(crate) fn request_flush(&self, group: &Arc<GroupCommit>, offset: i64) {
        self.flusher.request(group, offset)
    }

    pub(crate) fn release<T: Send + 'static>(&self, handles: T) {
        self.reaper.release(handles)
    }
}

impl Drop for LogRuntime {
    fn drop(&mut self) {
        self.flusher.stop();
        self.reaper.stop();
    }
}

impl fmt::Debug for LogRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogRuntime")
            .field("clock", &self.clock)
            .field(
                "threads_running",
                &self.threads_running.load(Ordering::Relaxed),
            )
            .finish()
    }
}

/// One named background thread, joined on `join` (unless called from the thread itself).
pub(crate) struct WorkerThread {
    handle: Option<JoinHandle<()>>,
    id: Option<ThreadId>,
    running: Arc<OnceLock<Arc<AtomicUsize>>>,
}

impl WorkerThread {
    /// Spawn `body`; `is_none()` afterwards if the thread could not be created.
    pub(crate) fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> WorkerThread {
        let running: Arc<OnceLock<Arc<AtomicUsize>>> = Arc::new(OnceLock::new());
        let counted = Arc::clone(&running);
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                body();
                if let Some(c) = counted.get() {
                    c.fetch_sub(1, Ordering::SeqCst);
                }
            });
        match spawned {
            Ok(handle) => WorkerThread {
                id: Some(handle.thread().id()),
                handle: Some(handle),
                running,
            },
            Err(e) => {
                tracing::warn!(error = %e, thread = name, "cannot start a log background thread");
                WorkerThread {
                    handle: None,
                    id: None,
                    running,
                }
            }
        }
    }

    pub(crate) fn is_none(&self) -> bool {
        self.handle.is_none()
    }

    pub(crate) fn is_some(&self) -> bool {
        self.handle.is_some()
    }

    /// Count this thread in `counter` until it ends. Called right after `spawn`, before the
    /// thread can end (its queue's sender is still held), so the count never goes below zero.
    fn count_in(&mut self, counter: &Arc<AtomicUsize>) {
        if self.handle.is_some() {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = self.running.set(Arc::clone(counter));
        }
    }

    pub(crate) fn join(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        if Some(std::thread::current().id()) == self.id {
            return; // dropped by its own thread: it ends when this returns
        }
        if handle.join().is_err() {
            tracing::warn!("a log background thread panicked");
        }
    }
}

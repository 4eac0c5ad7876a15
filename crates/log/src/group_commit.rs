//! Group commit: many appends wait for one fsync.
//!
//! An appender (e.g. an acks=all Produce) takes a [`FlushTicket`] for the log end offset after
//! its append while holding the log's lock, releases the lock, and calls [`FlushTicket::wait`].
//! The first waiter to find no fsync in progress becomes the syncer: it fsyncs (outside every
//! lock except this module's short state lock) the segment files that may hold unflushed data,
//! covering every offset requested so far, then wakes all waiters. Appends that arrive while an
//! fsync runs are covered by the next one, so N concurrent producers cost ~2 fsyncs, not N.
//!
//! Background flushes (after a roll, and periodically: `crate::background_flush`) are one more
//! waiter, run on the flusher thread; at most one is queued or running per log.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long a waiter blocks on the condition variable before re-checking (a bound, not a
/// timeout: `wait` returns only when its offset is durable or an fsync failed).
const WAIT_SLICE: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct State {
    /// Offsets below this are fsynced.
    durable_offset: i64,
    /// The largest offset any waiter asked for.
    requested_offset: i64,
    syncing: bool,
    /// Descriptors of the segments that may hold data past `durable_offset`, with base offsets.
    files: Vec<(i64, Arc<File>)>,
    /// Set when an fsync fails: the log's storage is no longer trustworthy.
    failed: Option<String>,
    /// Number of fsync rounds run (observability and tests).
    syncs: u64,
    /// Bumped when the log is truncated: an fsync that started before a truncation must not
    /// mark offsets written after it as durable.
    generation: u64,
    /// The offset a background flush was asked to make durable.
    background_target: i64,
    /// A background flush for this log is queued or running.
    background_in_flight: bool,
}

/// Shared between a `Log` and the tickets it hands out.
#[derive(Debug)]
pub struct GroupCommit {
    state: Mutex<State>,
    cond: Condvar,
}

impl GroupCommit {
    pub(crate) fn new(durable_offset: i64) -> Arc<GroupCommit> {
        Arc::new(GroupCommit {
            state: Mutex::new(State {
                durable_offset,
                requested_offset: durable_offset,
                syncing: false,
                files: Vec::new(),
                failed: None,
                syncs: 0,
                generation: 0,
                background_target: durable_offset,
                background_in_flight: false,
            }),
            cond: Condvar::new(),
        })
    }

    pub fn durable_offset(&self) -> i64 {
        self.state.lock().durable_offset
    }

    /// Number of fsync rounds performed through group commit.
    pub fn sync_count(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Replace the set of files that may hold non-durable data (after roll/truncate/delete);
    /// returns the previous set (the caller chooses where its handles are dropped).
    pub(crate) fn set_files(&self, files: Vec<(i64, Arc<File>)>) -> Vec<(i64, Arc<File>)> {
        std::mem::replace(&mut self.state.lock().files, files)
    }

    /// The log fsynced everything below `offset` itself (`Log::flush`).
    pub(crate) fn mark_durable(&self, offset: i64) {
        let mut st = self.state.lock();
        if offset > st.durable_offset {
            st.durable_offset = offset;
            self.cond.notify_all();
        }
    }

    /// The log was truncated below the durable offset.
    pub(crate) fn reset_durable(&self, offset: i64) {
        let mut st = self.state.lock();
        st.durable_offset = st.durable_offset.min(offset);
        st.requested_offset = st.requested_offset.min(offset);
        st.background_target = st.background_target.min(offset);
        st.generation += 1;
    }

    /// Ask for a background flush of everything below `offset`. Returns `true` if a flush job
    /// must be queued (none is queued or running for this log); the caller then queues it or,
    /// if it cannot, calls [`GroupCommit::background_done`].
    pub(crate) fn request_background(&self, offset: i64) -> bool {
        let mut st = self.state.lock();
        if st.failed.is_some() || st.durable_offset >= offset {
            return false;
        }
        st.background_target = st.background_target.max(offset);
        if st.background_in_flight {
            return false;
        }
        st.background_in_flight = true;
        true
    }

    /// The next offset a background flush should reach, or `None` (and the job ends) when
    /// everything asked for is durable.
    pub(crate) fn next_background_target(&self) -> Option<i64> {
        let mut st = self.state.lock();
        if st.failed.is_some() || st.durable_offset >= st.background_target {
            st.background_in_flight = false;
            return None;
        }
        Some(st.background_target)
    }

    /// The background job ended early (not queued, or its fsync failed).
    pub(crate) fn background_done(&self) {
        self.state.lock().background_in_flight = false;
    }

    /// A background flush is queued or running.
    pub fn background_flush_in_flight(&self) -> bool {
        self.state.lock().background_in_flight
    }

    /// Block until every offset below `offset` is fsynced (running the fsync if nobody else is).
    pub fn wait_durable(&self, offset: i64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.requested_offset = st.requested_offset.max(offset);
        loop {
            if let Some(why) = &st.failed {
                return Err(io::Error::other(why.clone()));
            }
            if st.durable_offset >= offset {
                return Ok(());
            }
            if st.syncing {
                self.cond.wait_for(&mut st, WAIT_SLICE);
                continue;
            }
            // Become the syncer for everything requested so far.
            st.syncing = true;
            let target = st.requested_offset;
            let generation = st.generation;
            let files: Vec<Arc<File>> = st.files.iter().map(|(_, f)| Arc::clone(f)).collect();
            drop(st);
            let result = files.iter().try_for_each(|f| f.sync_data());
            st = self.state.lock();
            st.syncing = false;
            st.syncs += 1;
            match result {
                Ok(()) => {
                    if generation == st.generation && target > st.durable_offset {
                        st.durable_offset = target;
                    }
                    // Files wholly below the durable offset no longer need syncing.
                    let durable = st.durable_offset;
                    let keep_from = st
                        .files
                        .iter()
                        .rposition(|(base, _)| *base <= durable)
                        .unwrap_or(0);
                    st.files.drain(..keep_from);
                }
                Err(e) => {
                    tracing::error!(error = %e, "group-commit fsync failed");
                    st.failed = Some(format!("fsync failed: {e}"));
                }
            }
            self.cond.notify_all();
        }
    }
}

/// A promise that offsets below `offset` will be durable once [`FlushTicket::wait`] returns.
#[derive(Debug, Clone)]
pub struct FlushTicket {
    pub(crate) group: Arc<GroupCommit>,
    pub(crate) offset: i64,
}

impl FlushTicket {
    /// The offset this ticket waits for (exclusive).
    pub fn offset(&self) -> i64 {
        self.offset
    }
    /// Block (call from a blocking thread, e.g. `tokio::task::spawn_blocking`) until durable.
    pub fn wait(&self) -> io::Result<()> {
        self.group.wait_durable(self.offset)
    }
    /// Whether the offset is already durable (no need to wait).
    pub fn is_durable(&self) -> bool {
        self.group.durable_offset() >= self.offset
    }
}

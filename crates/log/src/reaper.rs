//! Releasing deleted segments off the caller's thread.
//!
//! Deleting a segment unlinks its files at once, but the kernel frees the file's pages (and, if
//! the flusher is writing them back, waits for that I/O) only when the last descriptor or
//! mapping goes: that cost — about a third of the append loop's CPU time when retention deletes
//! a segment for every one written, and the loop's main source of blocking — lands on whoever
//! drops the last handle. Kafka moves it off the request path too (segments are renamed
//! `.deleted` and removed later by a scheduler thread). Here one background thread drops
//! unlinked segments, and the group-commit file handles replaced after a roll or a deletion
//! (which may be the last ones); readers that still hold slices keep the mapping alive as
//! before, and a crash leaves nothing behind (the names are already gone).

use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use crate::runtime::WorkerThread;

/// Something to drop on the reaper thread.
type Doomed = Box<dyn Send>;

/// Handles waiting for the reaper; when the queue is full, the caller drops the handle itself
/// (back-pressure instead of unbounded memory and descriptors).
pub const MAX_PENDING_SEGMENT_DROPS: usize = 64;

/// The reaper thread of one [`crate::LogRuntime`]: it stops (after dropping what is queued)
/// when the runtime is dropped.
pub(crate) struct Reaper {
    tx: Option<SyncSender<Doomed>>,
    pub(crate) thread: WorkerThread,
}

impl Reaper {
    pub(crate) fn start() -> Reaper {
        let (tx, rx) = sync_channel::<Doomed>(MAX_PENDING_SEGMENT_DROPS);
        let thread = WorkerThread::spawn("log-segment-reaper", move || {
            for doomed in rx {
                drop(doomed);
            }
        });
        if thread.is_none() {
            tracing::warn!("no segment reaper thread; deleted segments are released inline");
        }
        Reaper {
            tx: thread.is_some().then_some(tx),
            thread,
        }
    }

    /// Drop `handles` (a segment whose files are already unlinked, or file handles that may be
    /// the last ones of such a segment) on the reaper thread, or here if the reaper is busy or
    /// missing. Called on roll and deletion paths only (it boxes), never per append.
    pub(crate) fn release<T: Send + 'static>(&self, handles: T) {
        let Some(tx) = &self.tx else {
            drop(handles);
            return;
        };
        match tx.try_send(Box::new(handles)) {
            Ok(()) => {}
            Err(TrySendError::Full(doomed) | TrySendError::Disconnected(doomed)) => drop(doomed),
        }
    }

    /// Close the queue and wait for the thread to drop what was queued.
    pub(crate) fn stop(&mut self) {
        self.tx = None;
        self.thread.join();
    }
}

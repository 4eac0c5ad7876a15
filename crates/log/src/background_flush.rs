//! Background flushing: fsyncs that move a log's recovery point forward without blocking its
//! appends.
//!
//! Two things ask for one, both while holding the log's lock (they only queue a job):
//! - a roll: the sealed segment is flushed soon after (Kafka schedules
//!   `flushUptoOffsetExclusive(newSegment.baseOffset)` right after a roll), and
//! - the broker's housekeeping, for data older than its `log_flush_background_ms`
//!   (`Log::request_background_flush`).
//!
//! One flusher thread per `LogRuntime` runs the jobs: each is a group-commit wait (`GroupCommit::wait_durable`),
//! so the fsync runs outside the log's lock, shares the fsync with acks=all producers, and
//! covers every offset asked for while it ran. At most one job per log is queued or running
//! (`GroupCommit::request_background`); the queue is bounded, and a request that does not fit
//! is dropped and asked again by the next housekeeping tick. `Log::tick` then moves the recovery
//! point to the durable offset and writes the checkpoint.

use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};

use crate::group_commit::GroupCommit;
use crate::runtime::WorkerThread;

/// Logs waiting for the flusher thread.
pub const MAX_PENDING_BACKGROUND_FLUSHES: usize = 4096;

/// The flusher thread of one [`crate::LogRuntime`]: it stops (after the queued jobs) when the
/// runtime is dropped.
pub(crate) struct Flusher {
    tx: Option<SyncSender<Arc<GroupCommit>>>,
    pub(crate) thread: WorkerThread,
}

impl Flusher {
    pub(crate) fn start() -> Flusher {
        let (tx, rx) = sync_channel::<Arc<GroupCommit>>(MAX_PENDING_BACKGROUND_FLUSHES);
        let thread = WorkerThread::spawn("log-background-flush", move || {
            lower_priority();
            for group in rx {
                run(&group);
            }
        });
        if thread.is_none() {
            tracing::warn!(
                "no background flush thread; logs are flushed only by flush.ms/flush.messages, acks=all and close"
            );
        }
        Flusher {
            tx: thread.is_some().then_some(tx),
            thread,
        }
    }

    /// Ask for everything below `offset` to be fsynced in the background. Never blocks and
    /// never fsyncs on the caller's thread.
    pub(crate) fn request(&self, group: &Arc<GroupCommit>, offset: i64) {
        if !group.request_background(offset) {
            return;
        }
        let queued = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send(Arc::clone(group)).is_ok());
        if !queued {
            tracing::debug!(
                offset,
                "background flush queue full; retried on the next tick"
            );
            group.background_done();
        }
    }

    /// Close the queue and wait for the thread to finish what was queued.
    pub(crate) fn stop(&mut self) {
        self.tx = None;
        self.thread.join();
    }
}

/// Nice value of the flusher thread. An fsync submits the writeback of everything written
/// since the last one on the calling thread (ext4 block allocation, building the I/O): a CPU
/// burst as large as the data, tens of ms for the 110 MB of `streamforge bench`. At normal
/// priority that burst took a core from request handling: in alternating runs of the bench's
/// 10,000 msg/s phase the p99 was 0.45-1.48 ms with background flushing and 0.40-0.77 ms
/// without (docs/BENCHMARKS.md). Only this thread waits on its fsyncs (acks=all does not), so
/// running it behind request handling delays nothing but the recovery point.
const FLUSHER_NICE: i32 = 10;

fn lower_priority() {
    // On Linux a thread id names one thread for setpriority(PRIO_PROCESS).
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), FLUSHER_NICE) {
        tracing::debug!(error = %e, "background flush thread keeps the normal priority");
    }
}

/// One job: fsync until everything asked for (also while it ran) is durable.
fn run(group: &GroupCommit) {
    while let Some(target) = group.next_background_target() {
        if let Err(e) = group.wait_durable(target) {
            // Group commit logged it and refuses further waits; the log reports it on writes.
            tracing::warn!(error = %e, "background flush failed");
            group.background_done();
            return;
        }
    }
}

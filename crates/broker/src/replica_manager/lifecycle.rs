//! The start-up and shutdown passes over every log: checkpoint what recovery re-scanned, and
//! close every log at shutdown.

use streamforge_log::LogError;

use super::ReplicaManager;

/// Logs closed at once at shutdown (threads, each waiting on its own fsyncs).
pub const CLOSE_THREADS_MAX: usize = 16;

impl ReplicaManager {
    /// Right after start-up: fsync the tail each unclean log re-scanned and move its
    /// recovery-point checkpoint past it. Without this the checkpoint only moves with the first
    /// background flush (a second or more later), so a crash loop shorter than that re-scans an
    /// ever longer tail on every restart. Blocking; the fsyncs run outside the logs' locks.
    pub fn checkpoint_recovery(&self, now_ms: i64) {
        for p in self.all_partitions() {
            let ticket =
                p.with_log(|log| (log.recovery_checked_bytes() > 0).then(|| log.flush_ticket()));
            let Ok(Some(ticket)) = ticket else { continue };
            let advanced = ticket.wait().map_err(LogError::from).and_then(|()| {
                match p.with_log(|log| log.tick_deferred(now_ms)) {
                    Ok(Ok(Some(advance))) => advance.write().map_err(LogError::from),
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(None)) | Err(_) => Ok(()),
                }
            });
            if let Err(e) = advanced {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "could not checkpoint the recovered log");
            }
        }
    }

    /// Flush and close every log (writes the clean-shutdown markers).
    ///
    /// Each close is a handful of fsyncs; one after another they made a clean shutdown of a
    /// broker with the 50 `__consumer_offsets` partitions take over a second. They are I/O
    /// waits, not CPU, so up to [`CLOSE_THREADS_MAX`] run at once.
    pub fn close_all(&self) {
        let partitions = self.all_partitions();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..partitions.len().min(CLOSE_THREADS_MAX) {
                scope.spawn(|| {
                    while let Some(p) =
                        partitions.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        if let Some(log) = p.take_log()
                            && let Err(e) = log.close()
                        {
                            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing log failed");
                        }
                    }
                });
            }
        });
    }
}

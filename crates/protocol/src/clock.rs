//! The clock, injected: wall-clock milliseconds (record timestamps, `segment.ms`,
//! `retention.ms`, group session timeouts) and a monotonic reading (deadlines, rate limits).
//!
//! It lives in the protocol crate because that is the one crate every user of time (log,
//! tiered, client, broker) already depends on, and it does no I/O. Code that owns state takes
//! time as an argument (`Log::tick(now_ms)`, the group coordinator's events); the edges that
//! read the time ask a [`Clock`] they were handed, so tests run several brokers in one process
//! and drive them with a [`ManualClock`] instead of sleeping.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time.
pub trait Clock: Send + Sync + Debug {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Time since an arbitrary fixed origin (never goes backwards).
    fn monotonic(&self) -> Duration;
}

/// A clock shared by everything one broker (or one test) runs.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }

    /// A shared handle to a new system clock.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to (simulated time in tests).
#[derive(Debug)]
pub struct ManualClock {
    wall_ms: AtomicI64,
    monotonic_ns: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms` on the wall and zero on the monotonic scale.
    pub fn new(start_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            wall_ms: AtomicI64::new(start_ms),
            monotonic_ns: AtomicU64::new(0),
        })
    }

    /// Move both readings forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.wall_ms.fetch_add(ms, Ordering::SeqCst);
        self.monotonic_ns.fetch_add(ns, Ordering::SeqCst);
    }

    /// Set the wall clock (it may jump backwards, as a real one can; the monotonic one not).
    pub fn set_ms(&self, now_ms: i64) {
        self.wall_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.monotonic_ns.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!((c.now_ms(), c.monotonic()), (1_000, Duration::ZERO));
        c.advance(Duration::from_millis(250));
        assert_eq!(c.now_ms(), 1_250);
        assert_eq!(c.monotonic(), Duration::from_millis(250));
        c.set_ms(10);
        assert_eq!(c.now_ms(), 10);
        assert_eq!(c.monotonic(), Duration::from_millis(250));
    }

    #[test]
    fn system_clock_is_the_wall_clock() {
        let c = SystemClock::new();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((c.now_ms() - wall).abs() < 5_000);
        let a = c.monotonic();
        assert!(c.monotonic() >= a);
    }
}

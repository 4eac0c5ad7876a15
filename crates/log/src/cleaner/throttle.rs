//! `log.cleaner.io.max.bytes.per.second`: the cleaner sleeps when it has read and written more
//! than the rate allows since the throttle started (Kafka's `Throttler`, checked per batch).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest single sleep, so a stop request is seen soon.
const SLEEP_MAX: Duration = Duration::from_millis(100);

pub struct Throttle {
    bytes_per_second: f64,
    started: Instant,
    bytes: u64,
    /// Time spent sleeping (reported with the pass).
    pub slept: Duration,
    /// Set when the cleaner stops: the pass ends at its next batch.
    stop: Option<Arc<AtomicBool>>,
}

/// The cleaner is stopping: the pass gives up (its `.cleaned` files are removed).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the log cleaner is stopping")]
pub struct Stopped;

impl Throttle {
    /// `bytes_per_second` <= 0 or infinite: no limit.
    pub fn new(bytes_per_second: f64) -> Throttle {
        Throttle {
            bytes_per_second,
            started: Instant::now(),
            bytes: 0,
            slept: Duration::ZERO,
            stop: None,
        }
    }

    /// Like [`Throttle::new`], giving up once `stop` is set.
    pub fn with_stop(bytes_per_second: f64, stop: Arc<AtomicBool>) -> Throttle {
        Throttle {
            stop: Some(stop),
            ..Throttle::new(bytes_per_second)
        }
    }

    pub fn unlimited() -> Throttle {
        Throttle::new(f64::INFINITY)
    }

    /// Count `n` bytes of I/O; sleep while the rate is above the limit. `Err` once the cleaner
    /// is stopping.
    pub fn account(&mut self, n: u64) -> Result<(), Stopped> {
        self.bytes += n;
        loop {
            if self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return Err(Stopped);
            }
            if !(self.bytes_per_second.is_finite() && self.bytes_per_second > 0.0) {
                return Ok(());
            }
            let allowed_secs = self.bytes as f64 / self.bytes_per_second;
            let elapsed = self.started.elapsed().as_secs_f64();
            if elapsed >= allowed_secs {
                return Ok(());
            }
            let wait = Duration::from_secs_f64(allowed_secs - elapsed).min(SLEEP_MAX);
            std::thread::sleep(wait);
            self.slept += wait;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_the_rate() {
        let mut t = Throttle::new(1_000_000.0);
        let start = Instant::now();
        for _ in 0..10 {
            t.account(20_000).unwrap();
        }
        // 200 kB at 1 MB/s take at least 0.2 s.
        assert!(start.elapsed() >= Duration::from_millis(190));
        let mut free = Throttle::unlimited();
        free.account(u64::MAX / 2).unwrap();
        assert_eq!(free.slept, Duration::ZERO);
        let stop = Arc::new(AtomicBool::new(false));
        let mut t = Throttle::with_stop(f64::INFINITY, Arc::clone(&stop));
        t.account(1).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(t.account(1).is_err());
    }
}

//! `log.cleaner.io.max.bytes.per.second`: the cleaner sleeps when it has read and written more
//! than the rate allows since the throttle started (Kafka's `Throttler`, checked per batch).

use std::time::{Duration, Instant};

/// Longest single sleep, so a stop request is seen soon.
const SLEEP_MAX: Duration = Duration::from_millis(100);

pub struct Throttle {
    bytes_per_second: f64,
    started: Instant,
    bytes: u64,
    /// Time spent sleeping (reported with the pass).
    pub slept: Duration,
}

impl Throttle {
    /// `bytes_per_second` <= 0 or infinite: no limit.
    pub fn new(bytes_per_second: f64) -> Throttle {
        Throttle {
            bytes_per_second,
            started: Instant::now(),
            bytes: 0,
            slept: Duration::ZERO,
        }
    }

    pub fn unlimited() -> Throttle {
        Throttle::new(f64::INFINITY)
    }

    /// Count `n` bytes of I/O; sleep while the rate is above the limit.
    pub fn account(&mut self, n: u64) {
        self.bytes += n;
        if !(self.bytes_per_second.is_finite() && self.bytes_per_second > 0.0) {
            return;
        }
        loop {
            let allowed_secs = self.bytes as f64 / self.bytes_per_second;
            let elapsed = self.started.elapsed().as_secs_f64();
            if elapsed >= allowed_secs {
                return;
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
            t.account(20_000);
        }
        // 200 kB at 1 MB/s take at least 0.2 s.
        assert!(start.elapsed() >= Duration::from_millis(190));
        let mut free = Throttle::unlimited();
        free.account(u64::MAX / 2);
        assert_eq!(free.slept, Duration::ZERO);
    }
}

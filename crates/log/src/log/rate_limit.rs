//! Rate limit for a warning that repeats on every retry (a damaged batch is met again by every
//! fetch of the consumer stuck at it): at most one line per interval, saying how many were
//! suppressed since the previous one.

use std::time::Duration;

use parking_lot::Mutex;

/// At most one damaged-batch warning per partition per this interval.
pub(crate) const DAMAGED_BATCH_WARN_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct WarnLimiter {
    interval: Duration,
    state: Mutex<LimiterState>,
}

#[derive(Debug, Default)]
struct LimiterState {
    /// Monotonic time (`Clock::monotonic`) of the last warning.
    last: Option<Duration>,
    suppressed: u64,
}

impl WarnLimiter {
    pub(crate) fn new(interval: Duration) -> WarnLimiter {
        WarnLimiter {
            interval,
            state: Mutex::new(LimiterState::default()),
        }
    }

    /// `Some(suppressed)` if a warning may be logged at `now` (with the number suppressed since
    /// the last one), `None` if it is to be suppressed.
    pub(crate) fn allow(&self, now: Duration) -> Option<u64> {
        let mut st = self.state.lock();
        match st.last {
            Some(last) if now.saturating_sub(last) < self.interval => {
                st.suppressed += 1;
                None
            }
            _ => {
                st.last = Some(now);
                Some(std::mem::take(&mut st.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_interval_with_the_suppressed_count() {
        let limiter = WarnLimiter::new(Duration::from_secs(10));
        let t0 = Duration::from_secs(1_000);
        assert_eq!(limiter.allow(t0), Some(0));
        for s in 1..10 {
            assert_eq!(limiter.allow(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(limiter.allow(t0 + Duration::from_secs(10)), Some(9));
        assert_eq!(limiter.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(limiter.allow(t0 + Duration::from_secs(25)), Some(1));
    }
}

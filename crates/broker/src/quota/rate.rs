//! Kafka's windowed `Rate` (`org.apache.kafka.common.metrics.stats.Rate` over a `SampledStat`)
//! and the quota throttle time (`QuotaUtils.throttleTime`), sans-io: time is an argument.
//!
//! A rate keeps `samples` windows of `window_ms` each (Kafka: `quota.window.num` = 11 of
//! `quota.window.size.seconds` = 1 s). A record goes into the current window, or starts the
//! next one (round robin) when the current one is `window_ms` old. Windows older than
//! `samples * window_ms` count as empty. The rate is the sum of the windows over the elapsed
//! time since the oldest window started, where the elapsed time is at least `samples - 1`
//! full windows (so a fresh sensor does not see one burst as a huge rate).

/// `quota.window.num`: samples kept per sensor.
pub const QUOTA_WINDOW_NUM_DEFAULT: usize = 11;
/// `quota.window.size.seconds`: the span of one sample.
pub const QUOTA_WINDOW_SIZE_SECONDS_DEFAULT: u64 = 1;
/// Most samples a sensor may keep (a bound on `quota.window.num`).
pub const QUOTA_WINDOW_NUM_MAX: usize = 1_000;

/// The shape of every quota sensor's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    pub samples: usize,
    pub window_ms: i64,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            samples: QUOTA_WINDOW_NUM_DEFAULT,
            window_ms: QUOTA_WINDOW_SIZE_SECONDS_DEFAULT as i64 * 1000,
        }
    }
}

impl RateConfig {
    /// The config, or why it is invalid (`quota.window.num` >= 2, window >= 1 s).
    pub fn new(samples: usize, window_seconds: u64) -> Result<RateConfig, String> {
        if !(2..=QUOTA_WINDOW_NUM_MAX).contains(&samples) {
            return Err(format!(
                "quota.window.num {samples}: want 2..={QUOTA_WINDOW_NUM_MAX}"
            ));
        }
        if !(1..=3600).contains(&window_seconds) {
            return Err(format!(
                "quota.window.size.seconds {window_seconds}: want 1..=3600"
            ));
        }
        Ok(RateConfig {
            samples,
            window_ms: window_seconds as i64 * 1000,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    last_window_ms: i64,
}

impl Sample {
    fn new(now_ms: i64) -> Sample {
        Sample {
            value: 0.0,
            last_window_ms: now_ms,
        }
    }
}

/// One windowed rate (values per second).
#[derive(Debug, Clone, Default)]
pub struct Rate {
    samples: Vec<Sample>,
    current: usize,
}

impl Rate {
    pub fn new() -> Rate {
        Rate::default()
    }

    /// Add `value` at `now_ms` (negative values take back an earlier record, as Kafka's
    /// `unrecordQuotaSensor` does).
    pub fn record(&mut self, cfg: RateConfig, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        if now_ms - self.samples[self.current].last_window_ms >= cfg.window_ms {
            self.advance(cfg, now_ms);
        }
        self.samples[self.current].value += value;
        debug_assert!(self.samples.len() <= cfg.samples);
    }

    fn advance(&mut self, cfg: RateConfig, now_ms: i64) {
        self.current = (self.current + 1) % cfg.samples;
        if self.current >= self.samples.len() {
            self.samples.push(Sample::new(now_ms));
        } else {
            self.samples[self.current] = Sample::new(now_ms);
        }
    }

    /// Windows that ended more than `samples * window_ms` ago hold nothing any more.
    fn purge_obsolete(&mut self, cfg: RateConfig, now_ms: i64) {
        let expire_age_ms = cfg.samples as i64 * cfg.window_ms;
        for s in &mut self.samples {
            if now_ms - s.last_window_ms >= expire_age_ms {
                *s = Sample::new(now_ms);
            }
        }
    }

    /// Kafka's `Rate.windowSize`: the elapsed time the rate divides by, in ms (at least 1).
    pub fn window_size_ms(&mut self, cfg: RateConfig, now_ms: i64) -> i64 {
        self.purge_obsolete(cfg, now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.last_window_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed_ms = now_ms - oldest;
        let full_windows = elapsed_ms / cfg.window_ms;
        let min_full_windows = cfg.samples as i64 - 1;
        if full_windows < min_full_windows {
            elapsed_ms += (min_full_windows - full_windows) * cfg.window_ms;
        }
        elapsed_ms.max(1)
    }

    /// Kafka's `SimpleRate.windowSize` (the replication quotas' rate): the time since the
    /// oldest window started, at least one window. Unlike [`Self::window_size_ms`] a fresh
    /// sensor is not padded to `samples - 1` windows, so a burst after a quiet spell counts in
    /// full: the first second's bytes are measured over one second.
    pub fn simple_window_size_ms(&mut self, cfg: RateConfig, now_ms: i64) -> i64 {
        self.purge_obsolete(cfg, now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.last_window_ms)
            .min()
            .unwrap_or(now_ms);
        (now_ms - oldest).max(cfg.window_ms)
    }

    /// Values per second at `now_ms`, measured as Kafka's `SimpleRate`.
    pub fn measure_simple(&mut self, cfg: RateConfig, now_ms: i64) -> f64 {
        let window_ms = self.simple_window_size_ms(cfg, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window_ms as f64 / 1000.0)
    }

    /// Values per second at `now_ms`.
    pub fn measure(&mut self, cfg: RateConfig, now_ms: i64) -> f64 {
        let window_ms = self.window_size_ms(cfg, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window_ms as f64 / 1000.0)
    }

    /// Kafka's `Sensor.record(value, now, checkQuotas = true)` then `QuotaUtils.throttleTime`:
    /// record, and if the rate is now over `bound` (per second), how long (ms) the client must
    /// wait to bring it back to `bound` if it sends nothing more: `(O - T) / T * W`.
    pub fn record_and_throttle_ms(
        &mut self,
        cfg: RateConfig,
        value: f64,
        bound: f64,
        now_ms: i64,
    ) -> u64 {
        self.record(cfg, value, now_ms);
        self.throttle_ms(cfg, bound, now_ms)
    }

    /// The throttle time for the rate as it stands (0 within `bound`).
    pub fn throttle_ms(&mut self, cfg: RateConfig, bound: f64, now_ms: i64) -> u64 {
        let observed = self.measure(cfg, now_ms);
        if observed <= bound || bound <= 0.0 {
            return 0;
        }
        let window_ms = self.window_size_ms(cfg, now_ms) as f64;
        ((observed - bound) / bound * window_ms).round().max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use streamforge_protocol::clock::{Clock, ManualClock};

    fn now(c: &ManualClock) -> i64 {
        c.monotonic().as_millis() as i64
    }

    #[test]
    fn a_fresh_rate_divides_by_at_least_samples_minus_one_windows() {
        let cfg = RateConfig::default();
        let clock = ManualClock::new(0);
        let mut r = Rate::new();
        r.record(cfg, 1000.0, now(&clock));
        // 1000 over the 10 s minimum window.
        assert_eq!(r.window_size_ms(cfg, now(&clock)), 10_000);
        assert!((r.measure(cfg, now(&clock)) - 100.0).abs() < 1e-9);
        clock.advance(Duration::from_millis(500));
        assert_eq!(r.window_size_ms(cfg, now(&clock)), 10_500);
    }

    #[test]
    fn throttle_time_is_kafkas_formula() {
        let cfg = RateConfig::default();
        let mut r = Rate::new();
        // 2,000 units at t=0 against a bound of 100/s: O = 200/s over W = 10 s, so
        // X = (200 - 100) / 100 * 10 s = 10 s.
        assert_eq!(r.record_and_throttle_ms(cfg, 2_000.0, 100.0, 0), 10_000);
        // Kafka's X assumes the window grows by X; a fresh sensor's window is padded to 10 s,
        // so at X it is still over, and the burst is forgotten once its window expires (11 s).
        assert!(r.throttle_ms(cfg, 100.0, 10_000) > 0);
        assert_eq!(r.throttle_ms(cfg, 100.0, 11_000), 0);
        let mut within = Rate::new();
        assert_eq!(within.record_and_throttle_ms(cfg, 999.0, 100.0, 0), 0);
    }

    #[test]
    fn old_windows_expire_and_windows_roll_round_robin() {
        let cfg = RateConfig::new(3, 1).unwrap();
        let clock = ManualClock::new(0);
        let mut r = Rate::new();
        for _ in 0..5 {
            r.record(cfg, 10.0, now(&clock));
            clock.advance(Duration::from_millis(1_000));
        }
        assert!(r.samples.len() <= 3);
        // At t = 5 s the window of t = 2 s is 3 windows old (expired): 20 over the 2 s since 3 s.
        assert!((r.measure(cfg, now(&clock)) - 10.0).abs() < 1e-9);
        clock.advance(Duration::from_secs(60));
        assert_eq!(r.measure(cfg, now(&clock)), 0.0);
    }

    #[test]
    fn a_steady_sender_obeying_throttles_averages_the_bound() {
        // A client sends 100 KB batches as fast as it is let through against 1 MB/s, sleeping
        // each throttle time. Kafka's rate lets a fresh sensor burst (the window is padded to
        // 10 s) and the burst's window expiring lets the next one through, so a sender with no
        // other limit is bursty; averaged over 60 s after the start-up burst it gets the bound
        // within 10 % (the same arithmetic run in Python gives 0.93).
        let cfg = RateConfig::default();
        let clock = ManualClock::new(0);
        let (bound, batch) = (1_000_000.0, 100_000.0);
        let mut r = Rate::new();
        let mut sent = 0.0;
        while clock.monotonic() < Duration::from_secs(75) {
            let t = r.record_and_throttle_ms(cfg, batch, bound, now(&clock));
            if clock.monotonic() >= Duration::from_secs(15) {
                sent += batch;
            }
            clock.advance(Duration::from_millis(t.max(1)));
        }
        let rate = sent / 60.0;
        assert!((rate - bound).abs() / bound < 0.10, "{rate}");
    }

    #[test]
    fn a_simple_rate_divides_by_the_time_since_its_oldest_window_at_least_one_window() {
        let cfg = RateConfig::default();
        let clock = ManualClock::new(0);
        let mut r = Rate::new();
        r.record(cfg, 1000.0, now(&clock));
        // Within the first window: over one window (1 s), not the padded 10 s.
        assert_eq!(r.simple_window_size_ms(cfg, now(&clock)), 1_000);
        assert!((r.measure_simple(cfg, now(&clock)) - 1000.0).abs() < 1e-9);
        clock.advance(Duration::from_millis(4_000));
        r.record(cfg, 1000.0, now(&clock));
        // 2,000 over the 4 s since the first window started.
        assert!((r.measure_simple(cfg, now(&clock)) - 500.0).abs() < 1e-9);
        // Both windows expire 11 windows after they started: nothing is left.
        clock.advance(Duration::from_secs(20));
        assert_eq!(r.measure_simple(cfg, now(&clock)), 0.0);
    }

    #[test]
    fn unrecord_takes_a_value_back() {
        let cfg = RateConfig::default();
        let mut r = Rate::new();
        r.record(cfg, 500.0, 0);
        r.record(cfg, -500.0, 0);
        assert_eq!(r.measure(cfg, 0), 0.0);
        assert!(RateConfig::new(1, 1).is_err());
        assert!(RateConfig::new(11, 0).is_err());
    }
}

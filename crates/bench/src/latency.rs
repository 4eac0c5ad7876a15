//! Latency histograms (microsecond resolution). End to end: producers embed the send time in
//! each value; consumers record receive time minus send time. Ack latency (`ack.rs`) records
//! acknowledgement time minus send time.
use std::sync::OnceLock;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Bytes at the start of each value holding the send time.
pub const TIMESTAMP_BYTES: usize = 8;
/// Highest latency tracked (60 s in µs); larger samples are clamped.
const MAX_TRACKABLE_US: u64 = 60_000_000;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds on a monotonic clock shared by producers and consumers of this process.
pub fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

/// Writes `at_us` (from [`now_us`]) into the start of `value`.
pub fn stamp_at(value: &mut [u8], at_us: u64) {
    value[..TIMESTAMP_BYTES].copy_from_slice(&at_us.to_be_bytes());
}

pub fn read_stamp(value: &[u8]) -> Option<u64> {
    value
        .get(..TIMESTAMP_BYTES)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKABLE_US, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, sent_us: u64) {
    record_n(h, sent_us, 1);
}

/// Records `count` samples of the time since `sent_us` (records sent together, acknowledged
/// together).
pub fn record_n(h: &mut Histogram<u64>, sent_us: u64, count: u64) {
    let lat = now_us().saturating_sub(sent_us).clamp(1, MAX_TRACKABLE_US);
    h.record_n(lat, count).expect("clamped into range");
}

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencySummary {
    pub fn from_histogram(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Self {
            samples: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_summaries_are_ordered() {
        let mut v = vec![0u8; 16];
        stamp_at(&mut v, now_us());
        let t = read_stamp(&v).unwrap();
        assert!(t <= now_us());
        let mut h = new_histogram();
        for i in 1..=1000u64 {
            h.record(i * 10).unwrap();
        }
        let s = LatencySummary::from_histogram(&h).unwrap();
        assert!(s.p50 <= s.p95 && s.p95 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
        assert!((s.p50 - 5.0).abs() < 0.1, "{}", s.p50);
        assert!(LatencySummary::from_histogram(&new_histogram()).is_none());
        let mut h = new_histogram();
        record_n(&mut h, now_us(), 7);
        record_n(&mut h, now_us() + 1_000_000, 1);
        assert_eq!(
            h.len(),
            8,
            "a stamp in the future counts as the smallest latency"
        );
        assert_eq!(h.min(), 1);
    }
}

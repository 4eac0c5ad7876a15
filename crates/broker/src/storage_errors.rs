//! Storage failures (KAFKA_STORAGE_ERROR) on the append path, a leader's (the producer gets
//! the error) or a follower's (its fetcher backs the partition off): counted in
//! `streamforge_storage_errors_total{topic}` and logged at warn, at most one line per partition
//! per `STORAGE_ERROR_LOG_INTERVAL` with the number of failures the interval suppressed. A
//! failing disk fails every append, so an unlimited log would drown the useful first line.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Shortest time between two log lines for one partition.
pub const STORAGE_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Partitions whose last log time is remembered; past it the table starts over (a few extra
/// lines, never unbounded memory).
const PARTITIONS_TRACKED_MAX: usize = 4096;

/// Per-partition log throttle.
#[derive(Debug, Default)]
pub struct Throttle {
    /// (topic, partition) -> (last line logged, failures suppressed since).
    last: HashMap<(Arc<str>, i32), (Instant, u64)>,
}

impl Throttle {
    /// `Some(suppressed)` when a line should be logged now for this partition.
    pub fn admit(&mut self, topic: &Arc<str>, partition: i32, now: Instant) -> Option<u64> {
        if let Some((at, suppressed)) = self.last.get_mut(&(topic.clone(), partition)) {
            if now.duration_since(*at) < STORAGE_ERROR_LOG_INTERVAL {
                *suppressed += 1;
                return None;
            }
            let n = *suppressed;
            *at = now;
            *suppressed = 0;
            return Some(n);
        }
        if self.last.len() >= PARTITIONS_TRACKED_MAX {
            self.last.clear();
        }
        self.last.insert((topic.clone(), partition), (now, 0));
        Some(0)
    }
}

static THROTTLE: LazyLock<Mutex<Throttle>> = LazyLock::new(Default::default);

/// Count a storage failure of an append to `topic`-`partition`, and log it unless throttled.
pub fn record(topic: &Arc<str>, partition: i32, error: &dyn std::fmt::Display) {
    metrics::counter!("streamforge_storage_errors_total", "topic" => topic.to_string())
        .increment(1);
    let admitted = THROTTLE.lock().admit(topic, partition, Instant::now());
    if let Some(suppressed) = admitted {
        tracing::warn!(
            %topic,
            partition,
            suppressed,
            error = %error,
            "append failed with a storage error (KAFKA_STORAGE_ERROR to the producer; a \
             follower fetches again after replica.fetch.backoff.ms); `suppressed` more \
             failures of this partition were not logged in the last 10 s"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_once_per_interval_with_the_suppressed_count() {
        let mut t = Throttle::default();
        let topic: Arc<str> = Arc::from("t");
        let t0 = Instant::now();
        assert_eq!(t.admit(&topic, 0, t0), Some(0));
        assert_eq!(t.admit(&topic, 0, t0 + Duration::from_secs(1)), None);
        assert_eq!(t.admit(&topic, 0, t0 + Duration::from_secs(2)), None);
        // Another partition has its own budget.
        assert_eq!(t.admit(&topic, 1, t0 + Duration::from_secs(2)), Some(0));
        let later = t0 + STORAGE_ERROR_LOG_INTERVAL + Duration::from_millis(1);
        assert_eq!(t.admit(&topic, 0, later), Some(2));
        assert_eq!(t.admit(&topic, 0, later), None);
    }
}

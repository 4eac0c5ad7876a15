//! Metrics (`metrics` facade, exported by the http crate's Prometheus recorder) and the
//! same numbers as plain counters for the dashboard JSON and the benchmark.

use std::sync::atomic::{AtomicU64, Ordering};

pub const BYTES_UPLOADED: &str = "streamforge_remote_bytes_uploaded_total";
pub const SEGMENTS_UPLOADED: &str = "streamforge_remote_segments_uploaded_total";
pub const UPLOAD_ERRORS: &str = "streamforge_remote_upload_errors_total";
pub const UPLOAD_LAG_BYTES: &str = "streamforge_remote_upload_lag_bytes";
pub const UPLOAD_LAG_SEGMENTS: &str = "streamforge_remote_upload_lag_segments";
pub const SEGMENTS_DELETED: &str = "streamforge_remote_segments_deleted_total";
pub const READ_BYTES: &str = "streamforge_remote_read_bytes_total";
pub const READ_REQUESTS: &str = "streamforge_remote_reads_total";
pub const READ_DURATION: &str = "streamforge_remote_read_duration_seconds";
pub const FETCHED_BYTES: &str = "streamforge_remote_fetched_bytes_total";
pub const CACHE_HITS: &str = "streamforge_remote_cache_hits_total";
pub const CACHE_MISSES: &str = "streamforge_remote_cache_misses_total";
pub const CACHE_HIT_RATIO: &str = "streamforge_remote_cache_hit_ratio";
pub const CORRUPT_BATCHES: &str = "streamforge_remote_corrupt_batches_total";
pub const REMOTE_SIZE_BYTES: &str = "streamforge_remote_log_size_bytes";
pub const LOCAL_SIZE_BYTES: &str = "streamforge_local_log_size_bytes";

/// Process-wide totals (a snapshot is cheap to take).
#[derive(Debug, Default)]
pub struct TieredStats {
    pub bytes_uploaded: AtomicU64,
    pub segments_uploaded: AtomicU64,
    pub upload_errors: AtomicU64,
    pub segments_deleted: AtomicU64,
    pub read_requests: AtomicU64,
    pub read_bytes: AtomicU64,
    pub read_micros_total: AtomicU64,
    pub fetched_bytes: AtomicU64,
    pub get_requests: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub corrupt_batches: AtomicU64,
    pub orphans_deleted: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StatsSnapshot {
    pub bytes_uploaded: u64,
    pub segments_uploaded: u64,
    pub upload_errors: u64,
    pub segments_deleted: u64,
    pub read_requests: u64,
    pub read_bytes: u64,
    pub read_micros_total: u64,
    pub fetched_bytes: u64,
    pub get_requests: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_hit_ratio: f64,
    pub corrupt_batches: u64,
    pub orphans_deleted: u64,
}

impl TieredStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (hits, misses) = (l(&self.cache_hits), l(&self.cache_misses));
        StatsSnapshot {
            bytes_uploaded: l(&self.bytes_uploaded),
            segments_uploaded: l(&self.segments_uploaded),
            upload_errors: l(&self.upload_errors),
            segments_deleted: l(&self.segments_deleted),
            read_requests: l(&self.read_requests),
            read_bytes: l(&self.read_bytes),
            read_micros_total: l(&self.read_micros_total),
            fetched_bytes: l(&self.fetched_bytes),
            get_requests: l(&self.get_requests),
            cache_hits: hits,
            cache_misses: misses,
            cache_hit_ratio: hit_ratio(hits, misses),
            corrupt_batches: l(&self.corrupt_batches),
            orphans_deleted: l(&self.orphans_deleted),
        }
    }

    pub fn record_cache(&self, hit: bool) {
        if hit {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(CACHE_HITS).increment(1);
        } else {
            self.cache_misses.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(CACHE_MISSES).increment(1);
        }
        let s = self.snapshot();
        metrics::gauge!(CACHE_HIT_RATIO).set(s.cache_hit_ratio);
    }
}

fn hit_ratio(hits: u64, misses: u64) -> f64 {
    if hits + misses == 0 {
        0.0
    } else {
        hits as f64 / (hits + misses) as f64
    }
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

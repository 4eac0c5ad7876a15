//! Live numbers: once a second, turn the cumulative tap values into per-second rates and
//! latency percentiles, keep a bounded history for charts, and broadcast to SSE subscribers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::metrics_tap::Tap;
use crate::now_ms;

/// Seconds of history kept for the charts a page draws when it opens.
pub const LIVE_HISTORY_LEN: usize = 600;
/// Snapshots buffered per SSE subscriber before a slow one skips ahead.
pub const LIVE_CHANNEL_CAPACITY: usize = 16;
pub const LIVE_INTERVAL: Duration = Duration::from_secs(1);
/// Latency percentiles cover this many ticks (rates cover one): a quiet second does not blank
/// the latency table, and a percentile needs more than one second of samples to mean much.
pub const LATENCY_WINDOW_TICKS: usize = 10;

#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveSnapshot {
    pub ts_ms: i64,
    pub messages_in_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub messages_out_per_sec: f64,
    pub bytes_out_per_sec: f64,
    pub requests_per_sec: f64,
    pub connections: f64,
    pub apis: Vec<ApiLive>,
    pub topics: Vec<TopicLive>,
    pub totals: LiveTotals,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveTotals {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
    pub requests: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiLive {
    pub api: String,
    pub requests_per_sec: f64,
    pub requests_total: u64,
    /// Latency percentiles over the last `LATENCY_WINDOW_TICKS` seconds (None without requests).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicLive {
    pub topic: String,
    pub messages_in_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub messages_out_per_sec: f64,
    pub bytes_out_per_sec: f64,
}

#[derive(Clone, Copy, Default)]
struct TopicTotals {
    messages_in: u64,
    bytes_in: u64,
    messages_out: u64,
    bytes_out: u64,
}

struct ApiPrevious {
    requests: u64,
    /// Cumulative latency histograms of the last `LATENCY_WINDOW_TICKS` ticks, oldest first.
    latency_us: VecDeque<Histogram<u64>>,
}

/// What the previous tick saw, to compute deltas.
#[derive(Default)]
struct Previous {
    at: Option<Instant>,
    topics: HashMap<String, TopicTotals>,
    apis: HashMap<String, ApiPrevious>,
}

/// Samples the tap; one per server.
pub struct LiveSampler {
    tap: Arc<Tap>,
    previous: Mutex<Previous>,
    history: Mutex<VecDeque<Arc<LiveSnapshot>>>,
    sender: broadcast::Sender<Arc<LiveSnapshot>>,
}

impl LiveSampler {
    pub fn new(tap: Arc<Tap>) -> Arc<LiveSampler> {
        let (sender, _) = broadcast::channel(LIVE_CHANNEL_CAPACITY);
        let sampler = Arc::new(LiveSampler {
            tap,
            previous: Mutex::new(Previous::default()),
            history: Mutex::new(VecDeque::with_capacity(LIVE_HISTORY_LEN)),
            sender,
        });
        // Establish the baseline so the first published snapshot is a real one-second rate.
        sampler.sample();
        sampler
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveSnapshot>> {
        self.sender.subscribe()
    }

    pub fn latest(&self) -> Option<Arc<LiveSnapshot>> {
        self.history.lock().back().cloned()
    }

    pub fn history(&self) -> Vec<Arc<LiveSnapshot>> {
        self.history.lock().iter().cloned().collect()
    }

    /// Runs until the returned task is aborted.
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let sampler = Arc::clone(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(LIVE_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                let snapshot = Arc::new(sampler.sample());
                {
                    let mut history = sampler.history.lock();
                    if history.len() == LIVE_HISTORY_LEN {
                        history.pop_front();
                    }
                    history.push_back(Arc::clone(&snapshot));
                }
                // No subscribers is fine.
                let _ = sampler.sender.send(snapshot);
            }
        })
    }

    /// Computes one snapshot from the deltas since the previous call.
    fn sample(&self) -> LiveSnapshot {
        let now = Instant::now();
        let mut previous = self.previous.lock();
        let elapsed_s = previous
            .at
            .map_or(0.0, |at| now.duration_since(at).as_secs_f64());
        previous.at = Some(now);
        let rate = |delta: u64| {
            if elapsed_s > 0.0 {
                delta as f64 / elapsed_s
            } else {
                0.0
            }
        };

        let mut snapshot = LiveSnapshot {
            ts_ms: now_ms(),
            connections: self.tap.connections().max(0.0),
            ..LiveSnapshot::default()
        };
        for (topic, counters) in self.tap.topic_counters() {
            let current = TopicTotals {
                messages_in: counters.messages_in.load(Ordering::Relaxed),
                bytes_in: counters.bytes_in.load(Ordering::Relaxed),
                messages_out: counters.messages_out.load(Ordering::Relaxed),
                bytes_out: counters.bytes_out.load(Ordering::Relaxed),
            };
            let before = previous
                .topics
                .insert(topic.clone(), current)
                .unwrap_or_default();
            let live = TopicLive {
                topic,
                messages_in_per_sec: rate(current.messages_in.saturating_sub(before.messages_in)),
                bytes_in_per_sec: rate(current.bytes_in.saturating_sub(before.bytes_in)),
                messages_out_per_sec: rate(
                    current.messages_out.saturating_sub(before.messages_out),
                ),
                bytes_out_per_sec: rate(current.bytes_out.saturating_sub(before.bytes_out)),
            };
            snapshot.messages_in_per_sec += live.messages_in_per_sec;
            snapshot.bytes_in_per_sec += live.bytes_in_per_sec;
            snapshot.messages_out_per_sec += live.messages_out_per_sec;
            snapshot.bytes_out_per_sec += live.bytes_out_per_sec;
            snapshot.totals.messages_in += current.messages_in;
            snapshot.totals.bytes_in += current.bytes_in;
            snapshot.totals.messages_out += current.messages_out;
            snapshot.totals.bytes_out += current.bytes_out;
            snapshot.topics.push(live);
        }
        for (api, stats) in self.tap.api_stats() {
            let latency_now = stats.latency_us.lock().clone();
            // Brokers may record only the histogram; its count is then the request count.
            let requests_now = stats
                .requests
                .load(Ordering::Relaxed)
                .max(latency_now.len());
            let entry = previous.apis.entry(api.clone()).or_insert_with(|| {
                // An API seen for the first time had nothing before: its base is empty.
                let mut empty = latency_now.clone();
                empty.reset();
                let mut history = VecDeque::with_capacity(LATENCY_WINDOW_TICKS + 1);
                history.push_back(empty);
                ApiPrevious {
                    requests: 0,
                    latency_us: history,
                }
            });
            let requests_before = std::mem::replace(&mut entry.requests, requests_now);
            let mut window = latency_now.clone();
            if let Some(oldest) = entry.latency_us.front() {
                // Subtraction fails only if the histograms' ranges differ, which they don't.
                if window.subtract(oldest).is_err() {
                    window.reset();
                }
            }
            entry.latency_us.push_back(latency_now);
            while entry.latency_us.len() > LATENCY_WINDOW_TICKS {
                entry.latency_us.pop_front();
            }
            let percentile =
                |q: f64| (!window.is_empty()).then(|| window.value_at_quantile(q) as f64 / 1000.0);
            let requests_per_sec = rate(requests_now.saturating_sub(requests_before));
            snapshot.requests_per_sec += requests_per_sec;
            snapshot.totals.requests += requests_now;
            snapshot.apis.push(ApiLive {
                api,
                requests_per_sec,
                requests_total: requests_now,
                p50_ms: percentile(0.5),
                p99_ms: percentile(0.99),
                p999_ms: percentile(0.999),
                max_ms: (!window.is_empty()).then(|| window.max() as f64 / 1000.0),
            });
        }
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_tap::{MESSAGES_IN, REQUEST_DURATION, install_metrics};

    #[test]
    fn rates_per_interval_and_latency_over_the_window() {
        let hub = install_metrics();
        let sampler = LiveSampler::new(Arc::clone(&hub.tap));
        metrics::counter!(MESSAGES_IN, "topic" => "live-test").increment(100);
        metrics::histogram!(REQUEST_DURATION, "api" => "LiveTest").record(0.004);
        std::thread::sleep(Duration::from_millis(20));
        let first = sampler.sample();
        let topic = first
            .topics
            .iter()
            .find(|t| t.topic == "live-test")
            .unwrap();
        assert!(topic.messages_in_per_sec > 0.0);
        let api = first.apis.iter().find(|a| a.api == "LiveTest").unwrap();
        let p50 = api.p50_ms.unwrap();
        assert!((3.9..=4.1).contains(&p50), "{p50}");
        assert!(api.requests_per_sec > 0.0);

        std::thread::sleep(Duration::from_millis(20));
        let quiet = sampler.sample();
        let topic = quiet
            .topics
            .iter()
            .find(|t| t.topic == "live-test")
            .unwrap();
        assert_eq!(topic.messages_in_per_sec, 0.0);
        let api = quiet.apis.iter().find(|a| a.api == "LiveTest").unwrap();
        assert_eq!(api.requests_per_sec, 0.0);
        assert!(
            api.p50_ms.is_some(),
            "latency stays visible within the window"
        );
        assert_eq!(quiet.totals.messages_in - first.totals.messages_in, 0);
    }
}

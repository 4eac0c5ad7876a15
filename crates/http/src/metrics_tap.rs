//! The process-wide metrics recorder: Prometheus plus a "tap" for the live view.
//!
//! The broker records through the `metrics` facade. We install one global recorder that forwards
//! everything to the Prometheus exporter's recorder (rendered at `/metrics`) and, for the few
//! families the dashboard charts live, also adds the values into plain atomics and cumulative
//! latency histograms. The live sampler ([`crate::live`]) reads those once a second. The broker
//! needs no dashboard-specific code: it only has to use the metric names in COMMON.md.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use hdrhistogram::Histogram;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram as MetricsHistogram, HistogramFn, Key, KeyName,
    Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use parking_lot::{Mutex, RwLock};

pub const MESSAGES_IN: &str = "streamforge_messages_in_total";
pub const BYTES_IN: &str = "streamforge_bytes_in_total";
pub const MESSAGES_OUT: &str = "streamforge_messages_out_total";
pub const BYTES_OUT: &str = "streamforge_bytes_out_total";
pub const REQUESTS: &str = "streamforge_requests_total";
pub const REQUEST_DURATION: &str = "streamforge_request_duration_seconds";
pub const CONNECTIONS: &str = "streamforge_connections";

/// Latency histogram range: 1 µs .. 60 s, 2 significant digits (a few KiB per API).
const LATENCY_US_MAX: u64 = 60_000_000;
const LATENCY_SIGFIG: u8 = 2;
/// Prometheus buckets for the request latency histogram, in seconds.
const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Per-topic traffic counters (cumulative since start).
#[derive(Default)]
pub struct TopicCounters {
    pub messages_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub messages_out: AtomicU64,
    pub bytes_out: AtomicU64,
}

/// Per-API request counters and a cumulative latency histogram in microseconds.
pub struct ApiStats {
    pub requests: AtomicU64,
    pub latency_us: Mutex<Histogram<u64>>,
}

impl ApiStats {
    fn new() -> ApiStats {
        let histogram = Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGFIG)
            .expect("static histogram bounds are valid");
        ApiStats {
            requests: AtomicU64::new(0),
            latency_us: Mutex::new(histogram),
        }
    }
}

/// The values the live view samples.
#[derive(Default)]
pub struct Tap {
    topics: Mutex<BTreeMap<String, Arc<TopicCounters>>>,
    apis: Mutex<BTreeMap<String, Arc<ApiStats>>>,
    /// `streamforge_connections`, as f64 bits.
    connections_bits: Arc<AtomicU64>,
}

impl Tap {
    pub fn topic_counters(&self) -> Vec<(String, Arc<TopicCounters>)> {
        self.topics
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    pub fn api_stats(&self) -> Vec<(String, Arc<ApiStats>)> {
        self.apis
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    pub fn connections(&self) -> f64 {
        f64::from_bits(self.connections_bits.load(Ordering::Relaxed))
    }

    fn topic(&self, key: &Key) -> Arc<TopicCounters> {
        let topic = label(key, "topic").unwrap_or_default();
        Arc::clone(self.topics.lock().entry(topic).or_default())
    }

    fn api(&self, key: &Key) -> Arc<ApiStats> {
        let api = label(key, "api").unwrap_or_else(|| "unknown".to_string());
        Arc::clone(
            self.apis
                .lock()
                .entry(api)
                .or_insert_with(|| Arc::new(ApiStats::new())),
        )
    }
}

fn label(key: &Key, name: &str) -> Option<String> {
    key.labels()
        .find(|l| l.key() == name)
        .map(|l| l.value().to_string())
}

/// The installed recorder: render Prometheus text and read the live tap.
pub struct MetricsHub {
    pub prometheus: PrometheusHandle,
    pub tap: Arc<Tap>,
    /// False when another recorder was installed first (then `/metrics` stays empty of broker
    /// metrics and the live view shows zeros; a warning is logged).
    pub installed: bool,
}

static HUB: OnceLock<MetricsHub> = OnceLock::new();

/// Installs the global recorder once per process and returns it. Call it as early as possible
/// (metrics recorded before it are lost); later calls return the same hub.
pub fn install_metrics() -> &'static MetricsHub {
    HUB.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(REQUEST_DURATION.to_string()),
                DURATION_BUCKETS_SECONDS,
            )
            .expect("static bucket list is not empty")
            .build_recorder();
        let prometheus = recorder.handle();
        let tap = Arc::new(Tap::default());
        let installed = metrics::set_global_recorder(TapRecorder {
            counters: RwLock::new(HashMap::new()),
            histograms: RwLock::new(HashMap::new()),
            inner: recorder,
            tap: Arc::clone(&tap),
        })
        .map_err(|e| tracing::warn!(error = %e, "a metrics recorder was already installed"))
        .is_ok();
        if installed {
            describe_families();
        }
        MetricsHub {
            prometheus,
            tap,
            installed,
        }
    })
}

fn describe_families() {
    metrics::describe_counter!(MESSAGES_IN, "Messages appended by producers, by topic");
    metrics::describe_counter!(
        BYTES_IN,
        "Record batch bytes appended by producers, by topic"
    );
    metrics::describe_counter!(MESSAGES_OUT, "Messages returned to fetchers, by topic");
    metrics::describe_counter!(
        BYTES_OUT,
        "Record batch bytes returned to fetchers, by topic"
    );
    metrics::describe_counter!(REQUESTS, "Kafka requests handled, by api");
    metrics::describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Kafka request latency, by api"
    );
    metrics::describe_gauge!(CONNECTIONS, "Open Kafka client connections");
    // Present from the start, so a scrape before the first client shows the family.
    metrics::gauge!(CONNECTIONS).increment(0.0);
}

struct TapRecorder {
    inner: PrometheusRecorder,
    tap: Arc<Tap>,
    /// Tapped handles by key: the broker calls `counter!(...)` per request, and this keeps that
    /// a read-locked map lookup instead of a registry lookup plus an allocation each time.
    counters: RwLock<HashMap<Key, Counter>>,
    histograms: RwLock<HashMap<Key, MetricsHistogram>>,
}

impl Recorder for TapRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if let Some(counter) = self.counters.read().get(key) {
            return counter.clone();
        }
        let inner = self.inner.register_counter(key, metadata);
        let slot = match key.name() {
            MESSAGES_IN => CounterSlot::Topic(self.tap.topic(key), TopicField::MessagesIn),
            BYTES_IN => CounterSlot::Topic(self.tap.topic(key), TopicField::BytesIn),
            MESSAGES_OUT => CounterSlot::Topic(self.tap.topic(key), TopicField::MessagesOut),
            BYTES_OUT => CounterSlot::Topic(self.tap.topic(key), TopicField::BytesOut),
            REQUESTS => CounterSlot::Requests(self.tap.api(key)),
            _ => return inner,
        };
        let counter = Counter::from_arc(Arc::new(TapCounter { inner, slot }));
        self.counters
            .write()
            .entry(key.clone())
            .or_insert(counter)
            .clone()
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let inner = self.inner.register_gauge(key, metadata);
        if key.name() == CONNECTIONS && key.labels().next().is_none() {
            return Gauge::from_arc(Arc::new(TapGauge {
                inner,
                bits: Arc::clone(&self.tap.connections_bits),
            }));
        }
        inner
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> MetricsHistogram {
        if let Some(histogram) = self.histograms.read().get(key) {
            return histogram.clone();
        }
        let inner = self.inner.register_histogram(key, metadata);
        if key.name() != REQUEST_DURATION {
            return inner;
        }
        let histogram = MetricsHistogram::from_arc(Arc::new(TapHistogram {
            inner,
            api: self.tap.api(key),
        }));
        self.histograms
            .write()
            .entry(key.clone())
            .or_insert(histogram)
            .clone()
    }
}

#[derive(Clone, Copy)]
enum TopicField {
    MessagesIn,
    BytesIn,
    MessagesOut,
    BytesOut,
}

enum CounterSlot {
    Topic(Arc<TopicCounters>, TopicField),
    Requests(Arc<ApiStats>),
}

impl CounterSlot {
    fn atomic(&self) -> &AtomicU64 {
        match self {
            CounterSlot::Topic(t, TopicField::MessagesIn) => &t.messages_in,
            CounterSlot::Topic(t, TopicField::BytesIn) => &t.bytes_in,
            CounterSlot::Topic(t, TopicField::MessagesOut) => &t.messages_out,
            CounterSlot::Topic(t, TopicField::BytesOut) => &t.bytes_out,
            CounterSlot::Requests(a) => &a.requests,
        }
    }
}

struct TapCounter {
    inner: Counter,
    slot: CounterSlot,
}

impl CounterFn for TapCounter {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        self.slot.atomic().fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
        self.slot.atomic().fetch_max(value, Ordering::Relaxed);
    }
}

struct TapGauge {
    inner: Gauge,
    bits: Arc<AtomicU64>,
}

impl TapGauge {
    fn update(&self, f: impl Fn(f64) -> f64) {
        // A CAS loop: gauges are updated on connect/disconnect, never contended for long.
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some(f(f64::from_bits(bits)).to_bits())
            });
    }
}

impl GaugeFn for TapGauge {
    fn increment(&self, value: f64) {
        self.inner.increment(value);
        self.update(|v| v + value);
    }

    fn decrement(&self, value: f64) {
        self.inner.decrement(value);
        self.update(|v| v - value);
    }

    fn set(&self, value: f64) {
        self.inner.set(value);
        self.update(|_| value);
    }
}

struct TapHistogram {
    inner: MetricsHistogram,
    api: Arc<ApiStats>,
}

impl HistogramFn for TapHistogram {
    fn record(&self, value_seconds: f64) {
        self.inner.record(value_seconds);
        let micros = (value_seconds * 1e6).clamp(1.0, LATENCY_US_MAX as f64) as u64;
        self.api.latency_us.lock().saturating_record(micros);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tap_sees_broker_metrics_and_prometheus_renders_them() {
        let hub = install_metrics();
        assert!(hub.installed);
        metrics::counter!(MESSAGES_IN, "topic" => "tap-test").increment(5);
        metrics::counter!(MESSAGES_IN, "topic" => "tap-test").increment(2);
        metrics::histogram!(REQUEST_DURATION, "api" => "TapTest").record(0.002);
        metrics::gauge!(CONNECTIONS).increment(3.0);
        metrics::gauge!(CONNECTIONS).decrement(1.0);
        let topics = hub.tap.topic_counters();
        let (_, counters) = topics.iter().find(|(t, _)| t == "tap-test").unwrap();
        assert_eq!(counters.messages_in.load(Ordering::Relaxed), 7);
        let apis = hub.tap.api_stats();
        let (_, api) = apis.iter().find(|(a, _)| a == "TapTest").unwrap();
        assert_eq!(api.latency_us.lock().len(), 1);
        assert!(hub.tap.connections() >= 2.0);
        let text = hub.prometheus.render();
        assert!(
            text.contains("streamforge_messages_in_total{topic=\"tap-test\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("streamforge_request_duration_seconds_bucket"),
            "{text}"
        );
    }
}

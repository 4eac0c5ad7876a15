//! A broker's metrics recorder: Prometheus plus a "tap" for the live view.
//!
//! The broker records through the `metrics` facade. A [`MetricsHub`] is a recorder that
//! forwards everything to the Prometheus exporter's recorder (rendered at `/metrics`) and, for
//! the few families the dashboard charts live, also adds the values into plain atomics and
//! cumulative latency histograms. The live sampler ([`crate::live`]) reads those once a second.
//! The broker needs no dashboard-specific code: it only has to use the metric names in COMMON.md.
//!
//! A hub is a value, not a process-wide singleton: [`MetricsHub::new`] makes one, and code runs
//! "inside" it with [`MetricsHub::scope`] (a future wrapper that makes the hub the `metrics`
//! local recorder while the future is polled), so several brokers in one process keep separate
//! numbers. [`install_metrics`] is the process default the binary uses: one hub installed as
//! the `metrics` global recorder, so code outside any scope is counted too.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

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

/// One broker's recorder: render Prometheus text and read the live tap.
pub struct MetricsHub {
    pub prometheus: PrometheusHandle,
    pub tap: Arc<Tap>,
    /// Whether this hub is the process's global recorder ([`install_metrics`]). False for a
    /// hub made with [`MetricsHub::new`], and for the default hub when another recorder was
    /// installed first (then only scoped code reaches it; a warning is logged).
    pub installed: bool,
    recorder: TapRecorder,
}

impl std::fmt::Debug for MetricsHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsHub")
            .field("installed", &self.installed)
            .finish_non_exhaustive()
    }
}

impl MetricsHub {
    /// A hub of its own (not the global recorder): only code run in [`MetricsHub::scope`] or
    /// [`MetricsHub::in_scope`] records into it.
    pub fn new() -> Arc<MetricsHub> {
        let hub = Arc::new(MetricsHub::build(false));
        hub.in_scope(describe_families);
        hub
    }

    fn build(installed: bool) -> MetricsHub {
        let inner = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(REQUEST_DURATION.to_string()),
                DURATION_BUCKETS_SECONDS,
            )
            .expect("static bucket list is not empty")
            .build_recorder();
        let prometheus = inner.handle();
        let tap = Arc::new(Tap::default());
        MetricsHub {
            prometheus,
            tap: Arc::clone(&tap),
            installed,
            recorder: TapRecorder {
                counters: RwLock::new(HashMap::new()),
                histograms: RwLock::new(HashMap::new()),
                inner,
                tap,
            },
        }
    }

    /// Run `f` with this hub as the `metrics` recorder of the current thread.
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// `fut`, recording into this hub whenever it is polled (tasks it spawns are not
    /// covered: wrap them too).
    pub fn scope<F: Future>(self: &Arc<Self>, fut: F) -> InHub<F> {
        InHub {
            hub: Arc::clone(self),
            fut: Box::pin(fut),
        }
    }
}

/// A future that records into a [`MetricsHub`] (see [`MetricsHub::scope`]).
pub struct InHub<F> {
    hub: Arc<MetricsHub>,
    fut: Pin<Box<F>>,
}

impl<F: Future> Future for InHub<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let fut = this.fut.as_mut();
        metrics::with_local_recorder(&this.hub.recorder, || fut.poll(cx))
    }
}

/// The global recorder: forwards to the default hub.
struct GlobalRecorder(Arc<MetricsHub>);

impl Recorder for GlobalRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_counter(key, unit, description)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_gauge(key, unit, description)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_histogram(key, unit, description)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.recorder.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.recorder.register_gauge(key, metadata)
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> MetricsHistogram {
        self.0.recorder.register_histogram(key, metadata)
    }
}

static DEFAULT_HUB: OnceLock<Arc<MetricsHub>> = OnceLock::new();

/// Installs the process's default hub as the global recorder once and returns it. Call it as
/// early as possible (metrics recorded before it are lost); later calls return the same hub.
pub fn install_metrics() -> Arc<MetricsHub> {
    Arc::clone(DEFAULT_HUB.get_or_init(|| {
        let hub = Arc::new(MetricsHub::build(true));
        let installed = metrics::set_global_recorder(GlobalRecorder(Arc::clone(&hub)))
            .map_err(|e| tracing::warn!(error = %e, "a metrics recorder was already installed"))
            .is_ok();
        if installed {
            describe_families();
            hub
        } else {
            // Someone else's recorder is global: this hub is reached through scopes only.
            let hub = Arc::new(MetricsHub::build(false));
            hub.in_scope(describe_families);
            hub
        }
    }))
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
    fn two_hubs_keep_separate_numbers() {
        let (a, b) = (MetricsHub::new(), MetricsHub::new());
        a.in_scope(|| metrics::counter!(MESSAGES_IN, "topic" => "hub-test").increment(3));
        let counted = a.scope(async {
            metrics::counter!(MESSAGES_IN, "topic" => "hub-test").increment(4);
            metrics::gauge!(CONNECTIONS).increment(1.0);
        });
        futures::executor::block_on(counted);
        b.in_scope(|| metrics::counter!(MESSAGES_IN, "topic" => "other").increment(1));
        let in_a = a.tap.topic_counters();
        let (_, counters) = in_a.iter().find(|(t, _)| t == "hub-test").unwrap();
        assert_eq!(counters.messages_in.load(Ordering::Relaxed), 7);
        assert_eq!(a.tap.connections(), 1.0);
        assert!(b.tap.topic_counters().iter().all(|(t, _)| t != "hub-test"));
        assert_eq!(b.tap.connections(), 0.0);
        let text = a.prometheus.render();
        assert!(
            text.contains("streamforge_messages_in_total{topic=\"hub-test\"} 7"),
            "{text}"
        );
        assert!(!b.prometheus.render().contains("hub-test"));
    }

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

//! Client quotas, enforced as Kafka does (KIP-13 byte rates, KIP-55 user and (user, client-id)
//! entities, KIP-124 request percentage, KIP-219 throttling by muting, KIP-546 the quota APIs).
//! See docs/SECURITY.md "Quotas".
//!
//! `QuotaManager` holds the configured quotas (persisted through `store::QuotaStore`) and one
//! sensor per (quota type, metric tags) in use: Kafka's windowed `Rate` (`rate`). Handlers
//! record what a client used and get back the throttle time; the connection then mutes the
//! client for it (`connection.rs`). Sensors idle for `SENSOR_INACTIVE_MS` (Kafka: one hour) are
//! dropped, and there are at most `SENSORS_MAX`, so memory stays bounded whatever the clients.

pub mod busy;
pub mod entity;
pub mod rate;
pub mod replication;
pub mod store;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use parking_lot::{Mutex, RwLock};
use streamforge_protocol::clock::SharedClock;

pub use busy::{BusyTime, PollTime};
use entity::{ClientQuotaRecord, QuotaConfigs, QuotaKey, Resolved, resolve};
use rate::{Rate, RateConfig};
use store::{QuotaStore, QuotaStoreError};

/// Kafka's `INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS`: a sensor not recorded for an hour goes.
pub const SENSOR_INACTIVE_MS: i64 = 3_600_000;
/// Most sensors kept at once; past it the least recently used one is dropped.
pub const SENSORS_MAX: usize = 10_000;
/// Most configured quota entities (a bound on the file and on DescribeClientQuotas).
pub const QUOTA_ENTITIES_MAX: usize = 10_000;
/// Distinct (user, client-id) label pairs on `/metrics`; the rest are counted as `_other`.
pub const METRIC_ENTITIES_MAX: usize = 64;
/// How often expired sensors are looked for (on a record).
const SENSOR_PURGE_INTERVAL_MS: i64 = 60_000;

/// Throttle time by quota, per `/metrics` entity (ms, counter).
pub const THROTTLE_TIME_METRIC: &str = "streamforge_quota_throttle_time_ms_total";
/// Byte rate (producer/consumer) or request percentage per quota entity, as last measured.
pub const RATE_METRIC: &str = "streamforge_quota_rate";
/// The configured bound of the same entity.
pub const LIMIT_METRIC: &str = "streamforge_quota_limit";

/// Who a request is from, for quotas: the principal's name and the client id ("" if none).
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> ClientIdentity<'a> {
    pub fn of(req: &'a streamforge_protocol::RequestFrame) -> ClientIdentity<'a> {
        ClientIdentity {
            user: req
                .principal
                .as_deref()
                .unwrap_or(crate::security::principal::ANONYMOUS),
            client_id: req.client_id.as_deref().unwrap_or(""),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    key: QuotaKey,
    user: String,
    client_id: String,
}

struct Sensor {
    rate: Rate,
    last_record_ms: i64,
}

#[derive(Default)]
struct Sensors {
    map: HashMap<SensorKey, Sensor>,
    last_purge_ms: i64,
    /// Label pairs that have their own `/metrics` series (at most `METRIC_ENTITIES_MAX`).
    labelled: HashSet<(String, String)>,
}

/// Why an alteration was not applied.
#[derive(Debug, thiserror::Error)]
pub enum AlterError {
    #[error("at most {QUOTA_ENTITIES_MAX} client quota entities")]
    TooManyEntities,
    #[error(transparent)]
    Store(#[from] QuotaStoreError),
}

pub struct QuotaManager {
    store: Box<dyn QuotaStore>,
    configs: RwLock<QuotaConfigs>,
    /// Serializes alterations (persist, then replay).
    alter_lock: Mutex<()>,
    sensors: Mutex<Sensors>,
    cfg: RateConfig,
    clock: SharedClock,
}

impl QuotaManager {
    pub fn open(
        store: Box<dyn QuotaStore>,
        cfg: RateConfig,
        clock: SharedClock,
    ) -> Result<QuotaManager, QuotaStoreError> {
        let configs = store.load()?;
        Ok(QuotaManager {
            store,
            configs: RwLock::new(configs),
            alter_lock: Mutex::new(()),
            sensors: Mutex::new(Sensors::default()),
            cfg,
            clock,
        })
    }

    pub fn rate_config(&self) -> RateConfig {
        self.cfg
    }

    /// A copy of every configured quota.
    pub fn configs(&self) -> QuotaConfigs {
        self.configs.read().clone()
    }

    /// Persist `records` (blocking I/O), then make them visible. `Err` leaves nothing changed.
    pub fn alter(&self, records: &[ClientQuotaRecord]) -> Result<(), AlterError> {
        let _one_at_a_time = self.alter_lock.lock();
        let mut next = self.configs.read().clone();
        entity::replay(&mut next, records);
        if next.len() > QUOTA_ENTITIES_MAX {
            return Err(AlterError::TooManyEntities);
        }
        self.store.persist(records, &next)?;
        *self.configs.write() = next;
        for r in records {
            tracing::info!(entity = %r.entity, key = r.key.name(), value = ?r.value, "client quota altered");
        }
        Ok(())
    }

    fn now_ms(&self) -> i64 {
        self.clock.monotonic().as_millis() as i64
    }

    /// Which quota of `key` applies to `who`, if any.
    fn resolve(&self, key: QuotaKey, who: ClientIdentity<'_>) -> Option<Resolved> {
        resolve(&self.configs.read(), key, who.user, who.client_id)
    }

    /// Record `value` against `who`'s `key` quota; the throttle time in ms (0 = within quota,
    /// or no quota applies).
    pub fn record(&self, key: QuotaKey, who: ClientIdentity<'_>, value: f64) -> u64 {
        let Some(resolved) = self.resolve(key, who) else {
            return 0;
        };
        let now_ms = self.now_ms();
        let cfg = self.cfg;
        let mut sensors = self.sensors.lock();
        let sensor = sensors.sensor(key, &resolved, now_ms);
        let mut throttle_ms =
            sensor
                .rate
                .record_and_throttle_ms(cfg, value, resolved.bound, now_ms);
        if key == QuotaKey::RequestPercentage {
            // Kafka bounds the request-quota throttle by one window.
            throttle_ms = throttle_ms.min(cfg.window_ms as u64);
        }
        let measured = sensor.rate.measure(cfg, now_ms);
        sensors.export(key, &resolved, measured, throttle_ms);
        throttle_ms
    }

    /// Take back a recorded value (a throttled Fetch answers without data, so its bytes are
    /// not counted: Kafka's `unrecordQuotaSensor`).
    pub fn unrecord(&self, key: QuotaKey, who: ClientIdentity<'_>, value: f64) {
        let Some(resolved) = self.resolve(key, who) else {
            return;
        };
        let now_ms = self.now_ms();
        let mut sensors = self.sensors.lock();
        sensors
            .sensor(key, &resolved, now_ms)
            .rate
            .record(self.cfg, -value, now_ms);
    }

    /// Request handler time, as a percentage of one thread over the window (KIP-124).
    pub fn record_request_time(&self, who: ClientIdentity<'_>, elapsed: Duration) -> u64 {
        // Kafka's nanosToPercentagePerSecond: 100 % = one second of thread time per second.
        let percent_seconds = elapsed.as_secs_f64() * 100.0;
        self.record(QuotaKey::RequestPercentage, who, percent_seconds)
    }

    /// Kafka's `getMaxValueInQuotaWindow`: the most bytes one Fetch may return to `who`
    /// (the consumer byte rate times the window), so a single response cannot exceed the
    /// quota by more than one window's worth.
    pub fn fetch_bytes_max(&self, who: ClientIdentity<'_>) -> Option<usize> {
        let r = self.resolve(QuotaKey::ConsumerByteRate, who)?;
        Some((r.bound * (self.cfg.window_ms as f64 / 1000.0)).max(1.0) as usize)
    }

    /// Sensors held now (for tests of the bound and the expiry).
    pub fn sensor_count(&self) -> usize {
        self.sensors.lock().map.len()
    }
}

impl Sensors {
    fn sensor(&mut self, key: QuotaKey, r: &Resolved, now_ms: i64) -> &mut Sensor {
        if now_ms - self.last_purge_ms >= SENSOR_PURGE_INTERVAL_MS {
            self.last_purge_ms = now_ms;
            self.map
                .retain(|_, s| now_ms - s.last_record_ms < SENSOR_INACTIVE_MS);
        }
        let k = SensorKey {
            key,
            user: r.user_tag.clone(),
            client_id: r.client_tag.clone(),
        };
        if !self.map.contains_key(&k) && self.map.len() >= SENSORS_MAX {
            // Full: drop the least recently used sensor (O(n), only when the bound is hit).
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, s)| s.last_record_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.map.remove(&oldest);
            }
        }
        let sensor = self.map.entry(k).or_insert_with(|| Sensor {
            rate: Rate::new(),
            last_record_ms: now_ms,
        });
        sensor.last_record_ms = now_ms;
        sensor
    }

    /// `/metrics`: the rate, the bound and the throttle time, labelled by quota entity tags
    /// (the first `METRIC_ENTITIES_MAX` pairs; the others add to `_other`'s throttle time).
    fn export(&mut self, key: QuotaKey, r: &Resolved, measured: f64, throttle_ms: u64) {
        let pair = (r.user_tag.clone(), r.client_tag.clone());
        let own = self.labelled.contains(&pair)
            || (self.labelled.len() < METRIC_ENTITIES_MAX && self.labelled.insert(pair.clone()));
        let quota = key.name();
        if !own {
            metrics::counter!(THROTTLE_TIME_METRIC, "quota" => quota, "user" => "_other", "client_id" => "_other")
                .increment(throttle_ms);
            return;
        }
        let (user, client_id) = pair;
        metrics::counter!(THROTTLE_TIME_METRIC, "quota" => quota, "user" => user.clone(), "client_id" => client_id.clone())
            .increment(throttle_ms);
        metrics::gauge!(RATE_METRIC, "quota" => quota, "user" => user.clone(), "client_id" => client_id.clone())
            .set(measured);
        metrics::gauge!(LIMIT_METRIC, "quota" => quota, "user" => user, "client_id" => client_id)
            .set(r.bound);
    }
}

/// `# HELP` of the quota families.
pub fn describe_metrics() {
    metrics::describe_counter!(
        THROTTLE_TIME_METRIC,
        "Client-quota throttle time in ms, by quota key and quota entity (user, client_id)"
    );
    metrics::describe_gauge!(
        RATE_METRIC,
        "Client-quota rate as last measured (bytes/s, or percent for request_percentage)"
    );
    metrics::describe_gauge!(LIMIT_METRIC, "Client-quota bound of the entity");
    metrics::describe_counter!(
        replication::THROTTLED_BYTES_METRIC,
        "Bytes of throttled replicas (reassignment throttles) recorded against the replication quota, by side (leader, follower)"
    );
}

/// KIP-219: responses of these versions carry `throttle_time_ms` and the client backs off
/// itself, so the broker answers at once and then mutes the connection; older versions get
/// their response delayed instead (Kafka's `shouldClientThrottle`).
pub fn client_throttles(api_key: ApiKey, api_version: i16) -> bool {
    match api_key {
        ApiKey::Produce => api_version >= 6,
        ApiKey::Fetch => api_version >= 8,
        _ => false,
    }
}

/// APIs never throttled by the request quota: the inter-broker ones (Kafka exempts cluster
/// actions; follower fetches are exempted in the Fetch handler by their replica id).
pub fn exempt(api_key: ApiKey) -> bool {
    matches!(api_key, ApiKey::WriteTxnMarkers)
}

/// Mute a connection for `ms` (nothing is read from it meanwhile); shutdown ends it early.
pub async fn mute_for(shutdown: &tokio::sync::watch::Receiver<bool>, ms: u64) {
    if ms == 0 {
        return;
    }
    let mut shutdown = shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        _ = shutdown.changed() => {}
    }
}

/// The quota manager of a broker: quotas in `<data_dir>/client-quotas.json`.
pub fn open_in(
    data_dir: &std::path::Path,
    cfg: RateConfig,
    clock: SharedClock,
) -> Result<Arc<QuotaManager>, QuotaStoreError> {
    QuotaManager::open(Box::new(store::FileQuotaStore::new(data_dir)), cfg, clock).map(Arc::new)
}

#[cfg(test)]
mod tests;

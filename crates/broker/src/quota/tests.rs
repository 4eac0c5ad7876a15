//! The quota manager under a ManualClock: precedence, throttle times, expiry and bounds.

use std::sync::Arc;
use std::time::Duration;

use streamforge_protocol::clock::ManualClock;

use super::entity::{ClientQuotaRecord, EntityName, QuotaEntity, QuotaKey};
use super::rate::RateConfig;
use super::*;

fn manager(clock: Arc<ManualClock>) -> (tempfile::TempDir, Arc<QuotaManager>) {
    let dir = tempfile::tempdir().unwrap();
    let m = open_in(dir.path(), RateConfig::default(), clock).unwrap();
    (dir, m)
}

fn set(m: &QuotaManager, entity: QuotaEntity, key: QuotaKey, value: f64) {
    m.alter(&[ClientQuotaRecord {
        entity,
        key,
        value: Some(value),
    }])
    .unwrap();
}

const ALICE: ClientIdentity<'static> = ClientIdentity {
    user: "alice",
    client_id: "app",
};
const BOB: ClientIdentity<'static> = ClientIdentity {
    user: "bob",
    client_id: "app",
};

#[test]
fn a_user_quota_throttles_that_user_only_with_kafkas_throttle_time() {
    let clock = ManualClock::new(0);
    let (_dir, m) = manager(clock.clone());
    let alice = QuotaEntity::user(EntityName::Named("alice".into()));
    set(&m, alice, QuotaKey::ProducerByteRate, 1_000.0);
    // 20,000 bytes at once over the 10 s minimum window: 2,000 B/s, X = (2000-1000)/1000*10 s.
    assert_eq!(
        m.record(QuotaKey::ProducerByteRate, ALICE, 20_000.0),
        10_000
    );
    assert_eq!(m.record(QuotaKey::ProducerByteRate, BOB, 1e9), 0);
    // Other quota types are not configured.
    assert_eq!(m.record(QuotaKey::ConsumerByteRate, ALICE, 1e9), 0);
    clock.advance(Duration::from_secs(11));
    assert_eq!(m.record(QuotaKey::ProducerByteRate, ALICE, 1.0), 0);
    // The quota survives a restart (same data dir).
    let again = open_in(_dir.path(), RateConfig::default(), clock).unwrap();
    assert_eq!(again.configs(), m.configs());
}

#[test]
fn request_percentage_throttle_is_bounded_by_one_window() {
    let clock = ManualClock::new(0);
    let (_dir, m) = manager(clock);
    set(
        &m,
        QuotaEntity::client(EntityName::Default),
        QuotaKey::RequestPercentage,
        10.0,
    );
    // 5 s of handler time at once is far over 10 % of a thread: bounded to 1 s.
    assert_eq!(m.record_request_time(ALICE, Duration::from_secs(5)), 1_000);
    // 10 ms of handler time within the 10 s window is 0.1 %: fine for a fresh client id.
    let other = ClientIdentity {
        user: "alice",
        client_id: "other",
    };
    assert_eq!(m.record_request_time(other, Duration::from_millis(10)), 0);
}

#[test]
fn a_throttled_fetch_is_taken_back_and_a_fetch_is_capped_at_one_window() {
    let clock = ManualClock::new(0);
    let (_dir, m) = manager(clock);
    set(
        &m,
        QuotaEntity::both(EntityName::Default, EntityName::Default),
        QuotaKey::ConsumerByteRate,
        500.0,
    );
    assert_eq!(m.fetch_bytes_max(ALICE), Some(500));
    assert!(m.record(QuotaKey::ConsumerByteRate, ALICE, 10_000.0) > 0);
    m.unrecord(QuotaKey::ConsumerByteRate, ALICE, 10_000.0);
    assert_eq!(m.record(QuotaKey::ConsumerByteRate, ALICE, 100.0), 0);
}

#[test]
fn sensors_expire_after_an_hour_and_are_bounded() {
    let clock = ManualClock::new(0);
    let (_dir, m) = manager(clock.clone());
    // Each client id under the default has a sensor of its own.
    set(
        &m,
        QuotaEntity::client(EntityName::Default),
        QuotaKey::ProducerByteRate,
        1e9,
    );
    for i in 0..100 {
        let id = format!("client-{i}");
        let who = ClientIdentity {
            user: "u",
            client_id: &id,
        };
        m.record(QuotaKey::ProducerByteRate, who, 1.0);
    }
    assert_eq!(m.sensor_count(), 100);
    clock.advance(Duration::from_millis(SENSOR_INACTIVE_MS as u64));
    m.record(QuotaKey::ProducerByteRate, ALICE, 1.0);
    assert_eq!(m.sensor_count(), 1);
    for i in 0..SENSORS_MAX + 10 {
        let id = format!("c{i}");
        let who = ClientIdentity {
            user: "u",
            client_id: &id,
        };
        m.record(QuotaKey::ProducerByteRate, who, 1.0);
    }
    assert_eq!(m.sensor_count(), SENSORS_MAX);
}

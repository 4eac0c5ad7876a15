//! Quota entities (user, client-id, or both; each named or `<default>`), the quota keys, and
//! Kafka's precedence: which configured entity's value applies to a (user, client-id) pair,
//! and which sensor (metric tags) it is counted under (`DefaultQuotaCallback`).

use std::collections::BTreeMap;

/// The entity types of client quotas (`ClientQuotaEntity.USER` / `CLIENT_ID` / `IP`).
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";
/// How Kafka's tools print a default entity (the wire carries a null name).
pub const DEFAULT_DISPLAY: &str = "<default>";
/// Longest entity name accepted (user names and client ids).
pub const ENTITY_NAME_BYTES_MAX: usize = 1024;

/// One part of an entity: a name, or the default (`--entity-default`, a null name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

impl std::fmt::Display for EntityName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.to_wire().unwrap_or(DEFAULT_DISPLAY))
    }
}

/// A quota entity: `/users/u`, `/clients/c`, `/users/u/clients/c` (either part may be the
/// default). At least one part is present.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    pub fn user(name: EntityName) -> QuotaEntity {
        QuotaEntity {
            user: Some(name),
            client_id: None,
        }
    }

    pub fn client(name: EntityName) -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(name),
        }
    }

    pub fn both(user: EntityName, client_id: EntityName) -> QuotaEntity {
        QuotaEntity {
            user: Some(user),
            client_id: Some(client_id),
        }
    }

    /// `(entity type, name)` pairs, user first (the order Kafka's tools print).
    pub fn parts(&self) -> Vec<(&'static str, &EntityName)> {
        let mut v = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            v.push((USER, u));
        }
        if let Some(c) = &self.client_id {
            v.push((CLIENT_ID, c));
        }
        v
    }
}

impl std::fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .parts()
            .iter()
            .map(|(t, n)| format!("{t}={n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// The quota keys this broker enforces for user / client-id entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// Bytes per second of Produce requests.
    ProducerByteRate,
    /// Bytes per second of Fetch responses.
    ConsumerByteRate,
    /// Percent of one request-handling thread's time (per quota window).
    RequestPercentage,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 3] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
        }
    }

    pub fn parse(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Kafka's `validateQuotaKeyValue`: positive; the byte rates are LONGs (no fractions).
    pub fn check_value(self, value: f64) -> Result<(), String> {
        let key = self.name();
        if value.is_nan() || value <= 0.0 {
            return Err(format!("Quota {key} must be greater than 0"));
        }
        match self {
            QuotaKey::RequestPercentage => Ok(()),
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => {
                if value > i64::MAX as f64 {
                    return Err(format!("Proposed value for {key} is too large for a LONG."));
                }
                if (value % 1.0).abs() > 1e-6 {
                    return Err(format!("{key} cannot be a fractional value."));
                }
                Ok(())
            }
        }
    }
}

/// The values set on one entity, by key.
pub type QuotaValues = BTreeMap<QuotaKey, f64>;
/// Every configured entity.
pub type QuotaConfigs = BTreeMap<QuotaEntity, QuotaValues>;

/// One change, shaped like KRaft's `ClientQuotaRecord`: set `key` of `entity` to `value`, or
/// remove it (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientQuotaRecord {
    pub entity: QuotaEntity,
    pub key: QuotaKey,
    pub value: Option<f64>,
}

/// Apply records to configs (an entity without values is gone).
pub fn replay(configs: &mut QuotaConfigs, records: &[ClientQuotaRecord]) {
    for r in records {
        match r.value {
            Some(v) => {
                configs
                    .entry(r.entity.clone())
                    .or_default()
                    .insert(r.key, v);
            }
            None => {
                if let Some(values) = configs.get_mut(&r.entity) {
                    values.remove(&r.key);
                    if values.is_empty() {
                        configs.remove(&r.entity);
                    }
                }
            }
        }
    }
}

/// Which quota applies to a client, and the sensor it is counted under: Kafka's metric tags
/// `(user, client-id)`, where a part not in the matched entity is empty (all clients of
/// `/users/alice` share one sensor; each client under `/users/<default>/clients/<default>`
/// has its own).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub user_tag: String,
    pub client_tag: String,
    pub bound: f64,
}

/// Kafka's precedence, most specific first:
/// `/users/u/clients/c`, `/users/u/clients/<default>`, `/users/u`,
/// `/users/<default>/clients/c`, `/users/<default>/clients/<default>`, `/users/<default>`,
/// `/clients/c`, `/clients/<default>`. `None`: no quota of this key applies.
pub fn resolve(
    configs: &QuotaConfigs,
    key: QuotaKey,
    user: &str,
    client: &str,
) -> Option<Resolved> {
    use EntityName::{Default, Named};
    if configs.is_empty() {
        return None;
    }
    let (u, c) = (Named(user.to_string()), Named(client.to_string()));
    let (both, user_only, client_only) = (
        (user.to_string(), client.to_string()),
        (user.to_string(), String::new()),
        (String::new(), client.to_string()),
    );
    let chain = [
        (QuotaEntity::both(u.clone(), c.clone()), &both),
        (QuotaEntity::both(u.clone(), Default), &both),
        (QuotaEntity::user(u), &user_only),
        (QuotaEntity::both(Default, c.clone()), &both),
        (QuotaEntity::both(Default, Default), &both),
        (QuotaEntity::user(Default), &user_only),
        (QuotaEntity::client(c), &client_only),
        (QuotaEntity::client(Default), &client_only),
    ];
    chain.into_iter().find_map(|(entity, tags)| {
        let bound = *configs.get(&entity)?.get(&key)?;
        Some(Resolved {
            user_tag: tags.0.clone(),
            client_tag: tags.1.clone(),
            bound,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use EntityName::{Default, Named};

    fn n(s: &str) -> EntityName {
        Named(s.into())
    }

    fn set(configs: &mut QuotaConfigs, e: QuotaEntity, v: f64) {
        replay(
            configs,
            &[ClientQuotaRecord {
                entity: e,
                key: QuotaKey::ProducerByteRate,
                value: Some(v),
            }],
        );
    }

    #[test]
    fn precedence_is_kafkas_most_specific_first() {
        let mut c = QuotaConfigs::new();
        let k = QuotaKey::ProducerByteRate;
        assert_eq!(resolve(&c, k, "alice", "app"), None);
        let steps = [
            (QuotaEntity::client(Default), 8.0, ("", "app")),
            (QuotaEntity::client(n("app")), 7.0, ("", "app")),
            (QuotaEntity::user(Default), 6.0, ("alice", "")),
            (QuotaEntity::both(Default, Default), 5.0, ("alice", "app")),
            (QuotaEntity::both(Default, n("app")), 4.0, ("alice", "app")),
            (QuotaEntity::user(n("alice")), 3.0, ("alice", "")),
            (
                QuotaEntity::both(n("alice"), Default),
                2.0,
                ("alice", "app"),
            ),
            (
                QuotaEntity::both(n("alice"), n("app")),
                1.0,
                ("alice", "app"),
            ),
        ];
        // Each more specific entity, once set, wins over every one set before it.
        for (entity, bound, (ut, ct)) in steps {
            set(&mut c, entity, bound);
            let r = resolve(&c, k, "alice", "app").unwrap();
            assert_eq!(
                (r.bound, r.user_tag.as_str(), r.client_tag.as_str()),
                (bound, ut, ct)
            );
        }
        // Another user and client fall back to the defaults.
        assert_eq!(resolve(&c, k, "bob", "other").unwrap().bound, 5.0);
        // Another key is not configured anywhere.
        assert_eq!(
            resolve(&c, QuotaKey::ConsumerByteRate, "alice", "app"),
            None
        );
    }

    #[test]
    fn removing_the_last_value_removes_the_entity_and_values_are_checked() {
        let mut c = QuotaConfigs::new();
        let e = QuotaEntity::user(n("alice"));
        set(&mut c, e.clone(), 10.0);
        replay(
            &mut c,
            &[ClientQuotaRecord {
                entity: e,
                key: QuotaKey::ProducerByteRate,
                value: None,
            }],
        );
        assert!(c.is_empty());
        assert!(QuotaKey::ProducerByteRate.check_value(1.5).is_err());
        assert!(QuotaKey::ProducerByteRate.check_value(0.0).is_err());
        assert!(QuotaKey::RequestPercentage.check_value(12.5).is_ok());
        assert_eq!(
            QuotaKey::parse("producer_byte_rate"),
            Some(QuotaKey::ProducerByteRate)
        );
        assert_eq!(QuotaKey::parse("controller_mutation_rate"), None);
        assert_eq!(
            QuotaEntity::both(n("u"), Default).to_string(),
            "user=u,client-id=<default>"
        );
    }
}

//! Dynamic broker configs, as Kafka's `DynamicBrokerConfig`: a few broker settings can be changed
//! with AlterConfigs / IncrementalAlterConfigs on the BROKER resource, either cluster-wide (the
//! resource name `""`) or for this broker (its node id). Precedence, highest first: per-broker
//! (`DYNAMIC_BROKER_CONFIG`), cluster-wide (`DYNAMIC_DEFAULT_BROKER_CONFIG`), the start-up value
//! (`STATIC_BROKER_CONFIG`), the built-in default (`DEFAULT_CONFIG`).
//!
//! Which configs are dynamic follows Kafka: the broker synonyms of the topic configs
//! (`DynamicLogConfig`, of which we list those our logs act on), `max.connections`
//! (`DynamicListenerConfig`) and the replication throttle rates (`DynamicConfig.Broker`,
//! applied by `quota::replication`). Every other name is refused as Kafka refuses its read-only
//! configs (INVALID_REQUEST, "Cannot update these configs dynamically: Set(name)").
//!
//! The values live in `<data-dir>/dynamic-broker-configs.json`, rewritten whole on every change
//! (temp file, fsync, rename, fsync of the directory), so a crash leaves the old or the new file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use streamforge_log::LogConfig;

use crate::topic_config::{self, ConfigDef, ConfigType};

/// The file the dynamic values are kept in, in the data directory.
pub const FILE_NAME: &str = "dynamic-broker-configs.json";

/// DescribeConfigs config sources (Kafka's `ConfigSource` ids).
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;

/// One dynamic broker config.
#[derive(Debug, Clone, Copy)]
pub struct DynamicDef {
    /// The broker config name (`log.retention.ms`).
    pub name: &'static str,
    /// The topic config this is the broker-wide default of (`retention.ms`), if any.
    pub topic: Option<&'static str>,
}

const fn log(name: &'static str, topic: &'static str) -> DynamicDef {
    DynamicDef {
        name,
        topic: Some(topic),
    }
}

/// `max.connections`: the running connection limit.
pub const MAX_CONNECTIONS: &str = "max.connections";

/// Every dynamic broker config, alphabetical.
pub static DYNAMIC_CONFIGS: &[DynamicDef] = &[
    DynamicDef {
        name: crate::quota::replication::FOLLOWER_RATE,
        topic: None,
    },
    DynamicDef {
        name: crate::quota::replication::LEADER_RATE,
        topic: None,
    },
    log("log.cleanup.policy", "cleanup.policy"),
    log("log.flush.interval.messages", "flush.messages"),
    log("log.flush.interval.ms", "flush.ms"),
    log("log.index.interval.bytes", "index.interval.bytes"),
    log("log.index.size.max.bytes", "segment.index.bytes"),
    log("log.message.timestamp.type", "message.timestamp.type"),
    log("log.retention.bytes", "retention.bytes"),
    log("log.retention.ms", "retention.ms"),
    log("log.roll.ms", "segment.ms"),
    log("log.segment.bytes", "segment.bytes"),
    DynamicDef {
        name: MAX_CONNECTIONS,
        topic: None,
    },
    log("message.max.bytes", "max.message.bytes"),
];

/// Type and bounds of `max.connections` (Kafka: INT, at least 0).
const MAX_CONNECTIONS_DEF: ConfigDef = ConfigDef {
    name: MAX_CONNECTIONS,
    kind: ConfigType::Int,
    min: Some(0),
    allowed: &[],
    check: None,
    doc: "Most open client connections; further ones are closed right after accept.",
};

/// Type and bounds of the replication throttle rates (Kafka: LONG, at least 0, bytes/s).
const FOLLOWER_RATE_DEF: ConfigDef = ConfigDef {
    name: crate::quota::replication::FOLLOWER_RATE,
    kind: ConfigType::Long,
    min: Some(0),
    allowed: &[],
    check: None,
    doc: "Bytes per second of the follower replicas named in topics' follower.replication.throttled.replicas.",
};
const LEADER_RATE_DEF: ConfigDef = ConfigDef {
    name: crate::quota::replication::LEADER_RATE,
    kind: ConfigType::Long,
    min: Some(0),
    allowed: &[],
    check: None,
    doc: "Bytes per second served to the followers of replicas named in topics' leader.replication.throttled.replicas.",
};

pub fn find(name: &str) -> Option<&'static DynamicDef> {
    DYNAMIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The dynamic broker config whose value is the default of topic config `topic`.
pub fn for_topic(topic: &str) -> Option<&'static DynamicDef> {
    DYNAMIC_CONFIGS.iter().find(|d| d.topic == Some(topic))
}

/// Type, bounds and documentation of a dynamic config.
pub fn value_def(d: &DynamicDef) -> &'static ConfigDef {
    match d.topic {
        Some(t) => topic_config::find(t).expect("every dynamic log config names a topic config"),
        None if d.name == FOLLOWER_RATE_DEF.name => &FOLLOWER_RATE_DEF,
        None if d.name == LEADER_RATE_DEF.name => &LEADER_RATE_DEF,
        None => &MAX_CONNECTIONS_DEF,
    }
}

/// Which of the two dynamic levels a BROKER resource name means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Resource name `""`: the cluster-wide default.
    ClusterDefault,
    /// Resource name `<node id>`: this broker only.
    Broker,
}

/// The dynamic values, as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Layers {
    #[serde(default)]
    pub cluster_default: BTreeMap<String, String>,
    #[serde(default)]
    pub broker: BTreeMap<String, String>,
}

impl Layers {
    pub fn get(&self, level: Level) -> &BTreeMap<String, String> {
        match level {
            Level::ClusterDefault => &self.cluster_default,
            Level::Broker => &self.broker,
        }
    }

    /// The value in force for `name` and its source, when it is set dynamically.
    pub fn effective(&self, name: &str) -> Option<(&str, i8)> {
        self.broker
            .get(name)
            .map(|v| (v.as_str(), SOURCE_DYNAMIC_BROKER))
            .or_else(|| {
                self.cluster_default
                    .get(name)
                    .map(|v| (v.as_str(), SOURCE_DYNAMIC_DEFAULT_BROKER))
            })
    }

    /// The topic-config defaults with the dynamic log values applied over `static_defaults`.
    pub fn log_defaults(&self, static_defaults: &LogConfig) -> LogConfig {
        let mut topic_values = BTreeMap::new();
        for d in DYNAMIC_CONFIGS {
            if let (Some(topic), Some((v, _))) = (d.topic, self.effective(d.name)) {
                topic_values.insert(topic.to_string(), v.to_string());
            }
        }
        topic_config::log_config(static_defaults, &topic_values)
    }
}

/// Errors changing dynamic configs.
#[derive(Debug, thiserror::Error)]
pub enum DynamicConfigError {
    /// Kafka answers INVALID_REQUEST for these (read-only names and bad values alike).
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write {path}: {source}", path = .path.display())]
    Storage {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Check a set of values meant for one level, as Kafka's `DynamicBrokerConfig.validateConfigs`:
/// first that every name is dynamic, then every value.
pub fn validate(values: &BTreeMap<String, String>) -> Result<(), DynamicConfigError> {
    let not_dynamic: BTreeSet<&str> = values
        .keys()
        .map(String::as_str)
        .filter(|n| find(n).is_none())
        .collect();
    if !not_dynamic.is_empty() {
        let names: Vec<&str> = not_dynamic.into_iter().collect();
        return Err(DynamicConfigError::Invalid(format!(
            "Cannot update these configs dynamically: Set({})",
            names.join(", ")
        )));
    }
    for (name, value) in values {
        let def = find(name).expect("checked above");
        topic_config::check_value(value_def(def), name, value)
            .map_err(DynamicConfigError::Invalid)?;
    }
    Ok(())
}

/// The dynamic configs of this broker: the stored layers and the running limits they set.
pub struct DynamicConfigs {
    dir: PathBuf,
    layers: Mutex<Layers>,
    static_max_connections: usize,
    max_connections: AtomicUsize,
}

impl DynamicConfigs {
    /// Load `<dir>/dynamic-broker-configs.json` (none = nothing set). A damaged file is an error
    /// that names it: starting with other values than the operator set would be worse.
    pub fn open(dir: &Path, static_max_connections: usize) -> std::io::Result<DynamicConfigs> {
        let path = dir.join(FILE_NAME);
        let layers = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Layers>(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Layers::default(),
            Err(e) => return Err(e),
        };
        Ok(DynamicConfigs {
            dir: dir.to_path_buf(),
            max_connections: AtomicUsize::new(connection_limit(&layers, static_max_connections)),
            layers: Mutex::new(layers),
            static_max_connections,
        })
    }

    /// A copy of the stored values.
    pub fn layers(&self) -> Layers {
        self.layers.lock().clone()
    }

    /// The connection limit in force.
    pub fn max_connections(&self) -> usize {
        self.max_connections.load(Ordering::Relaxed)
    }

    /// Replace all values of one level (validated; nothing changes when `validate_only`).
    /// Returns the new layers. Blocking: writes and fsyncs the file.
    pub fn replace(
        &self,
        level: Level,
        values: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Layers, DynamicConfigError> {
        validate(&values)?;
        let mut current = self.layers.lock();
        let mut next = current.clone();
        match level {
            Level::ClusterDefault => next.cluster_default = values,
            Level::Broker => next.broker = values,
        }
        if validate_only {
            return Ok(next);
        }
        let bytes = serde_json::to_vec_pretty(&next).expect("string maps serialize");
        crate::topic_store::write_atomically(&self.dir, FILE_NAME, &bytes).map_err(|source| {
            DynamicConfigError::Storage {
                path: self.dir.join(FILE_NAME),
                source,
            }
        })?;
        // Under the lock, so two changes cannot install their limits in the other order.
        self.max_connections.store(
            connection_limit(&next, self.static_max_connections),
            Ordering::Relaxed,
        );
        *current = next.clone();
        drop(current);
        tracing::info!(level = ?level, "altered dynamic broker configs");
        Ok(next)
    }
}

/// The connection limit `layers` set, or the start-up one.
fn connection_limit(layers: &Layers, static_max_connections: usize) -> usize {
    layers
        .effective(MAX_CONNECTIONS)
        .and_then(|(v, _)| v.trim().parse::<usize>().ok())
        .unwrap_or(static_max_connections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn read_only_names_are_refused_before_values_are_checked() {
        let e = validate(&map(&[("num.partitions", "3"), ("log.retention.ms", "x")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Cannot update these configs dynamically: Set(num.partitions)"
        );
        let e = validate(&map(&[("log.retention.ms", "x")])).unwrap_err();
        assert!(e.to_string().contains("log.retention.ms"), "{e}");
        assert!(validate(&map(&[("log.cleanup.policy", "compact,delete")])).is_ok());
        assert!(validate(&map(&[("max.connections", "-1")])).is_err());
    }

    #[test]
    fn the_broker_level_wins_and_values_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let c = DynamicConfigs::open(dir.path(), 100).unwrap();
        c.replace(
            Level::ClusterDefault,
            map(&[("log.retention.ms", "1000"), ("max.connections", "7")]),
            false,
        )
        .unwrap();
        c.replace(Level::Broker, map(&[("log.retention.ms", "2000")]), false)
            .unwrap();
        c.replace(Level::Broker, map(&[("log.segment.bytes", "1")]), true)
            .unwrap_err();
        let again = DynamicConfigs::open(dir.path(), 100).unwrap();
        let layers = again.layers();
        assert_eq!(
            layers.effective("log.retention.ms"),
            Some(("2000", SOURCE_DYNAMIC_BROKER))
        );
        assert_eq!(again.max_connections(), 7);
        assert_eq!(
            layers.log_defaults(&LogConfig::default()).retention_ms,
            2000
        );
    }
}

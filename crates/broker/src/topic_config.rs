//! Topic-level configs: the definitions Kafka has (name, type, default, validation, docs), and
//! how an override map turns into the `LogConfig` a partition log runs with.

use std::collections::BTreeMap;

use streamforge_log::{LogConfig, TimestampType};

/// DescribeConfigs `config_type` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigType {
    Boolean = 1,
    Str = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// A config's own validator: `(name, value)` to the INVALID_CONFIG message.
pub type ValueCheck = fn(&str, &str) -> Result<(), String>;

/// One topic config definition.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    /// Lowest accepted value for numeric configs.
    pub min: Option<i64>,
    /// Accepted values for enumerated configs (each list element for `List`).
    pub allowed: &'static [&'static str],
    /// A validator of its own (`name`, `value`), instead of the type's checks.
    pub check: Option<ValueCheck>,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    kind: ConfigType,
    min: Option<i64>,
    allowed: &'static [&'static str],
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        min,
        allowed,
        check: None,
        doc,
    }
}

/// A replication throttled-replicas list (Kafka: LIST with `ThrottledReplicaListValidator`).
const fn throttled_replicas(name: &'static str, doc: &'static str) -> ConfigDef {
    ConfigDef {
        name,
        kind: List,
        min: None,
        allowed: &[],
        check: Some(crate::quota::replication::validate_throttled_replicas),
        doc,
    }
}

use ConfigType::*;

/// Every topic config we accept, in Kafka's alphabetical order.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    def(
        "cleanup.policy",
        List,
        None,
        &["delete", "compact"],
        "Retention policy: delete and/or compact.",
    ),
    def(
        "compression.type",
        Str,
        None,
        &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"],
        "Final compression; batches are stored as the producer sent them.",
    ),
    def(
        "delete.retention.ms",
        Long,
        Some(0),
        &[],
        "How long delete tombstones are retained on compacted topics.",
    ),
    def(
        "file.delete.delay.ms",
        Long,
        Some(0),
        &[],
        "Time to wait before deleting a file from the filesystem.",
    ),
    def(
        "flush.messages",
        Long,
        Some(1),
        &[],
        "Force an fsync after this many messages.",
    ),
    def(
        "flush.ms",
        Long,
        Some(0),
        &[],
        "Force an fsync after this much time.",
    ),
    throttled_replicas(
        "follower.replication.throttled.replicas",
        "Replicas (partition:broker, or *) whose follower fetches are bounded by the broker's follower.replication.throttled.rate.",
    ),
    def(
        "index.interval.bytes",
        Int,
        Some(0),
        &[],
        "Bytes between offset index entries.",
    ),
    throttled_replicas(
        "leader.replication.throttled.replicas",
        "Replicas (partition:broker, or *) whose leader serves followers outside the ISR within the broker's leader.replication.throttled.rate.",
    ),
    def(
        "local.retention.bytes",
        Long,
        Some(-2),
        &[],
        "Local retention size when tiered storage is on (-2 = retention.bytes).",
    ),
    def(
        "local.retention.ms",
        Long,
        Some(-2),
        &[],
        "Local retention time when tiered storage is on (-2 = retention.ms).",
    ),
    def(
        "max.compaction.lag.ms",
        Long,
        Some(1),
        &[],
        "Maximum time a message remains uncompacted.",
    ),
    def(
        "max.message.bytes",
        Int,
        Some(0),
        &[],
        "Largest record batch size allowed.",
    ),
    def(
        "message.timestamp.after.max.ms",
        Long,
        Some(0),
        &[],
        "Allowed timestamp lead over the broker clock.",
    ),
    def(
        "message.timestamp.before.max.ms",
        Long,
        Some(0),
        &[],
        "Allowed timestamp lag behind the broker clock.",
    ),
    def(
        "message.timestamp.type",
        Str,
        None,
        &["CreateTime", "LogAppendTime"],
        "Whether timestamps are the producer's or the broker's.",
    ),
    def(
        "min.cleanable.dirty.ratio",
        Double,
        None,
        &[],
        "Dirty ratio that triggers compaction.",
    ),
    def(
        "min.compaction.lag.ms",
        Long,
        Some(0),
        &[],
        "Minimum time a message remains uncompacted.",
    ),
    def(
        "min.insync.replicas",
        Int,
        Some(1),
        &[],
        "Replicas that must acknowledge an acks=all write.",
    ),
    def(
        "preallocate",
        Boolean,
        None,
        &[],
        "Preallocate segment files.",
    ),
    def(
        "remote.storage.enable",
        Boolean,
        None,
        &[],
        "Move sealed segments to tiered storage.",
    ),
    def(
        "retention.bytes",
        Long,
        Some(-1),
        &[],
        "Maximum partition size before old segments are deleted.",
    ),
    def(
        "retention.ms",
        Long,
        Some(-1),
        &[],
        "Maximum age of a segment before it is deleted.",
    ),
    def("segment.bytes", Int, Some(14), &[], "Segment file size."),
    def(
        "segment.index.bytes",
        Int,
        Some(4),
        &[],
        "Size of the preallocated offset index.",
    ),
    def(
        "segment.jitter.ms",
        Long,
        Some(0),
        &[],
        "Random jitter subtracted from segment.ms.",
    ),
    def(
        "segment.ms",
        Long,
        Some(1),
        &[],
        "Time after which a segment is rolled.",
    ),
    def(
        "unclean.leader.election.enable",
        Boolean,
        None,
        &[],
        "Allow out-of-sync replicas to become leader.",
    ),
];

pub fn find(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The broker-level default of a topic config, as a string.
pub fn default_value(name: &str, d: &LogConfig) -> String {
    match name {
        "cleanup.policy" => if d.compact { "compact" } else { "delete" }.into(),
        "compression.type" => "producer".into(),
        "delete.retention.ms" => "86400000".into(),
        "file.delete.delay.ms" => "60000".into(),
        "flush.messages" => d.flush_messages.to_string(),
        "flush.ms" => d.flush_ms.to_string(),
        "index.interval.bytes" => d.index_interval_bytes.to_string(),
        "local.retention.bytes" | "local.retention.ms" => "-2".into(),
        "max.compaction.lag.ms" => i64::MAX.to_string(),
        "max.message.bytes" => d.max_message_bytes.to_string(),
        "message.timestamp.after.max.ms" | "message.timestamp.before.max.ms" => {
            i64::MAX.to_string()
        }
        "message.timestamp.type" => match d.timestamp_type {
            TimestampType::CreateTime => "CreateTime".into(),
            TimestampType::LogAppendTime => "LogAppendTime".into(),
        },
        "min.cleanable.dirty.ratio" => "0.5".into(),
        "min.compaction.lag.ms" => "0".into(),
        "min.insync.replicas" => d.min_insync_replicas.to_string(),
        "preallocate" | "remote.storage.enable" => "false".into(),
        "unclean.leader.election.enable" => d.unclean_leader_election_enable.to_string(),
        "retention.bytes" => d.retention_bytes.to_string(),
        "retention.ms" => d.retention_ms.to_string(),
        "segment.bytes" => d.segment_bytes.to_string(),
        "segment.index.bytes" => d.segment_index_bytes.to_string(),
        "segment.jitter.ms" => "0".into(),
        "segment.ms" => d.segment_ms.to_string(),
        _ => String::new(),
    }
}

/// Check one `name=value` pair; the error text goes into the INVALID_CONFIG message.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    check_value(def, name, value)
}

/// Check a value against `def`'s type and bounds; `name` is the name the error message says
/// (the broker synonym, for a dynamic broker config).
pub fn check_value(def: &ConfigDef, name: &str, value: &str) -> Result<(), String> {
    if let Some(check) = def.check {
        return check(name, value);
    }
    let bad = || format!("Invalid value {value} for configuration {name}");
    match def.kind {
        Boolean => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(format!(
                    "{}: Expected value to be either true or false",
                    bad()
                ));
            }
        }
        Int | Long => {
            let v: i64 = value.trim().parse().map_err(|_| bad())?;
            if def.kind == Int && i32::try_from(v).is_err() {
                return Err(bad());
            }
            if let Some(min) = def.min
                && v < min
            {
                return Err(format!("{}: Value must be at least {min}", bad()));
            }
        }
        Double => {
            let v: f64 = value.trim().parse().map_err(|_| bad())?;
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{}: Value must be between 0 and 1", bad()));
            }
        }
        Str => {
            if !def.allowed.is_empty() && !def.allowed.contains(&value) {
                return Err(format!(
                    "{}: String must be one of: {}",
                    bad(),
                    def.allowed.join(", ")
                ));
            }
        }
        List => {
            for item in value.split(',').map(str::trim) {
                if !def.allowed.contains(&item) {
                    return Err(format!(
                        "{}: must be one of: {}",
                        bad(),
                        def.allowed.join(", ")
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Validate a whole override map.
pub fn validate_all(overrides: &BTreeMap<String, String>) -> Result<(), String> {
    overrides.iter().try_for_each(|(k, v)| validate(k, v))?;
    let compacted = overrides
        .get("cleanup.policy")
        .is_some_and(|v| v.split(',').any(|p| p.trim() == "compact"));
    if compacted && crate::tiered::remote_enabled(overrides) {
        // As Kafka: tiered storage keeps whole segments by offset; compaction rewrites them.
        return Err(
            "remote.storage.enable=true is not supported with cleanup.policy=compact".into(),
        );
    }
    Ok(())
}

/// The `LogConfig` of a topic: broker defaults with the topic's overrides applied.
/// Overrides must already be validated.
pub fn log_config(defaults: &LogConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let mut c = defaults.clone();
    let num = |v: &str| v.trim().parse::<i64>().unwrap_or(0);
    for (k, v) in overrides {
        match k.as_str() {
            "segment.bytes" => c.segment_bytes = num(v).max(14) as u64,
            "segment.ms" => c.segment_ms = num(v),
            "segment.index.bytes" => c.segment_index_bytes = num(v).max(4) as u64,
            "index.interval.bytes" => c.index_interval_bytes = num(v).max(0) as u64,
            "max.message.bytes" => c.max_message_bytes = num(v).max(0) as u64,
            "retention.ms" => c.retention_ms = num(v),
            "retention.bytes" => c.retention_bytes = num(v),
            "flush.messages" => c.flush_messages = num(v),
            "flush.ms" => c.flush_ms = num(v),
            "message.timestamp.type" => {
                c.timestamp_type = if v == "LogAppendTime" {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                }
            }
            "cleanup.policy" => {
                c.compact = v.split(',').any(|p| p.trim() == "compact");
                c.delete = v.split(',').any(|p| p.trim() == "delete");
            }
            "delete.retention.ms" => c.delete_retention_ms = num(v),
            "min.insync.replicas" => c.min_insync_replicas = num(v).max(1) as usize,
            "unclean.leader.election.enable" => {
                c.unclean_leader_election_enable = v.trim().eq_ignore_ascii_case("true")
            }
            "min.compaction.lag.ms" => c.min_compaction_lag_ms = num(v),
            "max.compaction.lag.ms" => c.max_compaction_lag_ms = num(v),
            "min.cleanable.dirty.ratio" => {
                c.min_cleanable_dirty_ratio = v.trim().parse().unwrap_or(0.5)
            }
            _ => {}
        }
    }
    if c.compact && c.max_compaction_lag_ms > 0 {
        // As Kafka: the active segment rolls by max.compaction.lag.ms too, so a record
        // becomes cleanable within it.
        c.segment_ms = c.segment_ms.min(c.max_compaction_lag_ms);
    }
    if crate::tiered::remote_enabled(overrides) {
        // Tiered topics: the tiering pass owns retention (local copies go only after their
        // upload is confirmed; retention.* then applies to remote + local).
        c.retention_ms = -1;
        c.retention_bytes = -1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiered_storage_is_refused_for_compacted_topics() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(validate_all(&map(&[("remote.storage.enable", "true")])).is_ok());
        assert!(validate_all(&map(&[("cleanup.policy", "compact")])).is_ok());
        let both = [
            ("remote.storage.enable", "true"),
            ("cleanup.policy", "delete,compact"),
        ];
        assert!(validate_all(&map(&both)).is_err());
        let off = [
            ("remote.storage.enable", "false"),
            ("cleanup.policy", "compact"),
        ];
        assert!(validate_all(&map(&off)).is_ok());
    }

    #[test]
    fn validation_matches_kafka_rules() {
        assert!(validate("retention.ms", "-1").is_ok());
        assert!(validate("retention.ms", "-5").is_err());
        assert!(validate("retention.ms", "abc").is_err());
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("no.such.config", "1").is_err());
        assert!(validate("max.message.bytes", "99999999999").is_err());
        assert!(validate("preallocate", "TRUE").is_ok());
        assert!(validate("leader.replication.throttled.replicas", "0:1,1:2").is_ok());
        assert!(validate("follower.replication.throttled.replicas", "*").is_ok());
        assert!(validate("follower.replication.throttled.replicas", "").is_ok());
        assert!(validate("leader.replication.throttled.replicas", "0-1").is_err());
    }

    #[test]
    fn overrides_reach_the_log_config() {
        let mut o = BTreeMap::new();
        o.insert("segment.bytes".to_string(), "1048576".to_string());
        o.insert("cleanup.policy".to_string(), "compact".to_string());
        o.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        let c = log_config(&LogConfig::default(), &o);
        assert_eq!(c.segment_bytes, 1 << 20);
        assert!(c.compact);
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
    }

    #[test]
    fn the_brokers_min_insync_replicas_is_the_default_a_topic_overrides() {
        let defaults = LogConfig {
            min_insync_replicas: 2,
            ..LogConfig::default()
        };
        assert_eq!(default_value("min.insync.replicas", &defaults), "2");
        assert_eq!(
            log_config(&defaults, &BTreeMap::new()).min_insync_replicas,
            2
        );
        let mut o = BTreeMap::new();
        o.insert("min.insync.replicas".to_string(), "3".to_string());
        assert_eq!(log_config(&defaults, &o).min_insync_replicas, 3);
        o.insert("min.insync.replicas".to_string(), "0".to_string());
        assert_eq!(log_config(&defaults, &o).min_insync_replicas, 1);
    }

    #[test]
    fn the_brokers_unclean_leader_election_default_is_the_default_a_topic_overrides() {
        let name = "unclean.leader.election.enable";
        assert_eq!(default_value(name, &LogConfig::default()), "false");
        let defaults = LogConfig {
            unclean_leader_election_enable: true,
            ..LogConfig::default()
        };
        assert_eq!(default_value(name, &defaults), "true");
        let mut o = BTreeMap::new();
        o.insert(name.to_string(), "false".to_string());
        assert!(!log_config(&defaults, &o).unclean_leader_election_enable);
    }
}

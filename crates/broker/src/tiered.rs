//! Tiered storage wiring: which partitions tier (topic config `remote.storage.enable`), the
//! periodic tiering pass, and the remote paths of Fetch, ListOffsets and DeleteRecords.
//!
//! Retention of a tiered topic is done here, not by the log: `topic_config::log_config`
//! turns the log's own `retention.*` off for such topics, and the tiering pass deletes a
//! local segment only after the manifest records its upload (`local.retention.*`), and
//! whole-log data (`retention.*`) remote and local alike.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use streamforge_log::LogConfig;
use streamforge_tiered::{LocalLog, PartitionId, TierPolicy, TieredError};
use tokio::sync::watch;

use crate::BrokerState;
use crate::replica_manager::Partition;
use crate::util::now_ms;

/// The log of a partition as the tiering pass sees it.
struct PartitionLog(Arc<Partition>);

impl LocalLog for PartitionLog {
    fn dir(&self) -> PathBuf {
        self.0.dir.clone()
    }

    fn local_log_start_offset(&self) -> i64 {
        self.0
            .with_log(|log| log.log_start_offset())
            .unwrap_or(i64::MAX)
    }

    fn delete_local_before(&self, offset: i64) -> Result<(), String> {
        let r = self
            .0
            .with_log(|log| log.delete_records_before(offset))
            .map_err(|e| e.to_string())?;
        self.0.notify();
        r.map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Whether a topic's configs turn tiering on.
pub fn remote_enabled(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get("remote.storage.enable")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The tiering policy of a topic (its overrides over the broker defaults).
pub fn policy(configs: &BTreeMap<String, String>, defaults: &LogConfig) -> TierPolicy {
    let num = |k: &str, d: i64| {
        configs
            .get(k)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(d)
    };
    TierPolicy {
        remote_storage_enable: remote_enabled(configs),
        local_retention_ms: num("local.retention.ms", -2),
        local_retention_bytes: num("local.retention.bytes", -2),
        retention_ms: num("retention.ms", defaults.retention_ms),
        retention_bytes: num("retention.bytes", defaults.retention_bytes),
    }
}

/// Register tiered partitions (new topics, changed configs), forget deleted ones (and
/// delete their remote data), then run one tiering pass. Never fails: problems are logged
/// and retried on the next round; produce and local fetch never wait on this.
pub async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let period = crate::ms(state.tiering.storage().config().task_interval_ms.max(10));
    loop {
        sync(&state).await;
        state.tiering.run_once(now_ms()).await;
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep(period) => {}
        }
    }
    state.tiering.shutdown();
}

/// Bounds the start-up registration (an unreachable store must not delay serving; the
/// periodic pass keeps trying, and fetches of unregistered tiered partitions get a
/// retriable error meanwhile).
const STARTUP_SYNC_MS_MAX: u64 = 10_000;

/// Register the tiered partitions before the broker serves, so a Fetch below the local log
/// start right after a restart finds its remote data.
pub async fn startup(state: &BrokerState) {
    if tokio::time::timeout(crate::ms(STARTUP_SYNC_MS_MAX), sync(state))
        .await
        .is_err()
    {
        tracing::warn!(
            "remote storage not reachable at start-up; tiered partitions register in the background"
        );
    }
}

async fn sync(state: &BrokerState) {
    let defaults = state.replicas.log_defaults();
    let mut wanted: HashSet<PartitionId> = HashSet::new();
    let mut to_register = Vec::new();
    for topic in state.replicas.topics() {
        if !remote_enabled(&topic.configs) {
            continue;
        }
        let p = policy(&topic.configs, &defaults);
        for part in &topic.partitions {
            let id = PartitionId::new(&topic.name, topic.id.simple().to_string(), part.index);
            wanted.insert(id.clone());
            if state.tiering.partition(&topic.name, part.index).is_some() {
                continue;
            }
            let log: Arc<dyn LocalLog> = Arc::new(PartitionLog(part.clone()));
            to_register.push((id, log, p));
        }
        state.tiering.update_policy(&topic.name, p);
    }
    let registrations = to_register.into_iter().map(|(id, log, p)| async move {
        match state.tiering.register(id.clone(), log, p).await {
            Ok(_) => tracing::info!(partition = %id, "tiered storage enabled"),
            Err(e) => {
                tracing::warn!(partition = %id, error = %e, "cannot open remote partition; will retry")
            }
        }
    });
    futures::future::join_all(registrations).await;
    for (id, _) in state.tiering.registered() {
        if wanted.contains(&id) {
            continue;
        }
        state.tiering.unregister(&id);
        let topic_gone = state
            .replicas
            .topic(&id.topic)
            .is_none_or(|t| t.id.simple().to_string() != id.topic_id);
        if topic_gone {
            // Kafka deletes a deleted topic's remote segments too.
            if let Err(e) = state.tiering.storage().delete_partition(&id).await {
                tracing::warn!(partition = %id, error = %e, "could not delete remote data of a deleted topic");
            }
        }
    }
}

/// A Fetch below the local log start: read from remote storage. `None` when the partition
/// is not tiered (the caller keeps the local error).
pub async fn fetch(
    state: &BrokerState,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    high_watermark: i64,
    min_one_message: bool,
) -> Option<Result<Bytes, i16>> {
    let Some(part) = state.tiering.partition(topic, partition) else {
        // A tiered topic whose remote state is not loaded yet (store unreachable since
        // start-up): retriable, so the consumer waits instead of resetting its offset.
        let tiered = state
            .replicas
            .topic(topic)
            .is_some_and(|t| remote_enabled(&t.configs));
        return tiered.then_some(Err(56));
    };
    let r = state
        .tiering
        .storage()
        .read(&part, offset, max_bytes, high_watermark, min_one_message)
        .await;
    Some(r.map_err(|e| {
        if !matches!(e, TieredError::OffsetNotRemote { .. }) {
            tracing::warn!(topic, partition, offset, error = %e, "remote fetch failed");
        }
        e.kafka_code()
    }))
}

/// The log start offset clients see (remote start when remote data reaches the local log).
pub fn log_start_offset(state: &BrokerState, topic: &str, partition: i32, local_start: i64) -> i64 {
    state
        .tiering
        .log_start_offset(topic, partition, local_start)
}

/// ListOffsets over remote data: earliest, latest-tiered (-5) and by timestamp.
pub async fn list_offset(
    state: &BrokerState,
    topic: &str,
    partition: i32,
    timestamp: i64,
    local: Result<(i64, i64), i16>,
    local_start: i64,
) -> Result<(i64, i64), i16> {
    let Some(part) = state.tiering.partition(topic, partition) else {
        return local;
    };
    let m = part.manifest();
    match timestamp {
        -2 => local.map(|(ts, _)| (ts, log_start_offset(state, topic, partition, local_start))),
        -5 => Ok((-1, m.next_offset().map(|n| n - 1).unwrap_or(-1))),
        -3 => {
            let remote = m
                .segments
                .iter()
                .filter(|s| s.base_offset < local_start)
                .max_by_key(|s| s.max_timestamp_ms);
            match (remote, local) {
                (Some(r), Ok((ts, _))) if r.max_timestamp_ms > ts => {
                    Ok((r.max_timestamp_ms, r.max_timestamp_offset))
                }
                (_, l) => l,
            }
        }
        ts if ts >= 0 && m.start_offset().is_some_and(|s| s < local_start) => {
            match state
                .tiering
                .storage()
                .offset_for_timestamp(&part, ts)
                .await
            {
                Ok(Some((offset, found_ts))) if offset < local_start => Ok((found_ts, offset)),
                Ok(_) => local,
                Err(e) => {
                    tracing::warn!(topic, partition, timestamp = ts, error = %e, "remote ListOffsets failed");
                    Err(e.kafka_code())
                }
            }
        }
        _ => local,
    }
}

/// DeleteRecords on a tiered partition also moves the remote log start (deleting whole
/// remote segments below it). Returns the low watermark clients see.
pub async fn delete_records(
    state: &BrokerState,
    topic: &str,
    partition: i32,
    target: i64,
    local_start: i64,
) -> Result<i64, i16> {
    let Some(part) = state.tiering.partition(topic, partition) else {
        return Ok(local_start);
    };
    state
        .tiering
        .storage()
        .delete_before(&part, target)
        .await
        .map_err(|e| e.kafka_code())?;
    Ok(log_start_offset(state, topic, partition, local_start).max(target.min(local_start)))
}

/// Remote bytes of a partition, for the dashboard (`None` when it is not tiered).
pub fn remote_size_bytes(state: &BrokerState, topic: &str, partition: i32) -> Option<u64> {
    state
        .tiering
        .partition(topic, partition)
        .map(|p| p.size_bytes())
}

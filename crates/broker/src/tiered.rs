//! Tiered storage wiring: which partitions tier (topic config `remote.storage.enable`) and the
//! periodic tiering pass. The remote paths of Fetch, ListOffsets and DeleteRecords are the
//! partition's own (`crate::partition`).
//!
//! Retention of a tiered topic is done here, not by the log: `topic_config::log_config`
//! turns the log's own `retention.*` off for such topics, and the tiering pass deletes a
//! local segment only after the manifest records its upload (`local.retention.*`), and
//! whole-log data (`retention.*`) remote and local alike.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use streamforge_log::LogConfig;
use streamforge_tiered::{LocalLog, PartitionId, TierPolicy};
use tokio::sync::watch;

use crate::BrokerState;
use crate::util::now_ms;

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
        for part in topic.hosted() {
            let id = PartitionId::new(&topic.name, topic.id.simple().to_string(), part.index);
            wanted.insert(id.clone());
            if state.tiering.partition(&topic.name, part.index).is_some() {
                continue;
            }
            let log: Arc<dyn LocalLog> = part.clone();
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

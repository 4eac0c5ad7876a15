//! Background scrub (`--log-scrub-interval-ms`, off by default): every interval, re-check the
//! CRC and header of every batch of every sealed segment, so damage in data nobody reads (a bad
//! disk sector in an old segment) is found before a consumer or a restart meets it. Sealed
//! segments are immutable: each log's lock is held only to take zero-copy slices of them, and
//! the scan runs after releasing it, on a blocking thread, one segment at a time. Damage is
//! logged at ERROR with the file, byte position and offset, once per damaged batch, and counted
//! in `streamforge_scrub_errors_total`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::BrokerState;
use crate::replica_manager::ReplicaManager;

/// Damaged batches remembered so each is logged and counted once (cleared when full).
const MAX_REMEMBERED_DAMAGE: usize = 10_000;

/// Counter of damaged batches the scrub found.
pub const SCRUB_ERRORS_METRIC: &str = "streamforge_scrub_errors_total";

pub async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let interval_ms = state.config.log_scrub_interval_ms;
    if interval_ms == 0 {
        return;
    }
    metrics::counter!(SCRUB_ERRORS_METRIC).absolute(0);
    let mut reported: HashSet<(PathBuf, u64)> = HashSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(interval_ms)) => {}
        }
        let st = state.clone();
        let pass = tokio::task::spawn_blocking(move || {
            let found = scrub_pass(&st.replicas, &mut reported);
            (reported, found)
        })
        .await;
        match pass {
            Ok((r, _)) => reported = r,
            Err(_) => return, // the pass panicked or the runtime is shutting down
        }
    }
}

/// One pass over every online partition's sealed segments; returns the new damage found.
fn scrub_pass(replicas: &ReplicaManager, reported: &mut HashSet<(PathBuf, u64)>) -> usize {
    let mut found = 0;
    let mut segments = 0usize;
    for partition in replicas.all_partitions() {
        // Under the log's lock only long enough to slice the sealed segments.
        let Ok(sealed) = partition.sealed_segments() else {
            continue; // offline or deleted
        };
        for segment in sealed {
            segments += 1;
            let Some(bad) = streamforge_log::verify_segment(&segment) else {
                continue;
            };
            if reported.len() >= MAX_REMEMBERED_DAMAGE {
                reported.clear();
            }
            if !reported.insert((segment.path.clone(), bad.position)) {
                continue;
            }
            found += 1;
            metrics::counter!(SCRUB_ERRORS_METRIC).increment(1);
            tracing::error!(
                path = %segment.path.display(),
                position = bad.position,
                offset = bad.offset,
                error = %bad.error,
                "scrub found a damaged record batch in a sealed segment"
            );
        }
    }
    tracing::debug!(segments, found, "scrub pass done");
    found
}

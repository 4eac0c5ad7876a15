//! The coordinator's side of markers (`txn_service.rs`): markers of partitions led here with no
//! followers are written in-process under the coordinator's lock (a single broker's path, as
//! before); the rest go to the marker sender (`txn_marker_sender.rs`), which reports finished
//! transactions back for their Complete record. A `__consumer_offsets` partition's marker is
//! written through the group coordinator (`group_txn.rs`), which commits or drops the
//! transaction's offsets; offsets an older data dir held in `__transaction_state` are
//! completed here first (`complete_offsets`).

use streamforge_coordinator::txn::{MarkerRequest, TxnEffects, TxnState};
use streamforge_coordinator::{OFFSETS_TOPIC, TxnOffset};
use streamforge_log::TxnMarker;
use streamforge_protocol::control::ControlType;

use crate::BrokerState;
use crate::txn_service::{Inner, TxnService};
use crate::util::now_ms;

/// Seconds from a transaction's Prepare record to its last marker written (markers sent to
/// other brokers or waited for here; the Complete record follows at once).
pub const MARKERS_METRIC: &str = "streamforge_txn_markers_seconds";

impl TxnService {
    /// Writes one transaction's markers on the partitions led here whose ISR is this broker
    /// alone (the in-process path of a single broker); returns the partitions left for the
    /// marker sender: led elsewhere, with followers to wait for, or failed here. A partition
    /// whose topic no longer exists counts as written (nothing there can become visible).
    pub(crate) fn write_markers(
        &self,
        state: &BrokerState,
        inner: &mut Inner,
        m: &MarkerRequest,
        coordinator_epoch: i32,
    ) -> Vec<(String, i32)> {
        let kind = if m.commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        let marker = TxnMarker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch,
            kind,
        };
        let image = state.replicas.image();
        let mut elsewhere = Vec::new();
        for (topic, index) in &m.partitions {
            let local = state
                .replicas
                .partition(topic, *index)
                .filter(|p| p.role() == crate::partition::PartitionRole::Leader);
            let Some(partition) = local else {
                let gone = image
                    .topic_by_name(topic)
                    .is_none_or(|t| !t.partitions.contains_key(index));
                if gone {
                    tracing::warn!(
                        topic,
                        partition = index,
                        "transaction partition is gone; no marker"
                    );
                } else {
                    elsewhere.push((topic.clone(), *index));
                }
                continue;
            };
            if partition.replica_status().is_some() {
                // Followers to wait for: the sender writes it and waits (off this lock).
                elsewhere.push((topic.clone(), *index));
                continue;
            }
            let written = if topic == OFFSETS_TOPIC {
                // Offsets an older data dir held in `__transaction_state` first, then the
                // marker through the group coordinator (it commits or drops the offsets).
                let tid = Some(m.transactional_id.as_str());
                if !self.complete_offsets(state, inner, tid, marker, *index) {
                    elsewhere.push((topic.clone(), *index));
                    continue;
                }
                state.groups.write_txn_marker(&partition, marker)
            } else {
                partition.write_txn_marker(marker)
            };
            match written {
                // Counted once in the ISR: alone that is at once, else the sender waits.
                Ok(info)
                    if partition
                        .high_watermark()
                        .is_ok_and(|hw| hw > info.last_offset) => {}
                Ok(_) => elsewhere.push((topic.clone(), *index)),
                Err(e) => {
                    tracing::warn!(topic, partition = index, transactional_id = %m.transactional_id, error = %e, "writing a transaction marker failed; retrying");
                    elsewhere.push((topic.clone(), *index));
                }
            }
        }
        elsewhere
    }

    /// The marker sender finished these transactions (every marker written): each still in
    /// the same Prepare state gets its Complete record.
    pub(crate) fn markers_finished(
        &self,
        state: &BrokerState,
        keys: Vec<crate::txn_markers::TxnKey>,
    ) {
        let mut inner = self.inner.lock();
        let mut out = TxnEffects::default();
        let now = now_ms();
        for k in keys {
            let same = inner.coordinator.get(&k.transactional_id).is_some_and(|m| {
                m.producer_id == k.producer_id
                    && m.producer_epoch == k.producer_epoch
                    && m.state
                        == if k.commit {
                            TxnState::PrepareCommit
                        } else {
                            TxnState::PrepareAbort
                        }
            });
            if same && inner.serving(&k.transactional_id).is_ok() {
                // The Prepare record's time: how long its markers took across the brokers.
                let prepared_ms = inner
                    .coordinator
                    .get(&k.transactional_id)
                    .map_or(now, |m| m.last_update_ms);
                let took_s = now.saturating_sub(prepared_ms).max(0) as f64 / 1000.0;
                metrics::histogram!(MARKERS_METRIC).record(took_s);
                tracing::debug!(transactional_id = %k.transactional_id, took_s, "markers written; completing");
                inner
                    .coordinator
                    .markers_written(&k.transactional_id, now, &mut out);
            }
        }
        // A failed Complete append leaves the transaction prepared: the tick sends again.
        if let Err(e) = self.apply(state, &mut inner, out) {
            tracing::warn!(error = %e, "appending Complete records failed; retrying");
        }
        drop(inner);
        self.wake_prepared_waiters();
    }

    /// A marker for `__consumer_offsets` partition `index` led here (from WriteTxnMarkers or
    /// the local sender): see [`Self::complete_offsets`].
    pub(crate) fn complete_offsets_here(
        &self,
        state: &BrokerState,
        tid: Option<&str>,
        marker: TxnMarker,
        index: i32,
    ) -> bool {
        let mut inner = self.inner.lock();
        self.complete_offsets(state, &mut inner, tid, marker, index)
    }

    /// The marker of a `__consumer_offsets` partition, for the offsets an older data dir held
    /// in `__transaction_state` (replayed, never added to): those of the transaction's groups
    /// on that partition become committed offsets (COMMIT, appended as plain commits) or are
    /// dropped (ABORT), and their record's tombstone is appended.
    pub(crate) fn complete_offsets(
        &self,
        state: &BrokerState,
        inner: &mut Inner,
        tid: Option<&str>,
        marker: TxnMarker,
        index: i32,
    ) -> bool {
        let groups = state.groups.offsets_partitions();
        let commit = marker.kind == ControlType::Commit;
        let keys: Vec<(String, i64)> = inner
            .pending_offsets
            .lock()
            .keys()
            .filter(|(g, pid)| {
                *pid == marker.producer_id
                    && streamforge_coordinator::partition_for_group(g, groups) == index
            })
            .cloned()
            .collect();
        for key in keys {
            if commit {
                // Copied out: the group coordinator takes the pending offsets' lock itself.
                let offsets: Vec<TxnOffset> = inner
                    .pending_offsets
                    .lock()
                    .get(&key)
                    .map(|set| set.values().cloned().collect())
                    .unwrap_or_default();
                let committed = state.groups.with_group(&key.0, |c, now, out| {
                    c.commit_txn_offsets(now, &key.0, &offsets, out)
                });
                if !matches!(committed, Ok(((), Ok(())))) {
                    // Kept pending: the marker is retried.
                    return false;
                }
            }
            // Once the offsets are committed (or dropped), the pending record goes.
            if let Some(tid) = tid.filter(|t| inner.serving(t).is_ok()) {
                let state_partition = inner.coordinator.partition_for(tid);
                let tombstone = crate::txn_pending::tombstone(tid, &key.0);
                if let Err(e) =
                    self.append_record(&state.replicas, inner, state_partition, &tombstone)
                {
                    tracing::warn!(error = %e, "removing pending offsets failed; retrying later");
                    return false;
                }
            }
            inner.pending_offsets.lock().remove(&key);
        }
        true
    }
}

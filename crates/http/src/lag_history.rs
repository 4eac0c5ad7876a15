//! Consumer lag over time, kept inside the broker so a reloaded page (or another operator)
//! sees the same history: one point per group every [`LAG_SAMPLE_INTERVAL`], for the last
//! [`LAG_HISTORY_POINTS_MAX`] points (one hour), for at most [`LAG_HISTORY_GROUPS_MAX`] groups
//! and [`LAG_HISTORY_TOPICS_MAX`] topics per group. Memory is bounded by their product
//! (about 500 × 360 × (16 + 20 × 40) bytes ≈ 150 MB in the very worst case; a group with one
//! topic costs about 15 KB).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

use crate::facade::ClusterView;
use crate::lag::partition_lag;

/// How often every group's lag is recorded.
pub const LAG_SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
/// Points kept per group: one hour at [`LAG_SAMPLE_INTERVAL`].
pub const LAG_HISTORY_POINTS_MAX: usize = 360;
/// Groups whose history is kept (the first seen win; a deleted group frees its slot).
pub const LAG_HISTORY_GROUPS_MAX: usize = 500;
/// Topics per group with their own line (the total counts every topic).
pub const LAG_HISTORY_TOPICS_MAX: usize = 20;

#[derive(Debug, Clone, Serialize)]
pub struct LagPoint {
    pub ts_ms: i64,
    pub total_lag: i64,
    /// Lag per topic (at most [`LAG_HISTORY_TOPICS_MAX`], by name).
    pub topics: BTreeMap<String, i64>,
}

#[derive(Default)]
pub struct LagHistory {
    groups: Mutex<HashMap<String, VecDeque<LagPoint>>>,
}

impl LagHistory {
    /// The recorded points of one group, oldest first.
    pub fn points(&self, group: &str) -> Vec<LagPoint> {
        self.groups
            .lock()
            .get(group)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records one sample of every group; groups that no longer exist lose their history.
    pub fn record(&self, ts_ms: i64, groups: &[crate::facade::GroupInfo]) {
        let mut map = self.groups.lock();
        map.retain(|id, _| groups.iter().any(|g| &g.group_id == id));
        for g in groups {
            if !map.contains_key(&g.group_id) && map.len() >= LAG_HISTORY_GROUPS_MAX {
                continue;
            }
            let mut topics: BTreeMap<String, i64> = BTreeMap::new();
            let mut total_lag = 0;
            for o in &g.offsets {
                let Some(lag) = partition_lag(o) else {
                    continue;
                };
                total_lag += lag;
                if topics.len() < LAG_HISTORY_TOPICS_MAX || topics.contains_key(&o.topic) {
                    *topics.entry(o.topic.clone()).or_default() += lag;
                }
            }
            let points = map.entry(g.group_id.clone()).or_default();
            if points.len() >= LAG_HISTORY_POINTS_MAX {
                points.pop_front();
            }
            points.push_back(LagPoint {
                ts_ms,
                total_lag,
                topics,
            });
            debug_assert!(points.len() <= LAG_HISTORY_POINTS_MAX);
        }
    }

    /// Samples every [`LAG_SAMPLE_INTERVAL`] until aborted.
    pub fn spawn(self: &Arc<Self>, view: Arc<dyn ClusterView>) -> tokio::task::JoinHandle<()> {
        let history = Arc::clone(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(LAG_SAMPLE_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                match view.groups().await {
                    Ok(groups) => history.record(crate::now_ms(), &groups),
                    Err(error) => tracing::debug!(%error, "lag history: could not list groups"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facade::{GroupInfo, GroupOffset};

    fn group(id: &str, committed: i64, hw: i64) -> GroupInfo {
        GroupInfo {
            group_id: id.into(),
            state: "Empty".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            generation: 0,
            coordinator: 0,
            members: Vec::new(),
            offsets: vec![GroupOffset {
                topic: "t".into(),
                partition: 0,
                committed_offset: committed,
                metadata: String::new(),
                high_watermark: Some(hw),
            }],
        }
    }

    #[test]
    fn bounded_and_forgets_deleted_groups() {
        let h = LagHistory::default();
        for i in 0..(LAG_HISTORY_POINTS_MAX as i64 + 5) {
            h.record(i, &[group("a", 1, 1 + i), group("b", 0, 0)]);
        }
        let a = h.points("a");
        assert_eq!(a.len(), LAG_HISTORY_POINTS_MAX);
        assert_eq!(a[0].ts_ms, 5);
        assert_eq!(
            a.last().unwrap().total_lag,
            LAG_HISTORY_POINTS_MAX as i64 + 4
        );
        assert_eq!(
            a.last().unwrap().topics["t"],
            LAG_HISTORY_POINTS_MAX as i64 + 4
        );
        h.record(1_000, &[group("a", 0, 0)]);
        assert!(h.points("b").is_empty());
    }
}

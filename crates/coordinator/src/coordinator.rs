//! The coordinator: all groups this broker coordinates, the explicit clock, and the effects
//! each event produces.

use std::collections::HashMap;

use crate::group::{Group, GroupState};
use crate::records::OffsetsRecord;
use crate::types::{Reply, RequestToken};

/// Settings (Kafka's broker config names in the comments; defaults are Kafka's).
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_partitions: i32,
    /// `group.min.session.timeout.ms`.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: i64,
    /// `group.max.size`: members per group (Kafka: unbounded; here a named bound).
    pub group_max_size: usize,
    /// How long a new member may wait in a join phase before it is dropped (Kafka: 5 min).
    pub new_member_join_timeout_ms: i64,
    /// `offsets.retention.minutes` in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// Seed for member-id generation (the broker passes randomness; tests pass a constant).
    pub member_id_seed: u64,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            offsets_topic_partitions: crate::DEFAULT_OFFSETS_TOPIC_PARTITIONS,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: 10_000,
            new_member_join_timeout_ms: 5 * 60 * 1000,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            member_id_seed: 0x5eed,
        }
    }
}

/// Records to append to one `__consumer_offsets` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsAppend {
    pub partition: i32,
    pub records: Vec<OffsetsRecord>,
}

/// What an event asks the outside world to do: first append `appends` in order, then send
/// `replies` to the parked requests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Effects {
    pub appends: Vec<OffsetsAppend>,
    pub replies: Vec<(RequestToken, Reply)>,
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        self.appends.is_empty() && self.replies.is_empty()
    }

    pub(crate) fn append(&mut self, partition: i32, record: OffsetsRecord) {
        match self.appends.last_mut() {
            Some(last) if last.partition == partition => last.records.push(record),
            _ => self.appends.push(OffsetsAppend {
                partition,
                records: vec![record],
            }),
        }
    }

    pub(crate) fn reply(&mut self, token: RequestToken, reply: Reply) {
        self.replies.push((token, reply));
    }
}

/// All groups coordinated by this broker.
pub struct GroupCoordinator {
    pub(crate) config: CoordinatorConfig,
    pub(crate) groups: HashMap<String, Group>,
    /// Which partitions have transactional offsets waiting for their transaction's marker
    /// (held by the transaction service); their committed offsets do not expire meanwhile.
    pub(crate) pending_txn_offsets: Option<std::sync::Arc<dyn crate::PendingTxnOffsets>>,
    /// TxnOffsetCommit offsets whose transactional batch is in a partition loaded here and
    /// whose producer's marker is not (`txn_offsets.rs`).
    pub(crate) txn_pending: crate::txn_offsets::PendingTxn,
    /// No timer of any group fires before this (a lower bound; `i64::MAX` when none).
    earliest_deadline_ms: i64,
    next_retention_check_ms: i64,
    member_id_state: u64,
}

impl GroupCoordinator {
    pub fn new(config: CoordinatorConfig, now_ms: i64) -> GroupCoordinator {
        let member_id_state = config.member_id_seed;
        let next_retention_check_ms =
            now_ms.saturating_add(config.offsets_retention_check_interval_ms);
        GroupCoordinator {
            config,
            groups: HashMap::new(),
            pending_txn_offsets: None,
            txn_pending: Default::default(),
            earliest_deadline_ms: i64::MAX,
            next_retention_check_ms,
            member_id_state,
        }
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// The `__consumer_offsets` partition that stores `group_id`.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        crate::partition_for_group(group_id, self.config.offsets_topic_partitions)
    }

    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    pub fn group_generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation_id)
    }

    /// The longest rebalance timeout among a group's members (how long a SyncGroup may wait).
    pub fn group_rebalance_timeout_ms(&self, group_id: &str) -> Option<i64> {
        self.groups.get(group_id).map(|g| g.rebalance_timeout_ms())
    }

    /// When the broker should call [`tick`](Self::tick) next at the latest.
    pub fn next_deadline_ms(&self) -> i64 {
        self.earliest_deadline_ms.min(self.next_retention_check_ms)
    }

    /// An empty coordinator with this one's settings, to replay one partition into off the
    /// request path before [`absorb`](Self::absorb) takes its groups.
    pub fn empty_like(&self, now_ms: i64) -> GroupCoordinator {
        let mut c = GroupCoordinator::new(self.config.clone(), now_ms);
        c.pending_txn_offsets = self.pending_txn_offsets.clone();
        c
    }

    /// Where pending transactional offsets are looked up (the broker's transaction service):
    /// offsets retention skips their partitions, as Kafka's `removeExpiredOffsets`.
    pub fn set_pending_txn_offsets(
        &mut self,
        pending: std::sync::Arc<dyn crate::PendingTxnOffsets>,
    ) {
        self.pending_txn_offsets = Some(pending);
    }

    /// Takes every group of `loaded` (one partition replayed by itself: Kafka's
    /// `onElection`). None of them is here: a partition's groups are loaded once per
    /// leadership, and requests for them are refused until then.
    pub fn absorb(&mut self, loaded: GroupCoordinator) {
        for (id, group) in loaded.groups {
            let replaced = self.groups.insert(id, group);
            debug_assert!(replaced.is_none(), "a group was loaded twice");
        }
        self.txn_pending.extend(loaded.txn_pending);
        self.reschedule_all();
    }

    /// Drops every group stored in `partition` (Kafka's `onResignation`) and returns their
    /// ids; their timers go with them.
    pub fn unload_partition(&mut self, partition: i32) -> Vec<String> {
        let ids: Vec<String> = self
            .groups
            .keys()
            .filter(|id| self.partition_for(id) == partition)
            .cloned()
            .collect();
        for id in &ids {
            self.groups.remove(id);
        }
        let partitions = self.config.offsets_topic_partitions;
        self.txn_pending
            .retain(|(g, _), _| crate::partition_for_group(g, partitions) != partition);
        self.reschedule_all();
        ids
    }

    /// A Kafka-like member id: `<client id>-<uuid>`.
    pub(crate) fn new_member_id(&mut self, client_id: &str) -> String {
        let high = splitmix64(&mut self.member_id_state);
        let low = splitmix64(&mut self.member_id_state);
        format!(
            "{client_id}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        )
    }

    /// Lowers the earliest-deadline bound for a group whose timers may have changed, and fires
    /// anything already due.
    pub(crate) fn after_event(&mut self, group_id: &str, now_ms: i64, out: &mut Effects) {
        if let Some(group) = self.groups.get(group_id) {
            self.earliest_deadline_ms = self.earliest_deadline_ms.min(next_deadline(group));
        }
        if self.earliest_deadline_ms <= now_ms {
            self.tick(now_ms, out);
        }
    }

    /// Recomputes the earliest-deadline bound over every group (after state was loaded).
    pub(crate) fn reschedule_all(&mut self) {
        self.earliest_deadline_ms = self
            .groups
            .values()
            .map(next_deadline)
            .min()
            .unwrap_or(i64::MAX);
    }

    /// Advances the clock: fires join/sync/session timers and offsets retention.
    pub fn tick(&mut self, now_ms: i64, out: &mut Effects) {
        if now_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms =
                now_ms.saturating_add(self.config.offsets_retention_check_interval_ms);
            self.expire_offsets(now_ms, out);
        }
        if now_ms < self.earliest_deadline_ms {
            return;
        }
        // Timers can schedule timers that are already due (an initial delay of 0, a removal
        // that completes a join); a bounded number of passes settles them.
        const TICK_PASSES_MAX: usize = 8;
        for _ in 0..TICK_PASSES_MAX {
            let due: Vec<String> = self
                .groups
                .values()
                .filter(|g| next_deadline(g) <= now_ms)
                .map(|g| g.group_id.clone())
                .collect();
            if due.is_empty() {
                break;
            }
            for group_id in due {
                self.fire_group_timers(&group_id, now_ms, out);
            }
        }
        self.reschedule_all();
    }
}

/// The earliest timer of a group (`i64::MAX` if none).
pub(crate) fn next_deadline(group: &Group) -> i64 {
    let join = group.join_timer.map_or(i64::MAX, |t| t.deadline_ms());
    let sync = group.sync_deadline_ms.unwrap_or(i64::MAX);
    let pending = group
        .pending_members
        .values()
        .copied()
        .min()
        .unwrap_or(i64::MAX);
    let heartbeat = group
        .members
        .values()
        .map(|m| m.heartbeat_deadline_ms)
        .min()
        .unwrap_or(i64::MAX);
    join.min(sync).min(pending).min(heartbeat)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

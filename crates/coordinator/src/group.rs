//! One classic consumer group: its members, generation, state and committed offsets.

use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use crate::types::{Protocol, RequestToken};

/// Kafka's classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka reports in DescribeGroups / ListGroups.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    /// A JoinGroup parked until the rebalance completes.
    pub awaiting_join: Option<RequestToken>,
    /// A SyncGroup parked until the leader's assignment arrives.
    pub awaiting_sync: Option<RequestToken>,
    /// Joined during the current rebalance and not yet through a generation.
    pub is_new: bool,
    /// When the member is considered dead unless it heartbeats (or is in a rebalance).
    pub heartbeat_deadline_ms: i64,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// Same protocols in the same order with the same metadata.
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }
}

/// A committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from OffsetCommit v2-v4 with an explicit retention time.
    pub expire_timestamp_ms: Option<i64>,
}

/// Timer state of a rebalance's join phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinTimer {
    /// Kafka's InitialDelayedJoin: an Empty group waits `group.initial.rebalance.delay.ms`
    /// (extended while new members keep arriving, up to the rebalance timeout) so that a
    /// group starting up does not rebalance once per member.
    Initial { deadline_ms: i64, remaining_ms: i64 },
    /// Kafka's DelayedJoin: completes when every member has rejoined or at the deadline.
    Normal { deadline_ms: i64 },
}

impl JoinTimer {
    pub fn deadline_ms(self) -> i64 {
        match self {
            JoinTimer::Initial { deadline_ms, .. } | JoinTimer::Normal { deadline_ms } => {
                deadline_ms
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub group_id: String,
    pub state: GroupState,
    /// When the group entered its current state (Kafka's `currentStateTimestamp`).
    pub state_since_ms: i64,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids in join order (the leader is the earliest joined member).
    pub join_order: Vec<String>,
    /// group.instance.id -> member id.
    pub static_members: HashMap<String, String>,
    /// Dynamic members that got MEMBER_ID_REQUIRED and have not joined yet: id -> deadline.
    pub pending_members: BTreeMap<String, i64>,
    /// Members that got their JoinGroup response and have not synced yet.
    pub pending_sync: BTreeSet<String>,
    pub new_member_added: bool,
    pub join_timer: Option<JoinTimer>,
    pub sync_deadline_ms: Option<i64>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

impl Group {
    pub fn new(group_id: &str, now_ms: i64) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            state_since_ms: now_ms,
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: BTreeMap::new(),
            join_order: Vec::new(),
            static_members: HashMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_timer: None,
            sync_deadline_ms: None,
            offsets: BTreeMap::new(),
        }
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition(&mut self, state: GroupState, now_ms: i64) {
        tracing::debug!(group = %self.group_id, from = self.state.as_str(), to = state.as_str(), "group state");
        self.state = state;
        self.state_since_ms = now_ms;
    }

    pub fn can_rebalance(&self) -> bool {
        matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        )
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.join_order.push(member.member_id.clone());
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member (its parked requests must already have been answered).
    pub fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        self.join_order.retain(|id| id != member_id);
        self.pending_sync.remove(member_id);
        if self.is_leader(member_id) {
            self.leader_id = self.join_order.first().cloned();
        }
        Some(member)
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    /// Kafka's `validateMember`: the member exists and, if static, is the registered holder
    /// of its instance id.
    pub fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        match instance_id {
            Some(instance) => match self.static_member_id(instance) {
                None => Err(ResponseError::UnknownMemberId.code()),
                Some(registered) if registered != member_id => {
                    Err(ResponseError::FencedInstanceId.code())
                }
                Some(_) => Ok(()),
            },
            None if !self.members.contains_key(member_id) => {
                Err(ResponseError::UnknownMemberId.code())
            }
            None => Ok(()),
        }
    }

    /// The largest rebalance timeout among members (how long a rebalance may take).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    pub fn awaiting_join_count(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    pub fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.awaiting_join_count() && self.pending_members.is_empty()
    }

    /// Protocols every member supports, in the first member's preference order.
    fn candidate_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return Vec::new();
        };
        let mut candidates: Vec<String> = first.protocols.iter().map(|p| p.name.clone()).collect();
        for member in members {
            candidates.retain(|c| member.protocols.iter().any(|p| &p.name == c));
        }
        candidates
    }

    /// Kafka's `supportsProtocols`: can a member with these protocols join?
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let candidates = self.candidate_protocols();
        protocols.iter().any(|p| candidates.contains(&p.name))
    }

    /// Kafka's `selectProtocol`: each member votes for its most preferred protocol among those
    /// all members support; the most votes wins (ties go to the earlier candidate).
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes = vec![0usize; candidates.len()];
        for member in self.members.values() {
            if let Some(index) = member
                .protocols
                .iter()
                .find_map(|p| candidates.iter().position(|c| c == &p.name))
            {
                votes[index] += 1;
            }
        }
        let mut best: Option<(usize, usize)> = None;
        for (index, &count) in votes.iter().enumerate() {
            if best.is_none_or(|(_, best_count)| count > best_count) {
                best = Some((index, count));
            }
        }
        best.map(|(index, _)| candidates[index].clone())
    }

    /// Topics the members subscribe to, when every member uses the `consumer` protocol and
    /// its subscription parses; `None` when unknown.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for member in self.members.values() {
            topics.extend(parse_subscription_topics(&member.metadata_for(protocol))?);
        }
        Some(topics)
    }

    /// Is `topic` possibly in use by the group's members (conservative when unknown)?
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        if self.members.is_empty() {
            return false;
        }
        match self.subscribed_topics() {
            Some(topics) => topics.contains(topic),
            None => true,
        }
    }
}

/// Reads the topic list of a `ConsumerProtocolSubscription` (all versions start with
/// `version: int16, topics: [string]` in the non-flexible encoding).
pub fn parse_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    /// Bounds the work spent on a hostile subscription.
    const SUBSCRIPTION_TOPICS_MAX: usize = 100_000;
    let mut cursor = metadata;
    let _version = take_i16(&mut cursor)?;
    let count = take_i32(&mut cursor)?;
    if count < 0 || count as usize > SUBSCRIPTION_TOPICS_MAX {
        return None;
    }
    let mut topics = Vec::with_capacity((count as usize).min(1024));
    for _ in 0..count {
        let len = take_i16(&mut cursor)?;
        if len < 0 || cursor.len() < len as usize {
            return None;
        }
        let (name, rest) = cursor.split_at(len as usize);
        topics.push(String::from_utf8(name.to_vec()).ok()?);
        cursor = rest;
    }
    Some(topics)
}

fn take_i16(cursor: &mut &[u8]) -> Option<i16> {
    let (head, rest) = cursor.split_first_chunk::<2>()?;
    *cursor = rest;
    Some(i16::from_be_bytes(*head))
}

fn take_i32(cursor: &mut &[u8]) -> Option<i32> {
    let (head, rest) = cursor.split_first_chunk::<4>()?;
    *cursor = rest;
    Some(i32::from_be_bytes(*head))
}

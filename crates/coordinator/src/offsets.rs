//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and offsets retention.

use std::collections::BTreeSet;

use crate::coordinator::{Effects, GroupCoordinator};
use crate::group::{CommittedOffset, Group, GroupState};
use crate::records;
use crate::types::{
    CommitResults, FetchedOffset, FetchedTopic, OffsetCommitRequest, OffsetDeleteResult,
    OffsetFetchResult,
};
use kafka_protocol::ResponseError;

impl GroupCoordinator {
    /// OffsetCommit. The broker checks topic existence first (UNKNOWN_TOPIC_OR_PARTITION).
    pub fn commit_offsets(
        &mut self,
        now_ms: i64,
        request: OffsetCommitRequest,
        out: &mut Effects,
    ) -> CommitResults {
        let all = |code: i16| -> CommitResults {
            request
                .topics
                .iter()
                .map(|t| {
                    (
                        t.name.clone(),
                        t.partitions.iter().map(|p| (p.partition, code)).collect(),
                    )
                })
                .collect()
        };
        if request.group_id.is_empty() {
            return all(ResponseError::InvalidGroupId.code());
        }
        if !self.groups.contains_key(&request.group_id) {
            if request.generation_id >= 0 {
                // v9+ says what is wrong; older versions keep the historic error.
                return all(if request.api_version >= 9 {
                    ResponseError::GroupIdNotFound.code()
                } else {
                    ResponseError::IllegalGeneration.code()
                });
            }
            // A simple consumer (or an admin) that only stores offsets: a "simple group".
            self.groups.insert(
                request.group_id.clone(),
                Group::new(&request.group_id, now_ms),
            );
        }
        let partition = self.partition_for(&request.group_id);
        let metadata_max_bytes = self.config.offset_metadata_max_bytes;
        let group = self.groups.get_mut(&request.group_id).expect("exists");
        if let Err(code) = validate_commit(group, &request) {
            return all(code);
        }
        if let Some(member) = group.members.get_mut(&request.member_id) {
            member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        }
        let expire_timestamp_ms = (request.retention_time_ms >= 0)
            .then(|| now_ms.saturating_add(request.retention_time_ms));
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in &topic.partitions {
                let metadata = p.metadata.clone().unwrap_or_default();
                if metadata.len() > metadata_max_bytes {
                    partitions.push((p.partition, ResponseError::OffsetMetadataTooLarge.code()));
                    continue;
                }
                let committed = CommittedOffset {
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata,
                    commit_timestamp_ms: now_ms,
                    expire_timestamp_ms,
                };
                out.append(
                    partition,
                    records::offset_commit_record(
                        &group.group_id,
                        &topic.name,
                        p.partition,
                        &committed,
                    ),
                );
                group
                    .offsets
                    .insert((topic.name.clone(), p.partition), committed);
                partitions.push((p.partition, 0));
            }
            results.push((topic.name.clone(), partitions));
        }
        let group_id = request.group_id;
        self.after_event(&group_id, now_ms, out);
        results
    }

    /// OffsetFetch for one group; `topics: None` means every committed offset.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> OffsetFetchResult {
        self.fetch_offsets_stable(group_id, topics, &BTreeSet::new())
    }

    /// OffsetFetch with `require_stable` (v7+, KIP-447): a partition in `pending` (the group's
    /// partitions with transactional offsets not yet committed or aborted) is answered
    /// UNSTABLE_OFFSET_COMMIT with no offset, per partition, as Kafka's `fetchOffsets` and
    /// `fetchAllOffsets` do (the latter only list partitions that have a committed offset).
    pub fn fetch_offsets_stable(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        pending: &BTreeSet<(String, i32)>,
    ) -> OffsetFetchResult {
        let group = self.groups.get(group_id);
        if group.is_some_and(|g| g.is(GroupState::Dead)) {
            return OffsetFetchResult {
                error_code: ResponseError::CoordinatorNotAvailable.code(),
                topics: Vec::new(),
            };
        }
        let lookup = |topic: &str, partition: i32| -> FetchedOffset {
            let key = (topic.to_string(), partition);
            if pending.contains(&key) {
                return FetchedOffset {
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    error_code: ResponseError::UnstableOffsetCommit.code(),
                };
            }
            match group.and_then(|g| g.offsets.get(&key)) {
                Some(c) => FetchedOffset {
                    partition,
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    metadata: c.metadata.clone(),
                    error_code: 0,
                },
                None => FetchedOffset {
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    error_code: 0,
                },
            }
        };
        let topics = match topics {
            Some(requested) => requested
                .iter()
                .map(|(name, partitions)| FetchedTopic {
                    name: name.clone(),
                    partitions: partitions.iter().map(|&p| lookup(name, p)).collect(),
                })
                .collect(),
            None => {
                let mut out: Vec<FetchedTopic> = Vec::new();
                if let Some(group) = group {
                    for (topic, partition) in group.offsets.keys() {
                        if out.last().is_none_or(|t| &t.name != topic) {
                            out.push(FetchedTopic {
                                name: topic.clone(),
                                partitions: Vec::new(),
                            });
                        }
                        let last = out.last_mut().expect("pushed");
                        last.partitions.push(lookup(topic, *partition));
                    }
                }
                out
            }
        };
        OffsetFetchResult {
            error_code: 0,
            topics,
        }
    }

    /// OffsetDelete: removes committed offsets of topics the group does not consume.
    pub fn delete_offsets(
        &mut self,
        now_ms: i64,
        group_id: &str,
        topics: &[(String, Vec<i32>)],
        out: &mut Effects,
    ) -> OffsetDeleteResult {
        let partition = self.partition_for(group_id);
        let Some(group) = self.groups.get_mut(group_id) else {
            return OffsetDeleteResult {
                error_code: ResponseError::GroupIdNotFound.code(),
                topics: Vec::new(),
            };
        };
        match group.state {
            GroupState::Dead => {
                return OffsetDeleteResult {
                    error_code: ResponseError::GroupIdNotFound.code(),
                    topics: Vec::new(),
                };
            }
            GroupState::Empty => {}
            _ if group.protocol_type.as_deref() != Some("consumer") => {
                return OffsetDeleteResult {
                    error_code: ResponseError::NonEmptyGroup.code(),
                    topics: Vec::new(),
                };
            }
            _ => {}
        }
        let mut results = Vec::with_capacity(topics.len());
        for (topic, partitions) in topics {
            let subscribed = group.is_subscribed_to(topic);
            let mut codes_out = Vec::with_capacity(partitions.len());
            for &p in partitions {
                if subscribed {
                    codes_out.push((p, ResponseError::GroupSubscribedToTopic.code()));
                    continue;
                }
                if group.offsets.remove(&(topic.clone(), p)).is_some() {
                    out.append(partition, records::offset_tombstone(group_id, topic, p));
                }
                codes_out.push((p, 0));
            }
            results.push((topic.clone(), codes_out));
        }
        self.after_event(group_id, now_ms, out);
        OffsetDeleteResult {
            error_code: 0,
            topics: results,
        }
    }

    /// Offsets retention (`offsets.retention.minutes`, KIP-211): an Empty group's offsets expire
    /// a retention period after it became empty; a simple group's (and a Stable consumer
    /// group's offsets for topics it no longer subscribes to) a retention period after their
    /// commit. Groups left empty without offsets are deleted. A partition with transactional
    /// offsets pending (their transaction not yet committed or aborted) keeps its offset, as
    /// Kafka's `removeExpiredOffsets` skips them.
    pub(crate) fn expire_offsets(&mut self, now_ms: i64, out: &mut Effects) {
        let retention_ms = self.config.offsets_retention_ms;
        let partitions = self.config.offsets_topic_partitions;
        let pending = self.pending_txn_offsets.clone();
        let mut dead = Vec::new();
        for group in self.groups.values_mut() {
            let partition = crate::partition_for_group(&group.group_id, partitions);
            // What an offset's age counts from, if the group's offsets can expire at all.
            let base = match (&group.protocol_type, group.state) {
                (None, _) => ExpiryBase::CommitTime,
                (Some(_), GroupState::Empty) => ExpiryBase::Since(group.state_since_ms),
                (Some(t), GroupState::Stable) if t == "consumer" => ExpiryBase::CommitTime,
                _ => continue,
            };
            let stable = group.is(GroupState::Stable);
            let mut held = pending
                .as_ref()
                .map(|v| v.pending_partitions(&group.group_id))
                .unwrap_or_default();
            held.extend(
                self.txn_pending
                    .range((group.group_id.clone(), i64::MIN)..=(group.group_id.clone(), i64::MAX))
                    .flat_map(|(_, set)| set.offsets.keys().cloned()),
            );
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(key, c)| {
                    if stable && group.is_subscribed_to(&key.0) {
                        return false;
                    }
                    if held.contains(*key) {
                        return false;
                    }
                    match c.expire_timestamp_ms {
                        Some(expire) => now_ms >= expire,
                        None => now_ms - base.of(c) >= retention_ms,
                    }
                })
                .map(|(key, _)| key.clone())
                .collect();
            for (topic, p) in &expired {
                group.offsets.remove(&(topic.clone(), *p));
                out.append(
                    partition,
                    records::offset_tombstone(&group.group_id, topic, *p),
                );
            }
            if !expired.is_empty() {
                tracing::info!(group = %group.group_id, count = expired.len(), "expired offsets");
            }
            if group.is(GroupState::Empty)
                && group.offsets.is_empty()
                && group.members.is_empty()
                && group.pending_members.is_empty()
            {
                group.transition(GroupState::Dead, now_ms);
                out.append(partition, records::group_tombstone(&group.group_id));
                dead.push(group.group_id.clone());
            }
        }
        for group_id in dead {
            tracing::info!(group = %group_id, "removed empty group without offsets");
            self.groups.remove(&group_id);
        }
    }
}

/// Kafka's `validateOffsetCommit` for classic groups (OffsetCommit).
fn validate_commit(group: &Group, request: &OffsetCommitRequest) -> Result<(), i16> {
    validate_group_commit(
        group,
        request.generation_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
        false,
    )
}

/// Kafka's `ClassicGroup.validateOffsetCommit`, shared by OffsetCommit and (`transactional`)
/// TxnOffsetCommit: a transactional commit without a member id and generation is accepted
/// whatever the group's state (TxnOffsetCommit v0-2 carry neither, and
/// `sendOffsetsToTransaction(offsets, groupId)` sends -1 and ""), and a member's transactional
/// commit during CompletingRebalance is not refused.
pub(crate) fn validate_group_commit(
    group: &Group,
    generation_id: i32,
    member_id: &str,
    group_instance_id: Option<&str>,
    transactional: bool,
) -> Result<(), i16> {
    if group.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable.code());
    }
    if generation_id < 0 && group.is(GroupState::Empty) {
        return Ok(());
    }
    if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
        group.validate_member(member_id, group_instance_id)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration.code());
        }
    } else if !transactional && !group.is(GroupState::Empty) {
        // Only members may commit for a group that has members.
        return Err(ResponseError::UnknownMemberId.code());
    }
    if !transactional && group.is(GroupState::CompletingRebalance) {
        // The member already has the new generation but no assignment yet.
        return Err(ResponseError::RebalanceInProgress.code());
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum ExpiryBase {
    CommitTime,
    Since(i64),
}

impl ExpiryBase {
    fn of(self, committed: &CommittedOffset) -> i64 {
        match self {
            ExpiryBase::CommitTime => committed.commit_timestamp_ms,
            ExpiryBase::Since(ms) => ms,
        }
    }
}

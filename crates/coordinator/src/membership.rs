//! Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers,
//! following Kafka's classic group coordinator semantics.

use std::collections::HashMap;

use bytes::Bytes;

use crate::coordinator::{CoordinatorConfig, Effects, GroupCoordinator};
use crate::group::{Group, GroupState, JoinTimer, Member};
use crate::records;
use crate::types::{
    HeartbeatRequest, JoinGroupMember, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, LeftMember, Reply, RequestToken, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::ResponseError;

/// What the free functions below need besides the group itself.
pub(crate) struct Ctx<'a> {
    pub config: &'a CoordinatorConfig,
    pub partition: i32,
}

impl Ctx<'_> {
    pub fn store_group(&self, group: &Group, now_ms: i64, out: &mut Effects) {
        out.append(
            self.partition,
            records::group_metadata_record(group, now_ms),
        );
    }
}

impl GroupCoordinator {
    /// JoinGroup. The reply (now or once the rebalance completes) arrives in `out.replies`.
    pub fn join_group(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        request: JoinGroupRequest,
        out: &mut Effects,
    ) {
        let reply_error = |out: &mut Effects, code: i16| {
            out.reply(
                token,
                Reply::Join(JoinGroupResponse::error(&request.member_id, code)),
            );
        };
        if request.group_id.is_empty() {
            return reply_error(out, ResponseError::InvalidGroupId.code());
        }
        if request.session_timeout_ms < self.config.group_min_session_timeout_ms
            || request.session_timeout_ms > self.config.group_max_session_timeout_ms
        {
            return reply_error(out, ResponseError::InvalidSessionTimeout.code());
        }
        let is_unknown_member = request.member_id.is_empty();
        let group_id = request.group_id.clone();
        let created = if self.groups.contains_key(&group_id) {
            false
        } else {
            if !is_unknown_member {
                return reply_error(out, ResponseError::UnknownMemberId.code());
            }
            self.groups
                .insert(group_id.clone(), Group::new(&group_id, now_ms));
            true
        };
        let new_member_id = is_unknown_member.then(|| self.new_member_id(&request.client_id));
        let ctx = Ctx {
            config: &self.config,
            partition: crate::partition_for_group(&group_id, self.config.offsets_topic_partitions),
        };
        let group = self.groups.get_mut(&group_id).expect("group exists");
        match new_member_id {
            Some(member_id) => {
                join_unknown_member(&ctx, group, member_id, token, request, now_ms, out)
            }
            None => join_known_member(&ctx, group, token, request, now_ms, out),
        }
        if group.is(GroupState::PreparingRebalance) {
            try_complete_join(&ctx, group, now_ms, out);
        }
        if created
            && group.members.is_empty()
            && group.pending_members.is_empty()
            && group.offsets.is_empty()
            && group.is(GroupState::Empty)
        {
            // A failed first join leaves nothing behind (Kafka removes the new group).
            self.groups.remove(&group_id);
        }
        self.after_event(&group_id, now_ms, out);
    }

    /// SyncGroup. The reply (now, or when the leader's assignment arrives) is in `out.replies`.
    pub fn sync_group(
        &mut self,
        now_ms: i64,
        token: RequestToken,
        request: SyncGroupRequest,
        out: &mut Effects,
    ) {
        let partition = self.partition_for(&request.group_id);
        let ctx = Ctx {
            config: &self.config,
            partition,
        };
        let Some(group) = self.groups.get_mut(&request.group_id) else {
            out.reply(
                token,
                Reply::Sync(SyncGroupResponse::error(
                    ResponseError::UnknownMemberId.code(),
                )),
            );
            return;
        };
        if let Err(code) = validate_sync(group, &request) {
            out.reply(token, Reply::Sync(SyncGroupResponse::error(code)));
            return;
        }
        let member_id = request.member_id.as_str();
        match group.state {
            GroupState::Empty => out.reply(
                token,
                Reply::Sync(SyncGroupResponse::error(
                    ResponseError::UnknownMemberId.code(),
                )),
            ),
            GroupState::PreparingRebalance => out.reply(
                token,
                Reply::Sync(SyncGroupResponse::error(
                    ResponseError::RebalanceInProgress.code(),
                )),
            ),
            GroupState::Dead => out.reply(
                token,
                Reply::Sync(SyncGroupResponse::error(
                    ResponseError::CoordinatorNotAvailable.code(),
                )),
            ),
            GroupState::CompletingRebalance => {
                let member = group.members.get_mut(member_id).expect("validated");
                if let Some(previous) = member.awaiting_sync.replace(token) {
                    out.reply(
                        previous,
                        Reply::Sync(SyncGroupResponse::error(
                            ResponseError::RebalanceInProgress.code(),
                        )),
                    );
                }
                member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
                remove_pending_sync(group, member_id);
                if group.is_leader(member_id) {
                    // Members the leader left out get an empty assignment; unknown ids are ignored.
                    let assignments: HashMap<String, Bytes> =
                        request.assignments.into_iter().collect();
                    set_and_propagate_assignment(group, &assignments, now_ms, out);
                    group.transition(GroupState::Stable, now_ms);
                    tracing::info!(
                        group = %group.group_id,
                        generation = group.generation_id,
                        members = group.members.len(),
                        "group stable"
                    );
                    ctx.store_group(group, now_ms, out);
                }
            }
            GroupState::Stable => {
                remove_pending_sync(group, member_id);
                let member = group.members.get_mut(member_id).expect("validated");
                member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
                let response = SyncGroupResponse {
                    error_code: 0,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    assignment: member.assignment.clone(),
                };
                out.reply(token, Reply::Sync(response));
            }
        }
        let group_id = request.group_id;
        self.after_event(&group_id, now_ms, out);
    }

    /// The group metadata stored when generation `generation_id` became stable did not reach
    /// every in-sync replica of its `__consumer_offsets` partition in time (the broker waits for
    /// that before answering SyncGroup, as Kafka's coordinator answers only once its append is
    /// committed). As Kafka does on a failed store: the generation is not kept, the group
    /// rebalances, and its members rejoin (their SyncGroup got the mapped error). A group that
    /// already moved on (another generation, or rebalancing) is left as it is.
    pub fn group_store_failed(
        &mut self,
        now_ms: i64,
        group_id: &str,
        generation_id: i32,
        out: &mut Effects,
    ) {
        let partition = self.partition_for(group_id);
        let ctx = Ctx {
            config: &self.config,
            partition,
        };
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if !group.is(GroupState::Stable) || group.generation_id != generation_id {
            return;
        }
        tracing::warn!(
            group = %group_id,
            generation = generation_id,
            "group assignment not replicated in time; rebalancing"
        );
        maybe_prepare_rebalance(&ctx, group, now_ms, out);
        self.after_event(group_id, now_ms, out);
    }

    /// Heartbeat: returns the error code to send.
    pub fn heartbeat(&mut self, now_ms: i64, request: HeartbeatRequest, out: &mut Effects) -> i16 {
        let Some(group) = self.groups.get_mut(&request.group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        if group.is(GroupState::Dead) {
            return ResponseError::CoordinatorNotAvailable.code();
        }
        if let Err(code) =
            group.validate_member(&request.member_id, request.group_instance_id.as_deref())
        {
            return code;
        }
        if request.generation_id != group.generation_id {
            return ResponseError::IllegalGeneration.code();
        }
        let code = match group.state {
            GroupState::Empty => return ResponseError::UnknownMemberId.code(),
            GroupState::Dead => return ResponseError::CoordinatorNotAvailable.code(),
            GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
            GroupState::CompletingRebalance | GroupState::Stable => 0,
        };
        let member = group
            .members
            .get_mut(&request.member_id)
            .expect("validated");
        member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        let group_id = request.group_id;
        self.after_event(&group_id, now_ms, out);
        code
    }

    /// LeaveGroup (batched members, v3+; older versions send one member).
    pub fn leave_group(
        &mut self,
        now_ms: i64,
        request: LeaveGroupRequest,
        out: &mut Effects,
    ) -> LeaveGroupResponse {
        let partition = self.partition_for(&request.group_id);
        let ctx = Ctx {
            config: &self.config,
            partition,
        };
        let Some(group) = self.groups.get_mut(&request.group_id) else {
            let members = request
                .members
                .into_iter()
                .map(|m| LeftMember {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    error_code: ResponseError::UnknownMemberId.code(),
                })
                .collect();
            return LeaveGroupResponse {
                error_code: 0,
                members,
            };
        };
        if group.is(GroupState::Dead) {
            return LeaveGroupResponse {
                error_code: ResponseError::CoordinatorNotAvailable.code(),
                members: Vec::new(),
            };
        }
        let mut results = Vec::with_capacity(request.members.len());
        for leaving in request.members {
            let error_code = leave_one(
                &ctx,
                group,
                &leaving.member_id,
                leaving.group_instance_id.as_deref(),
                now_ms,
                out,
            );
            results.push(LeftMember {
                member_id: leaving.member_id,
                group_instance_id: leaving.group_instance_id,
                error_code,
            });
        }
        self.after_event(&request.group_id, now_ms, out);
        LeaveGroupResponse {
            error_code: 0,
            members: results,
        }
    }

    /// Fires the due timers of one group.
    pub(crate) fn fire_group_timers(&mut self, group_id: &str, now_ms: i64, out: &mut Effects) {
        let partition = self.partition_for(group_id);
        let ctx = Ctx {
            config: &self.config,
            partition,
        };
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        fire_join_timer(&ctx, group, now_ms, out);
        fire_sync_timer(&ctx, group, now_ms, out);
        let expired_pending: Vec<String> = group
            .pending_members
            .iter()
            .filter(|&(_, &deadline)| deadline <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for member_id in expired_pending {
            tracing::info!(group = %group_id, member = %member_id, "pending member expired");
            group.pending_members.remove(&member_id);
            if group.is(GroupState::PreparingRebalance) {
                try_complete_join(&ctx, group, now_ms, out);
            }
        }
        let expired: Vec<String> = group
            .members
            .values()
            .filter(|m| m.heartbeat_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            let Some(member) = group.members.get_mut(&member_id) else {
                continue;
            };
            let in_rebalance = member.awaiting_join.is_some() || member.awaiting_sync.is_some();
            if !member.is_new && in_rebalance {
                // Members waiting on a rebalance are alive by definition; the rebalance
                // timeout bounds them instead.
                member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
                continue;
            }
            tracing::info!(group = %group_id, member = %member_id, "member session expired");
            remove_member_and_update_group(&ctx, group, &member_id, now_ms, out);
        }
    }
}

fn join_unknown_member(
    ctx: &Ctx<'_>,
    group: &mut Group,
    member_id: String,
    token: RequestToken,
    request: JoinGroupRequest,
    now_ms: i64,
    out: &mut Effects,
) {
    // Errors for a new member carry an empty member id, as in Kafka.
    let reply_error = |out: &mut Effects, code: i16| {
        out.reply(token, Reply::Join(JoinGroupResponse::error("", code)));
    };
    if group.is(GroupState::Dead) {
        return reply_error(out, ResponseError::CoordinatorNotAvailable.code());
    }
    if !group.supports_protocols(&request.protocol_type, &request.protocols) {
        return reply_error(out, ResponseError::InconsistentGroupProtocol.code());
    }
    if let Some(instance) = request.group_instance_id.as_deref()
        && let Some(old_member_id) = group.static_member_id(instance).map(str::to_string)
    {
        return replace_static_member(
            ctx,
            group,
            &old_member_id,
            member_id,
            token,
            request,
            now_ms,
            out,
        );
    }
    if group.members.len() + group.pending_members.len() >= ctx.config.group_max_size {
        return reply_error(out, ResponseError::GroupMaxSizeReached.code());
    }
    if request.group_instance_id.is_none() && request.require_known_member_id {
        // KIP-394: hand out the id first so a client that times out and retries does not leave
        // an orphan member behind.
        group.pending_members.insert(
            member_id.clone(),
            now_ms + i64::from(request.session_timeout_ms),
        );
        out.reply(
            token,
            Reply::Join(JoinGroupResponse::error(
                &member_id,
                ResponseError::MemberIdRequired.code(),
            )),
        );
        return;
    }
    add_member_and_rebalance(ctx, group, member_id, token, request, now_ms, out);
}

fn join_known_member(
    ctx: &Ctx<'_>,
    group: &mut Group,
    token: RequestToken,
    request: JoinGroupRequest,
    now_ms: i64,
    out: &mut Effects,
) {
    let member_id = request.member_id.clone();
    let reply_error = |out: &mut Effects, code: i16| {
        out.reply(
            token,
            Reply::Join(JoinGroupResponse::error(&member_id, code)),
        );
    };
    if group.is(GroupState::Dead) {
        return reply_error(out, ResponseError::CoordinatorNotAvailable.code());
    }
    if !group.supports_protocols(&request.protocol_type, &request.protocols) {
        return reply_error(out, ResponseError::InconsistentGroupProtocol.code());
    }
    if group.pending_members.contains_key(&member_id) {
        return add_member_and_rebalance(
            ctx,
            group,
            member_id.clone(),
            token,
            request,
            now_ms,
            out,
        );
    }
    if let Err(code) = group.validate_member(&member_id, request.group_instance_id.as_deref()) {
        return reply_error(out, code);
    }
    let member = group.members.get(&member_id).expect("validated");
    let unchanged = member.matches(&request.protocols);
    match group.state {
        GroupState::PreparingRebalance => {
            update_member_and_rebalance(ctx, group, token, &request, now_ms, out);
        }
        GroupState::CompletingRebalance if unchanged => {
            // The member lost the JoinGroup response: send the same one again.
            let response = current_join_response(group, &member_id, false);
            out.reply(token, Reply::Join(response));
        }
        GroupState::CompletingRebalance => {
            update_member_and_rebalance(ctx, group, token, &request, now_ms, out);
        }
        GroupState::Stable if unchanged && !group.is_leader(&member_id) => {
            let response = current_join_response(group, &member_id, false);
            out.reply(token, Reply::Join(response));
        }
        GroupState::Stable => {
            // A leader rejoining forces a rebalance: that is how a consumer reacts to topic
            // metadata changes that do not change its subscription.
            update_member_and_rebalance(ctx, group, token, &request, now_ms, out);
        }
        GroupState::Empty | GroupState::Dead => {
            reply_error(out, ResponseError::UnknownMemberId.code())
        }
    }
}

/// The JoinGroup response of the current generation for `member_id`.
fn current_join_response(
    group: &Group,
    member_id: &str,
    skip_assignment: bool,
) -> JoinGroupResponse {
    let is_leader = group.is_leader(member_id);
    JoinGroupResponse {
        error_code: 0,
        generation_id: group.generation_id,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        leader: group.leader_id.clone().unwrap_or_default(),
        skip_assignment,
        member_id: member_id.to_string(),
        members: if is_leader {
            member_list(group)
        } else {
            Vec::new()
        },
    }
}

fn member_list(group: &Group) -> Vec<JoinGroupMember> {
    let protocol = group.protocol_name.as_deref().unwrap_or("");
    group
        .join_order
        .iter()
        .filter_map(|id| group.members.get(id))
        .map(|m| JoinGroupMember {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            metadata: m.metadata_for(protocol),
        })
        .collect()
}

fn add_member_and_rebalance(
    ctx: &Ctx<'_>,
    group: &mut Group,
    member_id: String,
    token: RequestToken,
    request: JoinGroupRequest,
    now_ms: i64,
    out: &mut Effects,
) {
    group.pending_members.remove(&member_id);
    let member = Member {
        member_id,
        group_instance_id: request.group_instance_id,
        client_id: request.client_id,
        client_host: request.client_host,
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        session_timeout_ms: request.session_timeout_ms,
        protocol_type: request.protocol_type,
        protocols: request.protocols,
        assignment: Bytes::new(),
        awaiting_join: Some(token),
        awaiting_sync: None,
        is_new: true,
        heartbeat_deadline_ms: now_ms + ctx.config.new_member_join_timeout_ms,
    };
    group.add_member(member);
    group.new_member_added = true;
    maybe_prepare_rebalance(ctx, group, now_ms, out);
}

fn update_member_and_rebalance(
    ctx: &Ctx<'_>,
    group: &mut Group,
    token: RequestToken,
    request: &JoinGroupRequest,
    now_ms: i64,
    out: &mut Effects,
) {
    let member = group
        .members
        .get_mut(&request.member_id)
        .expect("validated");
    member.protocols = request.protocols.clone();
    member.rebalance_timeout_ms = request.rebalance_timeout_ms;
    member.session_timeout_ms = request.session_timeout_ms;
    member.heartbeat_deadline_ms = now_ms + i64::from(request.session_timeout_ms);
    if let Some(previous) = member.awaiting_join.replace(token) {
        out.reply(
            previous,
            Reply::Join(JoinGroupResponse::error(
                &request.member_id,
                ResponseError::RebalanceInProgress.code(),
            )),
        );
    }
    maybe_prepare_rebalance(ctx, group, now_ms, out);
}

/// A static member rejoined with a new member id (a restarted process): the new id takes over
/// the old member's place and the old id is fenced.
#[allow(clippy::too_many_arguments)]
fn replace_static_member(
    ctx: &Ctx<'_>,
    group: &mut Group,
    old_member_id: &str,
    new_member_id: String,
    token: RequestToken,
    request: JoinGroupRequest,
    now_ms: i64,
    out: &mut Effects,
) {
    let previous_leader = group.leader_id.clone();
    let mut member = group
        .members
        .remove(old_member_id)
        .expect("static member is registered");
    if let Some(parked) = member.awaiting_join.take() {
        out.reply(
            parked,
            Reply::Join(JoinGroupResponse::error(
                old_member_id,
                ResponseError::FencedInstanceId.code(),
            )),
        );
    }
    if let Some(parked) = member.awaiting_sync.take() {
        out.reply(
            parked,
            Reply::Sync(SyncGroupResponse::error(
                ResponseError::FencedInstanceId.code(),
            )),
        );
    }
    tracing::info!(group = %group.group_id, old = %old_member_id, new = %new_member_id, "static member replaced");
    member.member_id = new_member_id.clone();
    member.client_id = request.client_id;
    member.client_host = request.client_host;
    member.protocols = request.protocols;
    member.rebalance_timeout_ms = request.rebalance_timeout_ms;
    member.session_timeout_ms = request.session_timeout_ms;
    member.heartbeat_deadline_ms = now_ms + i64::from(request.session_timeout_ms);
    member.awaiting_join = Some(token);
    group.members.insert(new_member_id.clone(), member);
    for id in group
        .join_order
        .iter_mut()
        .filter(|id| *id == old_member_id)
    {
        *id = new_member_id.clone();
    }
    if previous_leader.as_deref() == Some(old_member_id) {
        group.leader_id = Some(new_member_id.clone());
    }
    if let Some(instance) = request.group_instance_id {
        group.static_members.insert(instance, new_member_id.clone());
    }
    if group.pending_sync.remove(old_member_id) {
        group.pending_sync.insert(new_member_id.clone());
    }
    match group.state {
        GroupState::Stable => {
            if group.select_protocol() == group.protocol_name {
                // Nothing the assignment depends on changed: keep the generation (KIP-345).
                // A leader is told to skip the assignment (KIP-814).
                let is_leader = group.is_leader(&new_member_id);
                let response = current_join_response(group, &new_member_id, is_leader);
                if let Some(member) = group.members.get_mut(&new_member_id) {
                    member.awaiting_join = None;
                }
                ctx.store_group(group, now_ms, out);
                out.reply(token, Reply::Join(response));
            } else {
                maybe_prepare_rebalance(ctx, group, now_ms, out);
            }
        }
        // The old id may already be in the leader's assignment: rebalance so it matches.
        GroupState::CompletingRebalance => prepare_rebalance(ctx, group, now_ms, out),
        GroupState::PreparingRebalance => {}
        GroupState::Empty | GroupState::Dead => {
            // A group with a registered static member is never Empty or Dead.
            tracing::error!(group = %group.group_id, "static member in an empty group");
        }
    }
}

fn maybe_prepare_rebalance(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    if group.can_rebalance() {
        prepare_rebalance(ctx, group, now_ms, out);
    }
}

fn prepare_rebalance(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    if group.is(GroupState::CompletingRebalance) {
        reset_and_propagate_assignment_error(group, ResponseError::RebalanceInProgress.code(), out);
    }
    group.sync_deadline_ms = None;
    let rebalance_timeout_ms = group.rebalance_timeout_ms();
    if group.is(GroupState::Empty) {
        let initial_delay_ms = ctx.config.group_initial_rebalance_delay_ms;
        let delay_ms = initial_delay_ms.min(rebalance_timeout_ms);
        group.join_timer = Some(JoinTimer::Initial {
            deadline_ms: now_ms + delay_ms,
            remaining_ms: (rebalance_timeout_ms - initial_delay_ms).max(0),
        });
        group.new_member_added = false;
    } else {
        group.join_timer = Some(JoinTimer::Normal {
            deadline_ms: now_ms + rebalance_timeout_ms,
        });
    }
    tracing::info!(group = %group.group_id, generation = group.generation_id, "preparing rebalance");
    group.transition(GroupState::PreparingRebalance, now_ms);
    try_complete_join(ctx, group, now_ms, out);
}

/// Completes a (non-initial) join phase early once every member has rejoined.
fn try_complete_join(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    if matches!(group.join_timer, Some(JoinTimer::Normal { .. })) && group.has_all_members_joined()
    {
        complete_join(ctx, group, now_ms, out);
    }
}

fn fire_join_timer(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    let Some(timer) = group.join_timer else {
        return;
    };
    if timer.deadline_ms() > now_ms {
        return;
    }
    match timer {
        JoinTimer::Initial { remaining_ms, .. } if group.new_member_added && remaining_ms > 0 => {
            // Members are still arriving: wait a little longer, within the rebalance timeout.
            group.new_member_added = false;
            let delay_ms = ctx
                .config
                .group_initial_rebalance_delay_ms
                .min(remaining_ms);
            group.join_timer = Some(JoinTimer::Initial {
                deadline_ms: now_ms + delay_ms,
                remaining_ms: remaining_ms - delay_ms,
            });
        }
        _ => complete_join(ctx, group, now_ms, out),
    }
}

fn fire_sync_timer(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    match group.sync_deadline_ms {
        Some(deadline_ms) if deadline_ms <= now_ms => {}
        _ => return,
    }
    group.sync_deadline_ms = None;
    if !matches!(
        group.state,
        GroupState::CompletingRebalance | GroupState::Stable
    ) || group.pending_sync.is_empty()
    {
        return;
    }
    let laggards: Vec<String> = group.pending_sync.iter().cloned().collect();
    tracing::info!(group = %group.group_id, members = %laggards.join(","), "removing members that did not sync in time");
    for member_id in laggards {
        if let Some(mut member) = group.remove_member(&member_id) {
            answer_removed(&mut member, out);
        }
    }
    prepare_rebalance(ctx, group, now_ms, out);
}

/// Kafka's onCompleteJoin: drop members that did not rejoin, start the next generation and
/// answer every parked JoinGroup.
fn complete_join(ctx: &Ctx<'_>, group: &mut Group, now_ms: i64, out: &mut Effects) {
    group.join_timer = None;
    let not_rejoined: Vec<String> = group
        .members
        .values()
        .filter(|m| m.awaiting_join.is_none())
        .map(|m| m.member_id.clone())
        .collect();
    for member_id in not_rejoined {
        tracing::info!(group = %group.group_id, member = %member_id, "member did not rejoin in time");
        if let Some(mut member) = group.remove_member(&member_id) {
            answer_removed(&mut member, out);
        }
    }
    if group.is(GroupState::Dead) {
        return;
    }
    group.generation_id += 1;
    group.pending_sync.clear();
    if group.members.is_empty() {
        group.protocol_name = None;
        group.transition(GroupState::Empty, now_ms);
        tracing::info!(group = %group.group_id, generation = group.generation_id, "group is now empty");
        ctx.store_group(group, now_ms, out);
        return;
    }
    group.protocol_name = group.select_protocol();
    group.transition(GroupState::CompletingRebalance, now_ms);
    tracing::info!(
        group = %group.group_id,
        generation = group.generation_id,
        members = group.members.len(),
        protocol = group.protocol_name.as_deref().unwrap_or(""),
        "rebalance join phase complete"
    );
    let leader_members = member_list(group);
    let leader = group.leader_id.clone().unwrap_or_default();
    for member_id in group.join_order.clone() {
        let member = group.members.get_mut(&member_id).expect("in join order");
        let response = JoinGroupResponse {
            error_code: 0,
            generation_id: group.generation_id,
            protocol_type: group.protocol_type.clone(),
            protocol_name: group.protocol_name.clone(),
            leader: leader.clone(),
            skip_assignment: false,
            member_id: member_id.clone(),
            members: if member_id == leader {
                leader_members.clone()
            } else {
                Vec::new()
            },
        };
        if let Some(token) = member.awaiting_join.take() {
            out.reply(token, Reply::Join(response));
        }
        member.is_new = false;
        member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        group.pending_sync.insert(member_id);
    }
    group.sync_deadline_ms = Some(now_ms + group.rebalance_timeout_ms());
}

fn reset_and_propagate_assignment_error(group: &mut Group, error_code: i16, out: &mut Effects) {
    for member in group.members.values_mut() {
        member.assignment = Bytes::new();
        if let Some(token) = member.awaiting_sync.take() {
            out.reply(token, Reply::Sync(SyncGroupResponse::error(error_code)));
        }
    }
}

fn set_and_propagate_assignment(
    group: &mut Group,
    assignments: &HashMap<String, Bytes>,
    now_ms: i64,
    out: &mut Effects,
) {
    for member in group.members.values_mut() {
        member.assignment = assignments
            .get(&member.member_id)
            .cloned()
            .unwrap_or_default();
        if let Some(token) = member.awaiting_sync.take() {
            out.reply(
                token,
                Reply::Sync(SyncGroupResponse {
                    error_code: 0,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    assignment: member.assignment.clone(),
                }),
            );
            member.heartbeat_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        }
    }
}

fn remove_pending_sync(group: &mut Group, member_id: &str) {
    group.pending_sync.remove(member_id);
    if group.pending_sync.is_empty() {
        group.sync_deadline_ms = None;
    }
}

fn validate_sync(group: &Group, request: &SyncGroupRequest) -> Result<(), i16> {
    if group.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable.code());
    }
    group.validate_member(&request.member_id, request.group_instance_id.as_deref())?;
    if request.generation_id != group.generation_id {
        return Err(ResponseError::IllegalGeneration.code());
    }
    let type_mismatch = request
        .protocol_type
        .as_ref()
        .is_some_and(|t| group.protocol_type.as_ref() != Some(t));
    let name_mismatch = request
        .protocol_name
        .as_ref()
        .is_some_and(|n| group.protocol_name.as_ref() != Some(n));
    if type_mismatch || name_mismatch {
        return Err(ResponseError::InconsistentGroupProtocol.code());
    }
    Ok(())
}

/// Answers the parked requests of a member that is gone.
fn answer_removed(member: &mut Member, out: &mut Effects) {
    if let Some(token) = member.awaiting_join.take() {
        out.reply(
            token,
            Reply::Join(JoinGroupResponse::error(
                &member.member_id,
                ResponseError::UnknownMemberId.code(),
            )),
        );
    }
    if let Some(token) = member.awaiting_sync.take() {
        out.reply(
            token,
            Reply::Sync(SyncGroupResponse::error(
                ResponseError::UnknownMemberId.code(),
            )),
        );
    }
}

pub(crate) fn remove_member_and_update_group(
    ctx: &Ctx<'_>,
    group: &mut Group,
    member_id: &str,
    now_ms: i64,
    out: &mut Effects,
) {
    if let Some(mut member) = group.remove_member(member_id) {
        answer_removed(&mut member, out);
    }
    match group.state {
        GroupState::Dead | GroupState::Empty => {}
        GroupState::Stable | GroupState::CompletingRebalance => {
            maybe_prepare_rebalance(ctx, group, now_ms, out);
        }
        GroupState::PreparingRebalance => try_complete_join(ctx, group, now_ms, out),
    }
}

fn leave_one(
    ctx: &Ctx<'_>,
    group: &mut Group,
    member_id: &str,
    instance_id: Option<&str>,
    now_ms: i64,
    out: &mut Effects,
) -> i16 {
    let resolved = match (member_id.is_empty(), instance_id) {
        (true, Some(instance)) => match group.static_member_id(instance) {
            Some(id) => id.to_string(),
            None => return ResponseError::UnknownMemberId.code(),
        },
        (true, None) => return ResponseError::UnknownMemberId.code(),
        (false, Some(instance)) => match group.static_member_id(instance) {
            Some(id) if id == member_id => member_id.to_string(),
            Some(_) => return ResponseError::FencedInstanceId.code(),
            None => return ResponseError::UnknownMemberId.code(),
        },
        (false, None) => member_id.to_string(),
    };
    if group.pending_members.remove(&resolved).is_some() {
        if group.is(GroupState::PreparingRebalance) {
            try_complete_join(ctx, group, now_ms, out);
        }
        return 0;
    }
    if !group.members.contains_key(&resolved) {
        return ResponseError::UnknownMemberId.code();
    }
    tracing::info!(group = %group.group_id, member = %resolved, "member left");
    remove_member_and_update_group(ctx, group, &resolved, now_ms, out);
    0
}

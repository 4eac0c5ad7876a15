//! Consumer-group admin APIs: ListGroups, DescribeGroups, DeleteGroups. Each answers only
//! for the groups of `__consumer_offsets` partitions loaded here (docs/GROUPS.md).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse,
};
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::handlers::groups::s;
use crate::handlers::groups_acl as acl;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

pub async fn handle_list_groups(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: ListGroupsRequest = req.decode()?;
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|v| v.to_string())
        .collect();
    let types: Vec<String> = request.types_filter.iter().map(|v| v.to_string()).collect();
    // Only the groups of partitions led and loaded here; while one loads, Kafka's error
    // comes with the groups it has.
    let loading = state.groups.loading();
    let mut groups = state.groups.read(|c| c.list_groups(&states, &types));
    let access = Access::of(&state, &req);
    let quiet = access.quiet();
    if !quiet.cluster(Operation::Describe) {
        groups.retain(|g| quiet.group(Operation::Describe, &g.group_id));
    }
    let mut resp = ListGroupsResponse::default();
    if loading {
        resp.error_code = ResponseError::CoordinatorLoadInProgress.code();
    }
    resp.groups = groups
        .into_iter()
        .map(|g| {
            let mut listed = ListedGroup::default();
            listed.group_id = GroupId(s(&g.group_id));
            listed.protocol_type = s(&g.protocol_type);
            listed.group_state = s(&g.state);
            listed.group_type = s(&g.group_type);
            listed
        })
        .collect();
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_describe_groups(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeGroupsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DescribeGroupsResponse::default();
    for group_id in &request.groups {
        if !access.group(Operation::Describe, group_id) {
            resp.groups.push(acl::described_denied(group_id));
            continue;
        }
        let d = match state
            .groups
            .read_group(group_id, |c| c.describe_group(group_id, req.api_version))
        {
            Ok(d) => d,
            Err(code) => {
                // Kafka's `groupError`: the code, the id, everything else empty.
                let mut group = DescribedGroup::default();
                group.group_id = group_id.clone();
                group.error_code = code;
                resp.groups.push(group);
                continue;
            }
        };
        let mut group = DescribedGroup::default();
        group.error_code = d.error_code;
        if d.error_code == ResponseError::GroupIdNotFound.code() {
            group.error_message = Some(s(&format!("Group {} not found.", d.group_id)));
        }
        group.group_id = group_id.clone();
        group.group_state = s(&d.state);
        group.protocol_type = s(&d.protocol_type);
        group.protocol_data = s(&d.protocol_data);
        group.authorized_operations =
            acl::group_operations(&access, request.include_authorized_operations, group_id);
        group.members = d
            .members
            .into_iter()
            .map(|m| {
                let mut member = DescribedGroupMember::default();
                member.member_id = s(&m.member_id);
                member.group_instance_id = m.group_instance_id.as_deref().map(s);
                member.client_id = s(&m.client_id);
                member.client_host = s(&m.client_host);
                member.member_metadata = m.metadata;
                member.member_assignment = m.assignment;
                member
            })
            .collect();
        resp.groups.push(group);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_delete_groups(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DeleteGroupsRequest = req.decode()?;
    let mut resp = DeleteGroupsResponse::default();
    let access = Access::of(&state, &req);
    for group_id in &request.groups_names {
        let error_code = if access.group(Operation::Delete, group_id) {
            state
                .groups
                .with_group(group_id, |c, now, out| c.delete_group(now, group_id, out))
                .map_or_else(|code| code, |(code, _)| code)
        } else {
            ResponseError::GroupAuthorizationFailed.code()
        };
        let mut result = DeletableGroupResult::default();
        result.group_id = group_id.clone();
        result.error_code = error_code;
        resp.results.push(result);
    }
    Ok(Some(req.respond(&resp)?))
}

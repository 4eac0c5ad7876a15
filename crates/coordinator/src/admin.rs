//! ListGroups, DescribeGroups, DeleteGroups.

use crate::coordinator::{Effects, GroupCoordinator};
use crate::group::GroupState;
use crate::records;
use crate::types::{DescribedGroup, DescribedMember, ListedGroup};
use kafka_protocol::ResponseError;

/// Every group here uses the classic protocol (KIP-848's "consumer" type is not served).
const GROUP_TYPE_CLASSIC: &str = "classic";

impl GroupCoordinator {
    /// ListGroups: `states_filter` (v4+) and `types_filter` (v5+) match case-insensitively;
    /// an empty filter matches everything.
    pub fn list_groups(
        &self,
        states_filter: &[String],
        types_filter: &[String],
    ) -> Vec<ListedGroup> {
        let state_ok = |state: &str| {
            states_filter.is_empty() || states_filter.iter().any(|s| s.eq_ignore_ascii_case(state))
        };
        let type_ok = types_filter.is_empty()
            || types_filter
                .iter()
                .any(|t| t.eq_ignore_ascii_case(GROUP_TYPE_CLASSIC));
        let mut listed: Vec<ListedGroup> = self
            .groups
            .values()
            .filter(|g| !g.is(GroupState::Dead) && state_ok(g.state.as_str()) && type_ok)
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state.as_str().to_string(),
                group_type: GROUP_TYPE_CLASSIC.to_string(),
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listed
    }

    /// DescribeGroups for one group. Unknown groups are reported as Dead (v6+: with
    /// GROUP_ID_NOT_FOUND), as Kafka does.
    pub fn describe_group(&self, group_id: &str, api_version: i16) -> DescribedGroup {
        let Some(group) = self
            .groups
            .get(group_id)
            .filter(|g| !g.is(GroupState::Dead))
        else {
            return DescribedGroup {
                error_code: if api_version >= 6 {
                    ResponseError::GroupIdNotFound.code()
                } else {
                    0
                },
                group_id: group_id.to_string(),
                state: GroupState::Dead.as_str().to_string(),
                protocol_type: String::new(),
                protocol_data: String::new(),
                members: Vec::new(),
            };
        };
        let stable = group.is(GroupState::Stable);
        let protocol = group.protocol_name.clone().unwrap_or_default();
        let members = group
            .join_order
            .iter()
            .filter_map(|id| group.members.get(id))
            .map(|m| DescribedMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                // Only a Stable group has a settled protocol and assignment to show.
                metadata: if stable {
                    m.metadata_for(&protocol)
                } else {
                    Default::default()
                },
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Default::default()
                },
            })
            .collect();
        DescribedGroup {
            error_code: 0,
            group_id: group_id.to_string(),
            state: group.state.as_str().to_string(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol_data: if stable { protocol } else { String::new() },
            members,
        }
    }

    /// DeleteGroups for one group: only groups without members can be deleted.
    pub fn delete_group(&mut self, now_ms: i64, group_id: &str, out: &mut Effects) -> i16 {
        let partition = self.partition_for(group_id);
        let Some(group) = self.groups.get_mut(group_id) else {
            return ResponseError::GroupIdNotFound.code();
        };
        match group.state {
            GroupState::Dead => return ResponseError::GroupIdNotFound.code(),
            GroupState::Empty => {}
            _ => return ResponseError::NonEmptyGroup.code(),
        }
        if !group.members.is_empty() || !group.pending_members.is_empty() {
            return ResponseError::NonEmptyGroup.code();
        }
        for (topic, p) in group.offsets.keys() {
            out.append(partition, records::offset_tombstone(group_id, topic, *p));
        }
        out.append(partition, records::group_tombstone(group_id));
        group.transition(GroupState::Dead, now_ms);
        self.groups.remove(group_id);
        tracing::info!(group = %group_id, "group deleted");
        0
    }

    /// Ids of all live groups (for tools and the dashboard).
    pub fn group_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| !g.is(GroupState::Dead))
            .map(|g| g.group_id.clone())
            .collect();
        ids.sort();
        ids
    }
}

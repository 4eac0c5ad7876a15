//! Consumer groups for the dashboard: state, members with their decoded assignments, committed
//! offsets next to each partition's high watermark (the http crate computes the lag).

use streamforge_http::{GroupInfo, GroupMember, GroupOffset, TopicPartitions};

use crate::BrokerState;

/// DescribeGroups version whose answer shape we want (unknown groups come back as Dead).
pub(crate) const DESCRIBE_VERSION: i16 = 5;
/// OffsetCommit version the dashboard's offset resets are checked as (v9+ errors).
pub(crate) const COMMIT_VERSION: i16 = 9;
/// Bounds on what we accept while decoding a member's assignment bytes.
const ASSIGNMENT_TOPICS_MAX: usize = 10_000;
const ASSIGNMENT_PARTITIONS_MAX: usize = 100_000;

/// All live groups.
pub fn all_groups(state: &BrokerState) -> Vec<GroupInfo> {
    let listed = state.groups.read(|c| c.list_groups(&[], &[]));
    listed
        .iter()
        .filter_map(|g| one_group(state, &g.group_id))
        .collect()
}

/// One group, or None when it does not exist (or is Dead).
pub fn one_group(state: &BrokerState, group_id: &str) -> Option<GroupInfo> {
    let (described, offsets, generation) = state.groups.read(|c| {
        (
            c.describe_group(group_id, DESCRIBE_VERSION),
            c.fetch_offsets(group_id, None),
            c.group_generation(group_id),
        )
    });
    if described.state == "Dead" {
        return None;
    }
    let members = described
        .members
        .iter()
        .map(|m| GroupMember {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            assignment: decode_assignment(&m.assignment).unwrap_or_default(),
        })
        .collect();
    let mut group_offsets = Vec::new();
    for topic in offsets.topics {
        for p in topic.partitions {
            let high_watermark = state
                .replicas
                .partition(&topic.name, p.partition)
                .and_then(|part| part.offsets().ok())
                .map(|o| o.high_watermark);
            group_offsets.push(GroupOffset {
                topic: topic.name.clone(),
                partition: p.partition,
                committed_offset: p.offset,
                metadata: p.metadata,
                high_watermark,
            });
        }
    }
    Some(GroupInfo {
        group_id: group_id.to_string(),
        state: described.state,
        protocol_type: described.protocol_type,
        protocol: described.protocol_data,
        generation: generation.unwrap_or(-1),
        coordinator: state.node_id(),
        members,
        offsets: group_offsets,
    })
}

/// Decodes the consumer protocol's Assignment (version, [topic, [partition]], user data).
/// Returns None for anything malformed (a non-consumer protocol, say): the UI shows no
/// assignment instead of an error.
fn decode_assignment(bytes: &[u8]) -> Option<Vec<TopicPartitions>> {
    let mut r = Reader { bytes, pos: 0 };
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let _version = r.i16()?;
    let topics = usize::try_from(r.i32()?).ok()?;
    if topics > ASSIGNMENT_TOPICS_MAX {
        return None;
    }
    let mut out = Vec::with_capacity(topics);
    for _ in 0..topics {
        let len = usize::try_from(r.i16()?).ok()?;
        let topic = std::str::from_utf8(r.take(len)?).ok()?.to_string();
        let count = usize::try_from(r.i32()?).ok()?;
        if count > ASSIGNMENT_PARTITIONS_MAX {
            return None;
        }
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            partitions.push(r.i32()?);
        }
        partitions.sort_unstable();
        out.push(TopicPartitions { topic, partitions });
    }
    out.sort_by(|a, b| a.topic.cmp(&b.topic));
    Some(out)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }

    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_decodes_and_rejects_garbage() {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&3i16.to_be_bytes());
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&5i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes()); // user data: null
        let a = decode_assignment(&b).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].topic.as_str(), a[0].partitions.clone()),
            ("abc", vec![1, 5])
        );
        assert!(decode_assignment(&b[..7]).is_none());
        assert!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_none());
        assert_eq!(decode_assignment(&[]).unwrap().len(), 0);
    }
}

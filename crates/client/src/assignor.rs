//! Partition assignors of the classic consumer group protocol (run by the group leader), and
//! the `consumer` protocol's subscription/assignment encoding.
use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::{ClientError, Result};

/// Partitions per topic assigned to one member.
pub type MemberAssignment = BTreeMap<String, Vec<i32>>;

/// The assignment strategies this client offers, in preference order by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Range,
    RoundRobin,
}

impl Assignor {
    /// The protocol name used in JoinGroup (same as Kafka's).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// Computes the assignment of every member. `members` maps member id to subscribed topics;
    /// `partitions` maps topic to its partition count (topics missing there are skipped).
    pub fn assign(
        self,
        members: &BTreeMap<String, Vec<String>>,
        partitions: &HashMap<String, i32>,
    ) -> BTreeMap<String, MemberAssignment> {
        match self {
            Assignor::Range => range(members, partitions),
            Assignor::RoundRobin => round_robin(members, partitions),
        }
    }
}

impl std::str::FromStr for Assignor {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Assignor::from_name(s).ok_or_else(|| format!("unknown assignor '{s}' (range, roundrobin)"))
    }
}

/// Kafka's RangeAssignor: per topic, consumers sorted by member id each take a contiguous
/// range; the first `partitions % consumers` take one extra.
fn range(
    members: &BTreeMap<String, Vec<String>>,
    partitions: &HashMap<String, i32>,
) -> BTreeMap<String, MemberAssignment> {
    let mut out: BTreeMap<String, MemberAssignment> = members
        .keys()
        .map(|m| (m.clone(), MemberAssignment::new()))
        .collect();
    let mut by_topic: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (m, topics) in members {
        for t in topics {
            by_topic.entry(t).or_default().push(m);
        }
    }
    for (topic, mut consumers) in by_topic {
        let Some(&n) = partitions.get(topic) else {
            continue;
        };
        consumers.sort_unstable();
        consumers.dedup();
        let per = n / consumers.len() as i32;
        let extra = n % consumers.len() as i32;
        for (i, m) in consumers.iter().enumerate() {
            let i = i as i32;
            let start = per * i + i.min(extra);
            let len = per + i32::from(i < extra);
            if len > 0 {
                out.get_mut(*m)
                    .expect("member")
                    .insert(topic.to_string(), (start..start + len).collect());
            }
        }
    }
    out
}

/// Kafka's RoundRobinAssignor: all partitions sorted by topic and partition are dealt to the
/// members (sorted) in turn, skipping members not subscribed to the partition's topic.
fn round_robin(
    members: &BTreeMap<String, Vec<String>>,
    partitions: &HashMap<String, i32>,
) -> BTreeMap<String, MemberAssignment> {
    let mut out: BTreeMap<String, MemberAssignment> = members
        .keys()
        .map(|m| (m.clone(), MemberAssignment::new()))
        .collect();
    let ids: Vec<&String> = members.keys().collect();
    if ids.is_empty() {
        return out;
    }
    let mut topics: Vec<&String> = members.values().flatten().collect();
    topics.sort_unstable();
    topics.dedup();
    let mut cursor = 0usize;
    for topic in topics {
        let Some(&n) = partitions.get(topic.as_str()) else {
            continue;
        };
        for p in 0..n {
            // Bounded: at most one full turn of the member ring per partition.
            for _ in 0..ids.len() {
                let m = ids[cursor % ids.len()];
                cursor += 1;
                if members[m].contains(topic) {
                    out.get_mut(m)
                        .expect("member")
                        .entry(topic.clone())
                        .or_default()
                        .push(p);
                    break;
                }
            }
        }
    }
    out
}

/// Highest ConsumerProtocol version we decode.
const CONSUMER_PROTOCOL_MAX_VERSION: i16 = 3;

/// Encodes our subscription metadata (version-prefixed, as Kafka clients do).
pub fn encode_subscription(topics: &[String]) -> Result<Bytes> {
    let version = 0i16;
    let s = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|t| StrBytes::from_string(t.clone()))
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    s.encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}

/// Decodes a member's subscribed topics.
pub fn decode_subscription(mut b: Bytes) -> Result<Vec<String>> {
    if b.len() < 2 {
        return Err(ClientError::Protocol("short consumer subscription".into()));
    }
    let version = b.get_i16().clamp(0, CONSUMER_PROTOCOL_MAX_VERSION);
    let s = ConsumerProtocolSubscription::decode(&mut b, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(s.topics.into_iter().map(|t| t.to_string()).collect())
}

pub fn encode_assignment(a: &MemberAssignment) -> Result<Bytes> {
    let version = 0i16;
    let msg = ConsumerProtocolAssignment::default().with_assigned_partitions(
        a.iter()
            .map(|(t, ps)| {
                AssignedTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(t.clone())))
                    .with_partitions(ps.clone())
            })
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}

/// Decodes an assignment; an empty buffer means no partitions.
pub fn decode_assignment(mut b: Bytes) -> Result<MemberAssignment> {
    if b.is_empty() {
        return Ok(MemberAssignment::new());
    }
    if b.len() < 2 {
        return Err(ClientError::Protocol("short consumer assignment".into()));
    }
    let version = b.get_i16().clamp(0, CONSUMER_PROTOCOL_MAX_VERSION);
    let a = ConsumerProtocolAssignment::decode(&mut b, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(a.assigned_partitions
        .into_iter()
        .map(|t| (t.topic.0.to_string(), t.partitions))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(spec: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        spec.iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn range_matches_kafka() {
        // Kafka's documented example: t0, t1 with 3 partitions each, two consumers.
        let m = members(&[("C0", &["t0", "t1"]), ("C1", &["t0", "t1"])]);
        let p: HashMap<String, i32> = [("t0".into(), 3), ("t1".into(), 3)].into();
        let a = Assignor::Range.assign(&m, &p);
        assert_eq!(a["C0"]["t0"], vec![0, 1]);
        assert_eq!(a["C0"]["t1"], vec![0, 1]);
        assert_eq!(a["C1"]["t0"], vec![2]);
        assert_eq!(a["C1"]["t1"], vec![2]);
    }

    #[test]
    fn round_robin_matches_kafka() {
        let m = members(&[("C0", &["t0", "t1"]), ("C1", &["t0", "t1"])]);
        let p: HashMap<String, i32> = [("t0".into(), 3), ("t1".into(), 3)].into();
        let a = Assignor::RoundRobin.assign(&m, &p);
        assert_eq!(a["C0"]["t0"], vec![0, 2]);
        assert_eq!(a["C0"]["t1"], vec![1]);
        assert_eq!(a["C1"]["t0"], vec![1]);
        assert_eq!(a["C1"]["t1"], vec![0, 2]);
    }

    #[test]
    fn every_partition_assigned_exactly_once() {
        let m = members(&[("a", &["x", "y"]), ("b", &["x"]), ("c", &["y", "z"])]);
        let p: HashMap<String, i32> = [("x".into(), 7), ("y".into(), 5), ("z".into(), 1)].into();
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let a = assignor.assign(&m, &p);
            let mut seen: Vec<(String, i32)> = a
                .values()
                .flat_map(|ma| {
                    ma.iter()
                        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
                })
                .collect();
            seen.sort();
            let want: Vec<(String, i32)> = p
                .iter()
                .flat_map(|(t, n)| (0..*n).map(move |i| (t.clone(), i)))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            assert_eq!(seen, want, "{assignor:?}");
            // Members only get topics they subscribed to.
            for (mid, ma) in &a {
                for t in ma.keys() {
                    assert!(m[mid].contains(t));
                }
            }
        }
    }

    #[test]
    fn more_consumers_than_partitions() {
        let m = members(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        let p: HashMap<String, i32> = [("t".into(), 2)].into();
        let a = Assignor::Range.assign(&m, &p);
        assert_eq!(a["a"]["t"], vec![0]);
        assert_eq!(a["b"]["t"], vec![1]);
        assert!(a["c"].is_empty());
    }

    #[test]
    fn protocol_round_trip() {
        let s = encode_subscription(&["a".into(), "b".into()]).unwrap();
        assert_eq!(decode_subscription(s).unwrap(), vec!["a", "b"]);
        let mut ma = MemberAssignment::new();
        ma.insert("a".into(), vec![0, 2]);
        assert_eq!(
            decode_assignment(encode_assignment(&ma).unwrap()).unwrap(),
            ma
        );
        assert!(decode_assignment(Bytes::new()).unwrap().is_empty());
        assert!(decode_subscription(Bytes::from_static(&[0, 0, 0xff])).is_err());
    }
}

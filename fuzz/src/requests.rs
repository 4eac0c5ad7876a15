//! A request frame (the bytes after the 4-byte length prefix) through the broker's decode path.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;
use streamforge_protocol::RequestFrame;
use streamforge_protocol::api_versions::unsupported_api_versions_response;
use streamforge_protocol::frame::HeaderPrefix;
use streamforge_protocol::guarded_buf::decode_guarded;

use crate::{assert_round_trip, batches, served};

/// Decode the body the way the handler does and check the round trip; `None` when the broker
/// would reject the body (it closes the connection).
macro_rules! decode {
    ($req:expr, $ty:ty) => {{
        match $req.decode::<$ty>() {
            Ok(body) => {
                assert_round_trip(&body, $req.api_version);
                Some(body)
            }
            Err(_) => None,
        }
    }};
}

/// Rewrite the frame's api key to `key` and fold its version into the served range, so a
/// dedicated target spends every input on one API (captured frames of other APIs still help:
/// their bodies share shapes).
pub fn force_api(data: &[u8], key: ApiKey) -> Option<Vec<u8>> {
    let range = served::find(key)?;
    let prefix = HeaderPrefix::parse(data).ok()?;
    let span = i32::from(range.max_version - range.min_version) + 1;
    let version = if range.contains(prefix.api_version) {
        prefix.api_version
    } else {
        range.min_version + i32::from(prefix.api_version).rem_euclid(span) as i16
    };
    let mut frame = data.to_vec();
    frame[0..2].copy_from_slice(&(key as i16).to_be_bytes());
    frame[2..4].copy_from_slice(&version.to_be_bytes());
    Some(frame)
}

/// Route and decode one request frame as the broker does. Never panics on any input; asserts
/// round trips and the invariants of what was decoded.
pub fn serve_frame(data: &[u8]) {
    if data.len() > crate::INPUT_BYTES_MAX {
        return;
    }
    let Ok(prefix) = HeaderPrefix::parse(data) else {
        return;
    };
    let Some(api_key) = ApiKey::try_from(prefix.api_key).ok() else {
        return;
    };
    let Some(range) = served::find(api_key) else {
        return; // the broker closes the connection
    };
    if !range.contains(prefix.api_version) {
        if api_key == ApiKey::ApiVersions {
            let resp = unsupported_api_versions_response(prefix.correlation_id, range)
                .expect("the UNSUPPORTED_VERSION answer always encodes");
            assert!(resp.len_bytes() > 4);
        }
        return;
    }
    let Ok(req) = RequestFrame::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    assert_eq!(req.api_key, api_key);
    assert_eq!(req.api_version, prefix.api_version);
    assert_eq!(req.correlation_id, prefix.correlation_id);
    assert!(req.body.len() <= data.len() - streamforge_protocol::frame::HEADER_FIXED_BYTES);
    decode_body(&req);
}

fn decode_body(req: &RequestFrame) {
    match req.api_key {
        ApiKey::Produce => {
            if req.api_version >= 3
                && let Some(body) = decode!(req, ProduceRequest)
            {
                check_produce(&body);
            }
        }
        ApiKey::Fetch => {
            drop(decode!(req, FetchRequest));
        }
        ApiKey::ListOffsets => drop(decode!(req, ListOffsetsRequest)),
        ApiKey::Metadata => drop(decode!(req, MetadataRequest)),
        ApiKey::ApiVersions => {
            if req.api_version >= 3 {
                drop(decode!(req, ApiVersionsRequest));
            }
        }
        ApiKey::CreateTopics => drop(decode!(req, CreateTopicsRequest)),
        ApiKey::DeleteTopics => drop(decode!(req, DeleteTopicsRequest)),
        ApiKey::DeleteRecords => drop(decode!(req, DeleteRecordsRequest)),
        ApiKey::OffsetForLeaderEpoch => drop(decode!(req, OffsetForLeaderEpochRequest)),
        ApiKey::DescribeConfigs => drop(decode!(req, DescribeConfigsRequest)),
        ApiKey::AlterConfigs => drop(decode!(req, AlterConfigsRequest)),
        ApiKey::CreatePartitions => drop(decode!(req, CreatePartitionsRequest)),
        ApiKey::IncrementalAlterConfigs => drop(decode!(req, IncrementalAlterConfigsRequest)),
        ApiKey::DescribeCluster => drop(decode!(req, DescribeClusterRequest)),
        ApiKey::DescribeQuorum => drop(decode!(req, DescribeQuorumRequest)),
        ApiKey::OffsetCommit => drop(decode!(req, OffsetCommitRequest)),
        ApiKey::OffsetFetch => drop(decode!(req, OffsetFetchRequest)),
        ApiKey::FindCoordinator => drop(decode!(req, FindCoordinatorRequest)),
        ApiKey::JoinGroup => {
            if let Some(body) = decode!(req, JoinGroupRequest) {
                for p in &body.protocols {
                    check_subscription(&p.metadata);
                }
            }
        }
        ApiKey::Heartbeat => drop(decode!(req, HeartbeatRequest)),
        ApiKey::LeaveGroup => drop(decode!(req, LeaveGroupRequest)),
        ApiKey::SyncGroup => {
            if let Some(body) = decode!(req, SyncGroupRequest) {
                for a in &body.assignments {
                    check_assignment(&a.assignment);
                }
            }
        }
        ApiKey::DescribeGroups => drop(decode!(req, DescribeGroupsRequest)),
        ApiKey::ListGroups => drop(decode!(req, ListGroupsRequest)),
        ApiKey::DeleteGroups => drop(decode!(req, DeleteGroupsRequest)),
        ApiKey::OffsetDelete => drop(decode!(req, OffsetDeleteRequest)),
        ApiKey::ConsumerGroupHeartbeat => drop(decode!(req, ConsumerGroupHeartbeatRequest)),
        ApiKey::InitProducerId => drop(decode!(req, InitProducerIdRequest)),
        ApiKey::DescribeProducers => drop(decode!(req, DescribeProducersRequest)),
        ApiKey::DescribeLogDirs => drop(decode!(req, DescribeLogDirsRequest)),
        ApiKey::SaslHandshake => drop(decode!(req, SaslHandshakeRequest)),
        ApiKey::SaslAuthenticate => drop(decode!(req, SaslAuthenticateRequest)),
        ApiKey::DescribeUserScramCredentials => {
            drop(decode!(req, DescribeUserScramCredentialsRequest))
        }
        ApiKey::AlterUserScramCredentials => drop(decode!(req, AlterUserScramCredentialsRequest)),
        ApiKey::AddPartitionsToTxn => drop(decode!(req, AddPartitionsToTxnRequest)),
        ApiKey::AddOffsetsToTxn => drop(decode!(req, AddOffsetsToTxnRequest)),
        ApiKey::EndTxn => drop(decode!(req, EndTxnRequest)),
        ApiKey::TxnOffsetCommit => drop(decode!(req, TxnOffsetCommitRequest)),
        ApiKey::DescribeTransactions => drop(decode!(req, DescribeTransactionsRequest)),
        ApiKey::ListTransactions => drop(decode!(req, ListTransactionsRequest)),
        ApiKey::WriteTxnMarkers => drop(decode!(req, WriteTxnMarkersRequest)),
        ApiKey::DescribeClientQuotas => drop(decode!(req, DescribeClientQuotasRequest)),
        ApiKey::AlterClientQuotas => drop(decode!(req, AlterClientQuotasRequest)),
        ApiKey::DescribeAcls => drop(decode!(req, DescribeAclsRequest)),
        ApiKey::CreateAcls => drop(decode!(req, CreateAclsRequest)),
        ApiKey::DeleteAcls => drop(decode!(req, DeleteAclsRequest)),
        ApiKey::ElectLeaders => drop(decode!(req, ElectLeadersRequest)),
        ApiKey::AlterPartitionReassignments => {
            drop(decode!(req, AlterPartitionReassignmentsRequest))
        }
        ApiKey::ListPartitionReassignments => drop(decode!(req, ListPartitionReassignmentsRequest)),
        ApiKey::DescribeTopicPartitions => drop(decode!(req, DescribeTopicPartitionsRequest)),
        other => panic!("{other:?} is served but has no decoder in the fuzz harness"),
    }
}

/// The record sets of a Produce request through the same batch checks the log applies.
fn check_produce(body: &ProduceRequest) {
    for topic in &body.topic_data {
        for p in &topic.partition_data {
            if let Some(records) = &p.records {
                batches::check_batches(records);
            }
        }
    }
}

/// A consumer-protocol subscription (JoinGroup protocol metadata): the coordinator's own
/// topic-list reader against kafka-protocol's full decoder. When the full decoder accepts the
/// bytes, the coordinator must read the same topics.
pub fn check_subscription(metadata: &Bytes) {
    let ours = streamforge_coordinator::parse_subscription_topics(metadata);
    let mut buf = metadata.clone();
    let Ok(version) = buf.try_get_i16() else {
        assert!(
            ours.is_none(),
            "two bytes cannot hold a version and a topic list"
        );
        return;
    };
    if !(0..=3).contains(&version) {
        return;
    }
    if let Ok(sub) = decode_guarded(&buf, |b| ConsumerProtocolSubscription::decode(b, version)) {
        let theirs: Vec<String> = sub.topics.iter().map(|t| t.to_string()).collect();
        assert_eq!(ours, Some(theirs), "subscription topics disagree");
        assert_round_trip(&sub, version);
    }
}

/// A consumer-protocol assignment (SyncGroup): decoded the way clients do; must round-trip.
pub fn check_assignment(assignment: &Bytes) {
    let mut buf = assignment.clone();
    let Ok(version) = buf.try_get_i16() else {
        return;
    };
    if !(0..=3).contains(&version) {
        return;
    }
    if let Ok(a) = decode_guarded(&buf, |b| ConsumerProtocolAssignment::decode(b, version)) {
        assert_round_trip(&a, version);
    }
}

/// Build a request frame (no length prefix) with header v1/v2 as clients send it.
pub fn encode_frame(key: ApiKey, version: i16, client_id: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i16(key as i16);
    out.put_i16(version);
    out.put_i32(7);
    match client_id {
        Some(c) => {
            out.put_i16(c.len() as i16);
            out.put_slice(c.as_bytes());
        }
        None => out.put_i16(-1),
    }
    if key.request_header_version(version) >= 2 {
        out.put_u8(0);
    }
    out.put_slice(body);
    out.to_vec()
}

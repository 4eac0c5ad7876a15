//! A minimal raw-protocol group member for tests and the rebalance benchmark: it speaks
//! JoinGroup/SyncGroup/Heartbeat/LeaveGroup over one TCP connection with the `kafka-protocol`
//! codecs, nothing more.

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestHeader, ResponseHeader, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const JOIN_VERSION: i16 = 9;
pub const SYNC_VERSION: i16 = 5;
pub const HEARTBEAT_VERSION: i16 = 4;
/// Largest response frame the test client accepts.
const RESPONSE_MAX_BYTES: usize = 64 << 20;

pub struct RawClient {
    stream: TcpStream,
    correlation_id: i32,
}

impl RawClient {
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        RawClient {
            stream,
            correlation_id: 0,
        }
    }

    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        self.correlation_id += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = api_key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation_id;
        header.client_id = Some(StrBytes::from_static_str("group-bench"));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api_key.request_header_version(version))
            .expect("header");
        request.encode(&mut body, version).expect("body");
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await.expect("write");
        let len = self.stream.read_i32().await.expect("read length") as usize;
        assert!(len <= RESPONSE_MAX_BYTES, "response of {len} bytes");
        let mut buf = vec![0u8; len];
        self.stream.read_exact(&mut buf).await.expect("read body");
        let mut bytes = Bytes::from(buf);
        let response_header =
            ResponseHeader::decode(&mut bytes, api_key.response_header_version(version))
                .expect("response header");
        assert_eq!(response_header.correlation_id, self.correlation_id);
        let response = Resp::decode(&mut bytes, version).expect("response body");
        assert!(
            !bytes.has_remaining(),
            "trailing bytes in {api_key:?} response"
        );
        response
    }

    pub async fn join(
        &mut self,
        group: &str,
        member_id: &str,
        subscription: Bytes,
    ) -> JoinGroupResponse {
        let mut protocol = JoinGroupRequestProtocol::default();
        protocol.name = StrBytes::from_static_str("range");
        protocol.metadata = subscription;
        let mut request = JoinGroupRequest::default();
        request.group_id = GroupId(StrBytes::from_string(group.to_string()));
        request.session_timeout_ms = 30_000;
        request.rebalance_timeout_ms = 60_000;
        request.member_id = StrBytes::from_string(member_id.to_string());
        request.protocol_type = StrBytes::from_static_str("consumer");
        request.protocols = vec![protocol];
        self.call(ApiKey::JoinGroup, JOIN_VERSION, &request).await
    }

    pub async fn sync(
        &mut self,
        group: &str,
        member_id: &str,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncGroupResponse {
        let mut request = SyncGroupRequest::default();
        request.group_id = GroupId(StrBytes::from_string(group.to_string()));
        request.generation_id = generation_id;
        request.member_id = StrBytes::from_string(member_id.to_string());
        request.protocol_type = Some(StrBytes::from_static_str("consumer"));
        request.protocol_name = Some(StrBytes::from_static_str("range"));
        request.assignments = assignments
            .into_iter()
            .map(|(id, assignment)| {
                let mut a = SyncGroupRequestAssignment::default();
                a.member_id = StrBytes::from_string(id);
                a.assignment = assignment;
                a
            })
            .collect();
        self.call(ApiKey::SyncGroup, SYNC_VERSION, &request).await
    }

    pub async fn heartbeat(&mut self, group: &str, member_id: &str, generation_id: i32) -> i16 {
        let mut request = HeartbeatRequest::default();
        request.group_id = GroupId(StrBytes::from_string(group.to_string()));
        request.generation_id = generation_id;
        request.member_id = StrBytes::from_string(member_id.to_string());
        let response: HeartbeatResponse = self
            .call(ApiKey::Heartbeat, HEARTBEAT_VERSION, &request)
            .await;
        response.error_code
    }
}

impl RawClient {
    /// OffsetCommit v8 as a simple consumer (generation -1); returns the partition's error.
    pub async fn commit(&mut self, group: &str, topic: &str, partition: i32, offset: i64) -> i16 {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = partition;
        p.committed_offset = offset;
        p.committed_leader_epoch = -1;
        p.committed_metadata = Some(StrBytes::from_string(format!("m{offset}")));
        let mut t = OffsetCommitRequestTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = vec![p];
        let mut request = OffsetCommitRequest::default();
        request.group_id = GroupId(StrBytes::from_string(group.to_string()));
        request.generation_id_or_member_epoch = -1;
        request.topics = vec![t];
        let response: OffsetCommitResponse = self.call(ApiKey::OffsetCommit, 8, &request).await;
        response.topics[0].partitions[0].error_code
    }

    /// OffsetFetch v7 of one partition: (offset, metadata).
    pub async fn fetch(&mut self, group: &str, topic: &str, partition: i32) -> (i64, String) {
        let mut t = OffsetFetchRequestTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partition_indexes = vec![partition];
        let mut request = OffsetFetchRequest::default();
        request.group_id = GroupId(StrBytes::from_string(group.to_string()));
        request.topics = Some(vec![t]);
        let response: OffsetFetchResponse = self.call(ApiKey::OffsetFetch, 7, &request).await;
        let p = &response.topics[0].partitions[0];
        (
            p.committed_offset,
            p.metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default(),
        )
    }
}

/// A ConsumerProtocolSubscription v0 for one topic.
pub fn subscription(topic: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(topic.len() as i16);
    b.put_slice(topic.as_bytes());
    b.put_i32(-1);
    b.freeze()
}

/// A ConsumerProtocolAssignment v0: `partitions` of `topic`.
pub fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(topic.len() as i16);
    b.put_slice(topic.as_bytes());
    b.put_i32(partitions.len() as i32);
    for p in partitions {
        b.put_i32(*p);
    }
    b.put_i32(-1);
    b.freeze()
}

/// Kafka's range assignment of `partitions` partitions over `members` (sorted member ids).
pub fn range_assign(members: &[String], partitions: i32) -> Vec<(String, Vec<i32>)> {
    let mut sorted = members.to_vec();
    sorted.sort();
    let n = sorted.len() as i32;
    let (per, extra) = (partitions / n, partitions % n);
    let mut next = 0;
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let count = per + i32::from((i as i32) < extra);
            let owned = (next..next + count).collect();
            next += count;
            (id, owned)
        })
        .collect()
}

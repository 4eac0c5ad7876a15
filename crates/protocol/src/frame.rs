//! Framing: the 4-byte big-endian length prefix, request header v1/v2 parsing from a frozen
//! `Bytes` frame (the body stays a zero-copy slice of it), and response encoding with
//! response header v0/v1.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::error::ProtocolError;
use crate::error_codes::{ErrorCodes, nonzero_error_codes};
use crate::guarded_buf::{GuardError, decode_guarded};

/// Bytes of the length prefix in front of every request and response.
pub const FRAME_PREFIX_BYTES: usize = 4;
/// Smallest request header: api key, api version, correlation id.
pub const HEADER_FIXED_BYTES: usize = 8;
/// Upper bound on the tagged fields a request header may carry (defensive limit).
pub const HEADER_TAGGED_FIELDS_MAX: u32 = 64;

/// Validate a frame's length prefix against `socket.request.max.bytes`.
pub fn frame_len(
    prefix: [u8; FRAME_PREFIX_BYTES],
    max_bytes: usize,
) -> Result<usize, ProtocolError> {
    let size = i32::from_be_bytes(prefix);
    if size <= 0 {
        return Err(ProtocolError::InvalidFrameSize { size });
    }
    let size_bytes = size as usize;
    if size_bytes > max_bytes {
        return Err(ProtocolError::FrameTooLarge {
            size_bytes,
            max_bytes,
        });
    }
    Ok(size_bytes)
}

/// The first fields of every request header, readable for any api key (even unknown ones), so
/// that an error can at least be logged with the correlation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

impl HeaderPrefix {
    pub fn parse(frame: &[u8]) -> Result<HeaderPrefix, ProtocolError> {
        if frame.len() < HEADER_FIXED_BYTES {
            return Err(ProtocolError::TruncatedHeader {
                have_bytes: frame.len(),
            });
        }
        let mut b = &frame[..HEADER_FIXED_BYTES];
        Ok(HeaderPrefix {
            api_key: b.get_i16(),
            api_version: b.get_i16(),
            correlation_id: b.get_i32(),
        })
    }
}

/// A parsed request: header fields plus the body as a slice of the frame.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The client's IP address, set by the connection (group members report it as host).
    pub client_addr: Option<std::net::IpAddr>,
    /// Index of the broker listener the request came in on (Metadata answers with that
    /// listener's advertised endpoint); 0, the first listener, unless the connection sets it.
    pub listener: usize,
    /// The authenticated user (Kafka's principal `User:<name>`), set by the connection; `None`
    /// is `User:ANONYMOUS` (PLAINTEXT, SSL without a client certificate).
    pub principal: Option<std::sync::Arc<str>>,
    /// The body, a zero-copy slice of the frame.
    pub body: Bytes,
}

impl RequestFrame {
    /// Parse the request header (v1 or v2, chosen by api key and version) of a frozen frame
    /// (the bytes after the length prefix). Never panics on malformed input.
    pub fn parse(mut frame: Bytes) -> Result<RequestFrame, ProtocolError> {
        let prefix = HeaderPrefix::parse(&frame)?;
        let api_key = ApiKey::try_from(prefix.api_key).map_err(|_| {
            ProtocolError::MalformedHeader(format!("unknown api key {}", prefix.api_key))
        })?;
        let header_version = api_key.request_header_version(prefix.api_version);
        frame.advance(HEADER_FIXED_BYTES);
        let client_id = if header_version >= 1 {
            read_nullable_string(&mut frame)?
        } else {
            None
        };
        if header_version >= 2 {
            skip_tagged_fields(&mut frame)?;
        }
        Ok(RequestFrame {
            api_key,
            api_version: prefix.api_version,
            correlation_id: prefix.correlation_id,
            client_id,
            client_addr: None,
            listener: 0,
            principal: None,
            body: frame,
        })
    }

    /// Decode the body as message `T` at this request's version.
    /// Absurd element counts are rejected before the decoder allocates for them.
    pub fn decode<T: Decodable>(&self) -> Result<T, ProtocolError> {
        let version = self.api_version;
        decode_guarded(&self.body, |buf| T::decode(buf, version)).map_err(|e| {
            ProtocolError::MalformedBody {
                api: api_name(self.api_key),
                version,
                reason: match e {
                    GuardError::AbsurdCount => "element count larger than the request".into(),
                    GuardError::Decode(e) => e.to_string(),
                },
            }
        })
    }

    /// Encode `body` as this request's response (header version chosen per Kafka's rules).
    pub fn respond<T: Encodable + ErrorCodes>(
        &self,
        body: &T,
    ) -> Result<ResponseFrame, ProtocolError> {
        encode_response(self.api_key, self.api_version, self.correlation_id, body)
    }
}

fn read_nullable_string(buf: &mut Bytes) -> Result<Option<String>, ProtocolError> {
    if buf.remaining() < 2 {
        return Err(ProtocolError::TruncatedHeader {
            have_bytes: buf.remaining(),
        });
    }
    let len = buf.get_i16();
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if buf.remaining() < len {
        return Err(ProtocolError::MalformedHeader(format!(
            "client id of {len} bytes but only {} left",
            buf.remaining()
        )));
    }
    let s = String::from_utf8_lossy(&buf[..len]).into_owned();
    buf.advance(len);
    Ok(Some(s))
}

/// Read an unsigned varint (at most 5 bytes for a u32).
pub fn read_unsigned_varint(buf: &mut Bytes) -> Result<u32, ProtocolError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        if !buf.has_remaining() {
            return Err(ProtocolError::MalformedHeader("truncated varint".into()));
        }
        let b = buf.get_u8();
        value |= ((b & 0x7f) as u32) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ProtocolError::MalformedHeader(
        "varint longer than 5 bytes".into(),
    ))
}

fn skip_tagged_fields(buf: &mut Bytes) -> Result<(), ProtocolError> {
    let count = read_unsigned_varint(buf)?;
    if count > HEADER_TAGGED_FIELDS_MAX {
        return Err(ProtocolError::MalformedHeader(format!(
            "{count} tagged fields in header"
        )));
    }
    for _ in 0..count {
        let _tag = read_unsigned_varint(buf)?;
        let size = read_unsigned_varint(buf)? as usize;
        if buf.remaining() < size {
            return Err(ProtocolError::MalformedHeader(
                "truncated tagged field".into(),
            ));
        }
        buf.advance(size);
    }
    Ok(())
}

/// A response ready for a vectored write: the length prefix is included in `chunks[0]`.
#[derive(Debug, Clone, Default)]
pub struct ResponseFrame {
    pub chunks: Vec<Bytes>,
    /// The non-zero error codes the response carries (for the broker's error metrics).
    pub error_codes: Vec<i16>,
    /// Quota throttle time: the connection is muted this long after the response is sent
    /// (or, for versions whose clients do not back off themselves, the response is delayed).
    /// A frame with no chunks sends nothing and only mutes (a throttled acks=0 Produce).
    pub throttle_ms: u64,
}

impl ResponseFrame {
    /// Total bytes including the length prefix.
    pub fn len_bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

/// Response header version: ApiVersions always answers with header v0 (so a client that does
/// not yet know our versions can parse it); otherwise Kafka's per-version rule.
pub fn response_header_version(api_key: ApiKey, api_version: i16) -> i16 {
    if api_key == ApiKey::ApiVersions {
        0
    } else {
        api_key.response_header_version(api_version)
    }
}

/// Encode a complete response frame (length prefix + header + body) into one buffer.
pub fn encode_response<T: Encodable + ErrorCodes>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<ResponseFrame, ProtocolError> {
    let enc_err = |e: &dyn std::fmt::Display| ProtocolError::Encode {
        api: api_name(api_key),
        version: api_version,
        reason: e.to_string(),
    };
    let header_version = response_header_version(api_key, api_version);
    let header_bytes = if header_version >= 1 { 5 } else { 4 };
    let body_bytes = body.compute_size(api_version).map_err(|e| enc_err(&e))?;
    let total = header_bytes + body_bytes;
    let mut buf = BytesMut::with_capacity(FRAME_PREFIX_BYTES + total);
    buf.put_i32(i32::try_from(total).map_err(|_| ProtocolError::Encode {
        api: api_name(api_key),
        version: api_version,
        reason: format!("response of {total} bytes"),
    })?);
    buf.put_i32(correlation_id);
    if header_version >= 1 {
        buf.put_u8(0); // no tagged fields
    }
    body.encode(&mut buf, api_version)
        .map_err(|e| enc_err(&e))?;
    debug_assert_eq!(buf.len(), FRAME_PREFIX_BYTES + total);
    Ok(ResponseFrame {
        chunks: vec![buf.freeze()],
        error_codes: nonzero_error_codes(body),
        throttle_ms: 0,
    })
}

/// Human-readable api name for logs and metrics labels.
pub fn api_name(api_key: ApiKey) -> &'static str {
    match api_key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
        ApiKey::EndTxn => "EndTxn",
        ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::ElectLeaders => "ElectLeaders",
        ApiKey::AlterPartitionReassignments => "AlterPartitionReassignments",
        ApiKey::ListPartitionReassignments => "ListPartitionReassignments",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::DescribeQuorum => "DescribeQuorum",
        ApiKey::DescribeProducers => "DescribeProducers",
        ApiKey::DescribeLogDirs => "DescribeLogDirs",
        ApiKey::DescribeTopicPartitions => "DescribeTopicPartitions",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::DescribeTransactions => "DescribeTransactions",
        ApiKey::ListTransactions => "ListTransactions",
        ApiKey::WriteTxnMarkers => "WriteTxnMarkers",
        ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        ApiKey::AlterClientQuotas => "AlterClientQuotas",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        _ => "Other",
    }
}

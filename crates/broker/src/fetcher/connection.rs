//! One fetcher's connection to its source broker: a request, then its response, with the
//! `kafka-protocol` codecs; responses bounded in size, every call bounded in time. Also the
//! connection a broker forwards a request to another broker on (DescribeQuorum to the active
//! controller). [`crate::inter_broker::InterBroker::connect`] opens them (TCP, TLS, SASL).

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::inter_broker::PeerIo;

/// Errors talking to the leader; the fetcher backs off and reconnects.
#[derive(Debug, thiserror::Error)]
pub enum FetcherError {
    #[error("no address known for broker {0}")]
    UnknownBroker(i32),
    #[error("i/o with the leader: {0}")]
    Io(#[from] std::io::Error),
    #[error("the leader did not answer within {0:?}")]
    Timeout(Duration),
    #[error("peers cannot be reached: {0}")]
    NotConfigured(String),
    #[error("TLS with the peer: {0}")]
    Tls(String),
    #[error("SASL login at the peer: {0}")]
    Sasl(String),
    #[error("bad response: {0}")]
    Decode(String),
    #[error("response of {0} bytes exceeds the fetcher's bound")]
    TooLarge(usize),
}

/// The client id a fetcher's requests carry.
const FETCHER_CLIENT_ID: &str = "streamforge-replica-fetcher";

pub(crate) struct LeaderConnection {
    stream: Box<dyn PeerIo>,
    correlation_id: i32,
    response_max_bytes: usize,
    client_id: &'static str,
}

impl LeaderConnection {
    /// A connection over `stream` (connected, and encrypted if the listener says so).
    pub(crate) fn over(stream: Box<dyn PeerIo>, response_max_bytes: usize) -> LeaderConnection {
        LeaderConnection {
            stream,
            correlation_id: 0,
            response_max_bytes,
            client_id: FETCHER_CLIENT_ID,
        }
    }

    /// The client id the requests on this connection carry (the receiver can tell a forwarded
    /// request from a client's by it).
    pub(crate) fn with_client_id(mut self, client_id: &'static str) -> LeaderConnection {
        self.client_id = client_id;
        self
    }

    pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, FetcherError> {
        tokio::time::timeout(timeout, self.call_inner(api_key, version, request))
            .await
            .map_err(|_| FetcherError::Timeout(timeout))?
    }

    async fn call_inner<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, FetcherError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = api_key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation_id;
        header.client_id = Some(StrBytes::from_static_str(self.client_id));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api_key.request_header_version(version))
            .map_err(codec_error)?;
        request.encode(&mut body, version).map_err(codec_error)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await?;
        // TLS holds the last record until flushed.
        self.stream.flush().await?;
        let len = usize::try_from(self.stream.read_i32().await?)
            .map_err(|_| FetcherError::Decode("negative frame length".into()))?;
        if len > self.response_max_bytes {
            return Err(FetcherError::TooLarge(len));
        }
        let mut buf = vec![0u8; len];
        self.stream.read_exact(&mut buf).await?;
        let mut bytes = Bytes::from(buf);
        let response_header =
            ResponseHeader::decode(&mut bytes, api_key.response_header_version(version))
                .map_err(codec_error)?;
        if response_header.correlation_id != self.correlation_id {
            return Err(FetcherError::Decode("correlation id mismatch".into()));
        }
        let response = Resp::decode(&mut bytes, version).map_err(codec_error)?;
        if bytes.has_remaining() {
            return Err(FetcherError::Decode("trailing bytes".into()));
        }
        Ok(response)
    }
}

/// An error of the `kafka-protocol` codecs.
fn codec_error(e: impl std::fmt::Display) -> FetcherError {
    FetcherError::Decode(e.to_string())
}

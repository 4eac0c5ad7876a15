//! One fetcher's connection to its source broker: a request, then its response, with the
//! `kafka-protocol` codecs; responses bounded in size, every call bounded in time.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Errors talking to the leader; the fetcher backs off and reconnects.
#[derive(Debug, thiserror::Error)]
pub enum FetcherError {
    #[error("no address known for broker {0}")]
    UnknownBroker(i32),
    #[error("i/o with the leader: {0}")]
    Io(#[from] std::io::Error),
    #[error("the leader did not answer within {0:?}")]
    Timeout(Duration),
    #[error("bad response: {0}")]
    Decode(String),
    #[error("response of {0} bytes exceeds the fetcher's bound")]
    TooLarge(usize),
}

pub(crate) struct LeaderConnection {
    stream: TcpStream,
    correlation_id: i32,
    response_max_bytes: usize,
}

impl LeaderConnection {
    pub(crate) async fn connect(
        addr: SocketAddr,
        response_max_bytes: usize,
        timeout: Duration,
    ) -> Result<LeaderConnection, FetcherError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| FetcherError::Timeout(timeout))??;
        stream.set_nodelay(true)?;
        Ok(LeaderConnection {
            stream,
            correlation_id: 0,
            response_max_bytes,
        })
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
        header.client_id = Some(StrBytes::from_static_str("streamforge-replica-fetcher"));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api_key.request_header_version(version))
            .map_err(codec_error)?;
        request.encode(&mut body, version).map_err(codec_error)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await?;
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

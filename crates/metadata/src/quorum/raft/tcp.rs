//! The Raft transport over TCP (the quorum listener): one length-prefixed JSON frame per RPC
//! and one per answer, on a connection each voter keeps open to each other voter. Voters find
//! each other through the address in their membership entry (`BasicNode::addr`), which is
//! what a static `--controller-quorum-voters 1@host:port,...` list becomes.
//!
//! Frames are bounded (`RPC_FRAME_BYTES_MAX`), every call has a deadline (`RPC_TIMEOUT_MS`) and
//! the listener serves at most `QUORUM_CONNECTIONS_MAX` connections at once.
//!
//! Connections are plain TCP unless a [`Transport`] secures them (the controller listener's
//! security protocol, see [`super::transport`]).
//!
//! The same listener answers two more RPCs next to Raft's: `Forward`, a controller event sent by
//! a broker that is not the active controller (see [`super::forward`]), and `Join`, an observer
//! asking to follow the log as a learner (see [`super::observer`]).

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::TypeConfig;
use super::forward::{ForwardSlot, Forwarded};
use super::observer::{JoinAnswer, JoinRequest};
use super::transport::{Accepted, QuorumStream, Transport, security_failure};
use crate::controller::Event;
use crate::quorum::NodeId;

/// Bound on one RPC frame (a snapshot chunk is at most openraft's 3 MiB, several times that
/// as JSON).
pub const RPC_FRAME_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Deadline of one RPC, connect included.
pub const RPC_TIMEOUT_MS: u64 = 5_000;
/// Bound on connections the quorum listener serves at once.
pub const QUORUM_CONNECTIONS_MAX: usize = 64;

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Request {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(Event),
    Join(JoinRequest),
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Response {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Forward(Forwarded),
    Join(JoinAnswer),
    /// The listener does not serve this connection (a plaintext peer on a TLS listener): why.
    Refused(String),
}

pub(super) async fn write_frame<T: Serialize>(
    stream: &mut (impl AsyncWrite + Unpin + ?Sized),
    value: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    if body.len() > RPC_FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "frame of {} bytes is too large",
            body.len()
        )));
    }
    // One write per frame: a separate 4-byte length write would wait for the peer's delayed
    // ACK under Nagle's algorithm (~40 ms per answer).
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await
}

pub(super) async fn read_frame<T: for<'de> Deserialize<'de>>(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
) -> std::io::Result<T> {
    let len = stream.read_u32().await? as usize;
    if len > RPC_FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes is too large"
        )));
    }
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// Read an answer; a [`Response::Refused`] is the listener refusing this connection's
/// security, an error.
pub(super) async fn read_response<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
) -> std::io::Result<Response> {
    match read_frame::<Response>(stream).await? {
        Response::Refused(why) => Err(security_failure(why)),
        response => Ok(response),
    }
}

/// Answer Raft RPCs arriving on `listener` with the local `raft`, and forwarded controller
/// events with the handler in `forward` (runs until aborted; aborting it closes every
/// connection it accepted too, so peers reconnect to whatever listens next, such as the same
/// voter restarted). Each connection is secured by `transport` first.
pub async fn serve(
    listener: TcpListener,
    raft: Raft<TypeConfig>,
    forward: ForwardSlot,
    transport: Transport,
) {
    let slots = Arc::new(Semaphore::new(QUORUM_CONNECTIONS_MAX));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next() => continue, // reap a closed connection
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "quorum listener accept");
                continue;
            }
        };
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, %peer, "quorum connection: TCP_NODELAY");
        }
        let raft = raft.clone();
        let forward = forward.clone();
        let transport = transport.clone();
        connections.spawn(async move {
            let _permit = permit;
            let Some(mut stream) = accept(&transport, tcp, peer).await else {
                return;
            };
            while let Ok(request) = read_frame::<Request>(&mut stream).await {
                let response = match request {
                    Request::Append(r) => Response::Append(raft.append_entries(r).await),
                    Request::Vote(r) => Response::Vote(raft.vote(r).await),
                    Request::Snapshot(r) => Response::Snapshot(raft.install_snapshot(r).await),
                    Request::Forward(event) => Response::Forward(forward.answer(event).await),
                    Request::Join(r) => {
                        Response::Join(super::observer::answer_join(&raft, r).await)
                    }
                };
                if let Err(error) = write_frame(&mut stream, &response).await {
                    tracing::debug!(%error, %peer, "quorum connection closed");
                    return;
                }
            }
        });
    }
}

/// The server side of the handshake on an accepted connection; `None` when it is not served
/// (the reason is logged, and a plaintext peer of a TLS listener is told).
async fn accept(
    transport: &Transport,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
) -> Option<QuorumStream> {
    let peer = peer.to_string();
    match transport.accept(tcp).await {
        Ok(Accepted::Stream(stream)) => Some(stream),
        Ok(Accepted::PlaintextPeer(mut tcp)) => {
            let why = format!(
                "the controller listener at the other end speaks {} and this connection is plaintext: \
                 its controller listener security protocol differs from this node's",
                transport.protocol_name()
            );
            let error = security_failure(format!(
                "a plaintext peer reached this {} controller listener: its controller listener security protocol is PLAINTEXT",
                transport.protocol_name()
            ));
            transport.report(&peer, "controller listener refused a connection", &error);
            // Best effort: the refusal is what the peer logs instead of a bare close. Its
            // request is read and dropped until it closes (bounded), as closing with unread
            // bytes would reset the connection and could discard the refusal before it is read.
            let refuse = async {
                write_frame(&mut tcp, &Response::Refused(why)).await?;
                tcp.shutdown().await?;
                let mut unread = (&mut tcp).take(RPC_FRAME_BYTES_MAX as u64);
                tokio::io::copy(&mut unread, &mut tokio::io::sink()).await
            };
            let _ = tokio::time::timeout(Duration::from_millis(RPC_TIMEOUT_MS), refuse).await;
            None
        }
        Err(error) => {
            transport.report(&peer, "controller listener refused a connection", &error);
            None
        }
    }
}

/// Connects to voters by their membership address, over `transport`.
#[derive(Debug, Clone, Default)]
pub struct TcpNetwork {
    pub transport: Transport,
}

/// One voter's connection to another, opened on first use and reopened after an error.
pub struct TcpConnection {
    target: NodeId,
    addr: String,
    transport: Transport,
    stream: Option<QuorumStream>,
}

impl std::fmt::Debug for TcpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpConnection")
            .field("target", &self.target)
            .field("addr", &self.addr)
            .field("connected", &self.stream.is_some())
            .finish()
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        TcpConnection {
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
            stream: None,
        }
    }
}

/// Why one call failed: the peer could not be reached, or the exchange broke.
enum CallError {
    Unreachable(std::io::Error),
    Broken(std::io::Error),
}

impl<E: std::error::Error> From<CallError> for RPCError<NodeId, BasicNode, E> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Broken(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

impl TcpConnection {
    /// One request and its response. Cancellation-safe: openraft wraps each call in its own
    /// timeout and drops this future when it expires, possibly after the request was written
    /// and before its response was read. The connection is therefore taken out for the
    /// exchange and put back only after a complete one; a dropped call closes it, so a later
    /// call can never read the response of an earlier request (a late AppendEntries success
    /// counted for a request with more entries would let a leader commit what no majority has).
    async fn call(&mut self, request: Request) -> Result<Response, CallError> {
        let deadline = Duration::from_millis(RPC_TIMEOUT_MS);
        let timed_out =
            || std::io::Error::new(std::io::ErrorKind::TimedOut, "quorum rpc timed out");
        let mut stream = match self.stream.take() {
            Some(stream) => stream,
            None => {
                let connect = tokio::time::timeout(deadline, self.transport.open(&self.addr));
                let stream = connect
                    .await
                    .map_err(|_| CallError::Unreachable(timed_out()))?;
                stream.map_err(|e| {
                    self.transport.report(&self.addr, "raft rpc", &e);
                    CallError::Unreachable(e)
                })?
            }
        };
        let exchange = async {
            write_frame(&mut stream, &request).await?;
            read_response(&mut stream).await
        };
        let result = match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        };
        let response = result.map_err(|e| {
            self.transport.report(&self.addr, "raft rpc", &e);
            CallError::Broken(e)
        })?;
        self.stream = Some(stream);
        Ok(response)
    }
}

fn unexpected() -> CallError {
    CallError::Broken(std::io::Error::other("answer of another kind"))
}

type Rpc<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

fn remote<E: std::error::Error>(to: NodeId) -> impl FnOnce(E) -> RPCError<NodeId, BasicNode, E> {
    move |e| RPCError::RemoteError(openraft::error::RemoteError::new(to, e))
}

impl RaftNetwork<TypeConfig> for TcpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        match self.call(Request::Append(rpc)).await? {
            Response::Append(r) => r.map_err(remote(self.target)),
            _ => Err(unexpected().into()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        match self.call(Request::Snapshot(rpc)).await? {
            Response::Snapshot(r) => r.map_err(remote(self.target)),
            _ => Err(unexpected().into()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        match self.call(Request::Vote(rpc)).await? {
            Response::Vote(r) => r.map_err(remote(self.target)),
            _ => Err(unexpected().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Vote;

    fn vote_request(term: u64) -> Request {
        Request::Vote(VoteRequest::new(Vote::new(term, 1), None))
    }

    #[tokio::test]
    async fn a_dropped_call_never_hands_its_response_to_the_next_one() {
        // A voter that answers each vote request 100 ms late, naming the request's term.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    while let Ok(Request::Vote(r)) = read_frame::<Request>(&mut stream).await {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let answer = Response::Vote(Ok(VoteResponse::new(r.vote, None, true)));
                        if write_frame(&mut stream, &answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let mut connection = TcpConnection {
            target: 2,
            addr,
            transport: Transport::default(),
            stream: None,
        };
        // Dropped after its request went out, before the answer: openraft's own timeout.
        let first =
            tokio::time::timeout(Duration::from_millis(30), connection.call(vote_request(1)));
        assert!(first.await.is_err(), "the first call is cut off");
        let Ok(Response::Vote(Ok(answer))) = connection.call(vote_request(2)).await else {
            panic!("the second call gets a vote answer");
        };
        assert_eq!(
            answer.vote.leader_id().term,
            2,
            "its own, not the first call's"
        );
    }
}

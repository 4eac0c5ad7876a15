//! The quorum listener over an injected transport: the same Raft, forward and join code runs
//! over it, and a peer speaking the other protocol is refused with a reason, not left hanging.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::forward::ForwardPool;
use super::tests::{FAST, agreed_leader, register, wait_until};
use super::transport::{
    Handshake, QuorumSecurity, QuorumStream, Transport, is_security_failure, security_failure,
};
use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A stand-in for TLS: the client opens with a TLS record's first byte, the server checks it.
struct Tagged;

impl QuorumSecurity for Tagged {
    fn protocol_name(&self) -> &'static str {
        "SSL"
    }
    fn is_tls(&self) -> bool {
        true
    }
    fn connect<'a>(&'a self, mut tcp: TcpStream, _addr: &'a str) -> Handshake<'a> {
        Box::pin(async move {
            tcp.write_all(&[0x16]).await?;
            Ok(Box::new(tcp) as QuorumStream)
        })
    }
    fn accept(&self, mut tcp: TcpStream) -> Handshake<'_> {
        Box::pin(async move {
            if tcp.read_u8().await? != 0x16 {
                return Err(security_failure("not tagged"));
            }
            Ok(Box::new(tcp) as QuorumStream)
        })
    }
}

fn tagged() -> Transport {
    Transport::new(Arc::new(Tagged))
}

async fn voters(
    transport: &Transport,
    dir: &std::path::Path,
    count: u64,
) -> (Vec<RaftQuorum>, BTreeMap<NodeId, String>) {
    let mut listeners = Vec::new();
    let mut addresses = BTreeMap::new();
    for id in 1..=count {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addresses.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push(listener);
    }
    let mut nodes = Vec::new();
    for (id, listener) in (1..=count).zip(listeners) {
        let dir = dir.join(id.to_string());
        let q = RaftQuorum::start_tcp_durable_over(id, FAST, listener, &dir, transport.clone());
        nodes.push(q.await.unwrap());
    }
    nodes[0]
        .initialize_with_addresses(&addresses)
        .await
        .unwrap();
    (nodes, addresses)
}

fn event() -> crate::controller::Event {
    crate::controller::Event::Tick
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_commit_over_an_injected_transport() {
    let dir = tempfile::tempdir().unwrap();
    let transport = tagged();
    let (nodes, addresses) = voters(&transport, dir.path(), 3).await;
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    let leader = agreed_leader(&all).await;
    let lead = &nodes[leader as usize - 1];
    wait_until("the leader is ready", || lead.is_ready_leader()).await;
    lead.propose(register(1)).unwrap();
    wait_until("the batch on every voter", || {
        nodes
            .iter()
            .all(|q| q.read_committed(0, 10).unwrap().len() == 1)
    })
    .await;
    // A forwarded event over the same transport gets an answer (no handler: NOT_CONTROLLER).
    let pool = ForwardPool::new(transport.clone());
    let answer = pool.forward(&addresses[&leader], event(), TIMEOUT).await;
    assert_eq!(answer.unwrap(), forward::Forwarded::not_controller());
    for q in &nodes {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_peer_of_a_tls_listener_is_told_why() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, addresses) = voters(&tagged(), dir.path(), 1).await;
    let plain = ForwardPool::default();
    let error = plain
        .forward(&addresses[&1], event(), TIMEOUT)
        .await
        .unwrap_err();
    assert!(is_security_failure(&error), "{error}");
    assert!(error.to_string().contains("speaks SSL"), "{error}");
    nodes[0].shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_peer_of_a_plaintext_listener_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, addresses) = voters(&Transport::default(), dir.path(), 1).await;
    let started = std::time::Instant::now();
    let result = ForwardPool::new(tagged())
        .forward(&addresses[&1], event(), TIMEOUT)
        .await;
    assert!(
        result.is_err(),
        "the plaintext listener closes the connection"
    );
    assert!(started.elapsed() < TIMEOUT, "closed, not left to time out");
    nodes[0].shutdown().await;
}

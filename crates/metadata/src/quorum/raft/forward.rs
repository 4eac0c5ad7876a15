//! Controller events forwarded to the active controller. A broker that is not the active
//! controller sends its BrokerRegistration, BrokerHeartbeat, AllocateProducerIds and admin
//! events as a `Forward` frame on the quorum listener (the TCP transport of the Raft RPCs);
//! the active controller answers once the records the event wrote have committed, with its
//! committed offset, so the sender can wait until its own copy of the log has applied them.
//!
//! A voter that is not the active controller answers NOT_CONTROLLER; the sender asks the new
//! leader. Every call is bounded by [`FORWARD_TIMEOUT_MS`]. Connections are kept in a
//! [`ForwardPool`] and reused (the listener serves any number of frames on one connection),
//! over the controller listener's [`Transport`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::tcp::{Request, Response, read_response, write_frame};
use super::transport::{QuorumStream, Transport, is_idle_open};
use crate::controller::{Event, WireReply};

/// Deadline of one forwarded event, connect and the controller's commit wait included.
pub const FORWARD_TIMEOUT_MS: u64 = 15_000;

/// The active controller's answer to a forwarded event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forwarded {
    pub reply: WireReply,
    /// The controller's committed offset once the reply's records committed (`-1`: nothing).
    pub committed_offset: i64,
}

impl Forwarded {
    pub fn not_controller() -> Forwarded {
        Forwarded {
            reply: WireReply::NotController,
            committed_offset: -1,
        }
    }
}

/// Handles forwarded events on this voter (the broker's metadata service).
pub trait ForwardHandler: Send + Sync + 'static {
    /// Blocking (it waits for the commit): runs on tokio's blocking pool.
    fn handle(&self, event: Event) -> Forwarded;
}

/// Where the listener finds the handler, set once the broker's metadata service exists.
#[derive(Clone, Default)]
pub struct ForwardSlot(Arc<OnceLock<Arc<dyn ForwardHandler>>>);

impl std::fmt::Debug for ForwardSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ForwardSlot")
            .field(&self.0.get().is_some())
            .finish()
    }
}

impl ForwardSlot {
    /// Install the handler (the first one stays).
    pub fn set(&self, handler: Arc<dyn ForwardHandler>) {
        if self.0.set(handler).is_err() {
            tracing::warn!("a forward handler is already installed");
        }
    }

    pub(super) async fn answer(&self, event: Event) -> Forwarded {
        let Some(handler) = self.0.get().cloned() else {
            return Forwarded::not_controller();
        };
        tokio::task::spawn_blocking(move || handler.handle(event))
            .await
            .unwrap_or_else(|_| Forwarded::not_controller())
    }
}

/// Idle connections kept per controller address. A broker forwards a heartbeat every
/// `broker.heartbeat.interval.ms` plus the admin requests it receives; one connection carries
/// one call at a time, so a few cover the concurrency seen in practice.
pub const FORWARD_IDLE_CONNECTIONS_MAX: usize = 4;
/// Controller addresses with idle connections kept (the voters, with room for a changed
/// membership); past it, the idle connections of another address are closed.
pub const FORWARD_ADDRESSES_MAX: usize = 16;

/// Connections to the active controller's quorum listener, reused across forwarded calls: a
/// call takes an idle connection (or opens one), and gives it back after a complete exchange.
/// A connection that failed is dropped; a call that failed on a reused connection (the peer
/// closed it, e.g. it restarted) is tried once more on a new one, as the caller would retry.
#[derive(Default)]
pub struct ForwardPool {
    idle: Mutex<HashMap<String, Vec<QuorumStream>>>,
    /// How connections are secured (the controller listener's security protocol).
    transport: Transport,
}

impl std::fmt::Debug for ForwardPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardPool")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl ForwardPool {
    /// A pool whose connections run over `transport`.
    pub fn new(transport: Transport) -> ForwardPool {
        ForwardPool {
            idle: Mutex::default(),
            transport,
        }
    }

    /// Send `event` to the controller listening at `addr` and wait for its answer, at most
    /// `timeout` (itself capped by [`FORWARD_TIMEOUT_MS`]).
    pub async fn forward(
        &self,
        addr: &str,
        event: Event,
        timeout: Duration,
    ) -> std::io::Result<Forwarded> {
        let timeout = timeout.min(Duration::from_millis(FORWARD_TIMEOUT_MS));
        let call = async {
            if let Some(stream) = self.take_idle(addr) {
                match exchange(stream, &event).await {
                    Ok((stream, answer)) => {
                        self.put_idle(addr, stream);
                        return Ok(answer);
                    }
                    Err(error) => {
                        tracing::debug!(%error, addr, "pooled controller connection failed");
                    }
                }
            }
            let stream = self.transport.open(addr).await?;
            let (stream, answer) = exchange(stream, &event).await?;
            self.put_idle(addr, stream);
            Ok(answer)
        };
        let call = async {
            let result = call.await;
            if let Err(error) = &result {
                self.transport
                    .report(addr, "forwarded controller event", error);
            }
            result
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "forwarded controller event timed out",
            )),
        }
    }

    /// Idle connections to `addr` right now.
    pub fn idle_count(&self, addr: &str) -> usize {
        self.idle.lock().get(addr).map_or(0, Vec::len)
    }

    /// An idle connection to `addr` that the peer has not closed.
    fn take_idle(&self, addr: &str) -> Option<QuorumStream> {
        let mut idle = self.idle.lock();
        let streams = idle.get_mut(addr)?;
        while let Some(mut stream) = streams.pop() {
            if is_idle_open(&mut stream) {
                return Some(stream);
            }
        }
        None
    }

    fn put_idle(&self, addr: &str, stream: QuorumStream) {
        let mut idle = self.idle.lock();
        if !idle.contains_key(addr) && idle.len() >= FORWARD_ADDRESSES_MAX {
            // Membership changed more than the bound allows: forget the address seen last
            // (any one will do; the next call to it reconnects).
            if let Some(other) = idle.keys().next().cloned() {
                idle.remove(&other);
            }
        }
        let streams = idle.entry(addr.to_string()).or_default();
        if streams.len() < FORWARD_IDLE_CONNECTIONS_MAX {
            streams.push(stream);
        }
        debug_assert!(idle.len() <= FORWARD_ADDRESSES_MAX);
    }
}

/// One request and its answer on `stream`, handed back for reuse with the answer.
async fn exchange(
    mut stream: QuorumStream,
    event: &Event,
) -> std::io::Result<(QuorumStream, Forwarded)> {
    write_frame(&mut stream, &Request::Forward(event.clone())).await?;
    match read_response(&mut stream).await? {
        Response::Forward(answer) => Ok((stream, answer)),
        _ => Err(std::io::Error::other("answer of another kind")),
    }
}

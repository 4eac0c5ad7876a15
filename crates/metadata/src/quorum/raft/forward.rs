//! Controller events forwarded to the active controller. A broker that is not the active
//! controller sends its BrokerRegistration, BrokerHeartbeat, AllocateProducerIds and admin
//! events as a `Forward` frame on the quorum listener (the TCP transport of the Raft RPCs);
//! the active controller answers once the records the event wrote have committed, with its
//! committed offset, so the sender can wait until its own copy of the log has applied them.
//!
//! A voter that is not the active controller answers NOT_CONTROLLER; the sender asks the new
//! leader. Every call is bounded by [`FORWARD_TIMEOUT_MS`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::tcp::{Request, Response, read_frame, write_frame};
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

/// Send `event` to the controller listening at `addr` and wait for its answer, at most
/// `timeout` (itself capped by [`FORWARD_TIMEOUT_MS`]).
pub async fn forward(addr: &str, event: Event, timeout: Duration) -> std::io::Result<Forwarded> {
    let call = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        write_frame(&mut stream, &Request::Forward(event)).await?;
        match read_frame::<Response>(&mut stream).await? {
            Response::Forward(answer) => Ok(answer),
            _ => Err(std::io::Error::other("answer of another kind")),
        }
    };
    let timeout = timeout.min(Duration::from_millis(FORWARD_TIMEOUT_MS));
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "forwarded controller event timed out",
        )),
    }
}

//! The broker's side of the metadata quorum: a [`MetadataNode`] (controller + committed image)
//! over the quorum, this broker's registration and heartbeats, and the one call admin requests
//! make: `request(event)`, which proposes what the controller writes and answers once it has
//! committed, with the delta the replica manager applies.
//!
//! A broker started without `--controller-quorum-voters` is a one-voter quorum of itself
//! ([`DurableQuorum`], persisted in `<data-dir>/__cluster_metadata-0`): the same controller, the
//! same records, the same deltas as a cluster; a proposal commits (fsynced) when it is made.
//! With voters it is one voter of a Raft quorum; what differs is in [`crate::metadata_cluster`]
//! (forwarding to the active controller, waiting for commits).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kafka_protocol::ResponseError;
use parking_lot::{Mutex, RwLock};
use streamforge_metadata::controller::{
    BrokerHeartbeat, BrokerRegistration, ControllerConfig, Event, ProducerIdBlock, Reply,
};
use streamforge_metadata::node::{MetadataNode, RequestId};
use streamforge_metadata::quorum::raft::RaftQuorum;
use streamforge_metadata::quorum::{DurableQuorum, MetadataQuorum};
use streamforge_metadata::records::{Endpoint, Record};
use streamforge_metadata::{MetadataDelta, MetadataImage};
use streamforge_protocol::clock::SharedClock;

use crate::metadata_cluster::{BrokerQuorum, ClusterOptions};

/// Kafka's name for the metadata log's directory.
pub const METADATA_DIR: &str = "__cluster_metadata-0";
/// Heartbeats at start-up until the controller unfences this broker (each one a poll).
const UNFENCE_ATTEMPTS_MAX: usize = 16;
/// Cluster mode: how long registration waits for a quorum to form and elect a controller
/// (the other voters may start after this one).
const REGISTRATION_WAIT_MS: u64 = 120_000;
/// A heartbeat is sent once a tick finds it due within a tenth of the interval.
const HEARTBEAT_EARLY_DIVISOR: u64 = 10;

/// Why the metadata service could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata: {0}")]
    Node(#[from] streamforge_metadata::node::NodeError),
    #[error("the controller refused: {0:?}")]
    Refused(ResponseError),
    #[error("metadata log: offset {offset} not applied here within {waited_ms} ms")]
    NotApplied { offset: i64, waited_ms: u64 },
}

/// The metadata node of this broker and its registration.
pub struct MetadataService {
    pub(crate) node_id: i32,
    pub(crate) node: Mutex<MetadataNode<BrokerQuorum>>,
    /// The committed image as of the last poll, for readers (handlers) without the node lock.
    pub(crate) image: RwLock<MetadataImage>,
    /// Cluster mode: this node's voter (the leader's address, commit notifications).
    pub(crate) raft: Option<RaftQuorum>,
    /// What committed since the replica manager last took it (every poll adds to it).
    pending: Mutex<MetadataDelta>,
    /// Cluster mode: replies a poll released, for the request waiting on each (bounded by
    /// `AWAITING_REPLIES_MAX` request ids).
    pub(crate) released: Mutex<BTreeMap<RequestId, Reply>>,
    pub(crate) clock: SharedClock,
    broker_epoch: AtomicI64,
    last_heartbeat_ms: AtomicU64,
    heartbeat_interval_ms: u64,
    pub(crate) next_request: AtomicU64,
}

/// Where the metadata service starts.
pub struct MetadataStart<'a> {
    pub data_dir: &'a Path,
    pub node_id: i32,
    pub controller: ControllerConfig,
    pub heartbeat_interval_ms: u64,
    /// `Some`: a voter of this static quorum; `None`: the one-voter quorum of itself.
    pub cluster: Option<&'a ClusterOptions>,
    pub clock: SharedClock,
}

impl MetadataService {
    /// Open the metadata log in `data_dir` (one voter) or join the cluster's quorum. When the
    /// one-voter log is empty, `import` gives the records of an earlier release's files,
    /// written once as the log's first batch.
    pub fn open(
        start: MetadataStart<'_>,
        import: impl FnOnce() -> std::io::Result<Vec<Record>>,
    ) -> Result<Arc<MetadataService>, MetadataError> {
        let (quorum, raft) = match start.cluster {
            None => (BrokerQuorum::Durable(open_durable(&start, import)?), None),
            Some(cluster) => {
                let dir = start.data_dir.join(METADATA_DIR);
                let raft = crate::metadata_cluster::start_member(start.node_id, cluster, &dir)?;
                (BrokerQuorum::Raft(raft.clone()), Some(raft))
            }
        };
        let mut node = MetadataNode::new(quorum, start.controller);
        let polled = node.poll(0)?;
        let image = node.image().clone();
        let service = Arc::new(MetadataService {
            node_id: start.node_id,
            node: Mutex::new(node),
            image: RwLock::new(image),
            raft,
            pending: Mutex::new(polled.delta),
            released: Mutex::new(BTreeMap::new()),
            clock: start.clock,
            broker_epoch: AtomicI64::new(-1),
            last_heartbeat_ms: AtomicU64::new(0),
            heartbeat_interval_ms: start.heartbeat_interval_ms,
            next_request: AtomicU64::new(1),
        });
        if let Some(raft) = &service.raft {
            let handler = crate::metadata_cluster::ForwardTo(Arc::downgrade(&service));
            raft.set_forward_handler(Arc::new(handler));
        }
        Ok(service)
    }

    /// Whether this broker is a member (voter or observer) of a multi-node quorum.
    pub fn is_cluster(&self) -> bool {
        self.raft.is_some()
    }

    /// What committed since the last call, for the replica manager (under its admin lock).
    pub fn take_pending(&self) -> MetadataDelta {
        std::mem::take(&mut *self.pending.lock())
    }

    /// The image to open the partitions from, with what committed before it dropped from the
    /// pending delta (the image holds it).
    pub fn image_for_open(&self) -> MetadataImage {
        let _node = self.node.lock();
        *self.pending.lock() = MetadataDelta::default();
        self.image()
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms().max(0) as u64
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The committed image (cheap: its parts are shared).
    pub fn image(&self) -> MetadataImage {
        self.image.read().clone()
    }

    /// The active controller, as the quorum knows it.
    pub fn controller_id(&self) -> Option<i32> {
        let node = self.node.lock();
        node.quorum().leader().leader.map(|id| id as i32)
    }

    /// The quorum's voters (with lag as the leader sees it) and its epoch.
    pub fn quorum_status(
        &self,
    ) -> (
        streamforge_metadata::quorum::LeaderAndEpoch,
        Vec<streamforge_metadata::quorum::VoterStatus>,
    ) {
        let node = self.node.lock();
        (node.quorum().leader(), node.quorum().voters())
    }

    /// The controller's `default.replication.factor`.
    pub fn default_replication_factor(&self) -> i16 {
        self.node
            .lock()
            .controller()
            .config()
            .default_replication_factor
    }

    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    /// Register this broker and heartbeat until it is unfenced. The incarnation id of the
    /// last registration is reused: the data-dir lock proves that process is gone, so this is
    /// a restart, not a duplicate. `previous_broker_epoch` is the epoch the clean-shutdown
    /// marker named (`NO_PREVIOUS_BROKER_EPOCH` without one): the controller trusts this
    /// broker's logs after a restart only when it is the epoch it last registered with.
    pub fn register(
        &self,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
        previous_broker_epoch: i64,
        now_ms: u64,
    ) -> Result<MetadataDelta, MetadataError> {
        let incarnation_id = self.image().broker(self.node_id).map_or_else(
            || uuid::Builder::from_random_bytes(rand::random()).into_uuid(),
            |b| b.incarnation_id,
        );
        let event = Event::BrokerRegistration(BrokerRegistration {
            broker_id: self.node_id,
            incarnation_id,
            endpoints,
            rack,
            previous_broker_epoch,
        });
        let (reply, mut delta) = self.request_within(event, now_ms, REGISTRATION_WAIT_MS)?;
        let epoch = match reply {
            Reply::BrokerRegistration(Ok(epoch)) => epoch,
            Reply::BrokerRegistration(Err(e)) => return Err(MetadataError::Refused(e)),
            _ => return Err(MetadataError::Refused(ResponseError::NotController)),
        };
        self.broker_epoch.store(epoch, Ordering::Relaxed);
        for _ in 0..UNFENCE_ATTEMPTS_MAX {
            let fenced = self.heartbeat(now_ms, REGISTRATION_WAIT_MS)?;
            delta.merge(self.take_pending());
            if !fenced {
                tracing::info!(
                    node_id = self.node_id,
                    broker_epoch = epoch,
                    "broker registered"
                );
                return Ok(delta);
            }
        }
        Err(MetadataError::Refused(ResponseError::BrokerNotAvailable))
    }

    /// One heartbeat; returns whether this broker is still fenced, and what committed.
    /// In cluster mode it waits at most `wait_ms` for a controller.
    /// One heartbeat; whether the controller has this broker fenced. What it replayed stays
    /// in the pending delta (for whoever holds the admin lock).
    fn heartbeat(&self, now_ms: u64, wait_ms: u64) -> Result<bool, MetadataError> {
        let metadata_offset = self.image.read().position().offset;
        let event = Event::BrokerHeartbeat(BrokerHeartbeat {
            broker_id: self.node_id,
            broker_epoch: self.broker_epoch(),
            metadata_offset,
            wants_fence: false,
            wants_shutdown: false,
        });
        self.last_heartbeat_ms.store(now_ms, Ordering::Relaxed);
        match self.reply_within(event, now_ms, wait_ms)? {
            Reply::BrokerHeartbeat(Ok(r)) => Ok(r.is_fenced),
            Reply::BrokerHeartbeat(Err(e)) => Err(MetadataError::Refused(e)),
            _ => Err(MetadataError::Refused(ResponseError::NotController)),
        }
    }

    /// Periodic work: a heartbeat every `broker.heartbeat.interval.ms`, then the controller's
    /// tick (fencing silent brokers, rebalancing). The tick runs right after this broker's own
    /// heartbeat, with the same time, so a stalled process never fences itself. Needs no admin
    /// lock (it waits for the controller's answer): what it replays stays in the pending delta.
    pub fn periodic(&self, now_ms: u64) -> Result<(), MetadataError> {
        let last = self.last_heartbeat_ms.load(Ordering::Relaxed);
        // The housekeeping tick that calls this runs every interval or more often, a few ms
        // early or late: a heartbeat that is nearly due goes now rather than a whole tick later.
        let early_ms = self.heartbeat_interval_ms / HEARTBEAT_EARLY_DIVISOR;
        if now_ms.saturating_sub(last) + early_ms < self.heartbeat_interval_ms {
            return Ok(());
        }
        // Heartbeats run on the housekeeping tick: without a controller, wait no longer than
        // until the next one is due.
        let wait_ms = self
            .heartbeat_interval_ms
            .min(crate::metadata_cluster::CONTROLLER_WAIT_MS);
        self.heartbeat(now_ms, wait_ms)?;
        let mut node = self.node.lock();
        // Only the active controller fences silent brokers (an inactive one writes nothing).
        if node.is_active() {
            node.tick(now_ms);
        }
        let replies = self.poll_locked(&mut node, now_ms)?;
        self.keep_released(replies);
        Ok(())
    }

    /// Controlled shutdown: the controller moves this broker's leaderships away and fences it.
    pub fn shut_down(&self, now_ms: u64) -> Result<MetadataDelta, MetadataError> {
        let event = Event::BrokerHeartbeat(BrokerHeartbeat {
            broker_id: self.node_id,
            broker_epoch: self.broker_epoch(),
            metadata_offset: self.image.read().position().offset,
            wants_fence: false,
            wants_shutdown: true,
        });
        let wait_ms = crate::metadata_cluster::SHUTDOWN_WAIT_MS;
        Ok(self.request_within(event, now_ms, wait_ms)?.1)
    }

    /// A block of producer ids for this broker (AllocateProducerIds).
    pub fn allocate_producer_ids(&self, now_ms: u64) -> Result<ProducerIdBlock, MetadataError> {
        let event = Event::AllocateProducerIds {
            broker_id: self.node_id,
            broker_epoch: self.broker_epoch(),
        };
        match self.request(event, now_ms)?.0 {
            Reply::AllocateProducerIds(Ok(block)) => Ok(block),
            Reply::AllocateProducerIds(Err(e)) => Err(MetadataError::Refused(e)),
            _ => Err(MetadataError::Refused(ResponseError::NotController)),
        }
    }

    /// Hand `event` to the controller; once what it wrote has committed, its reply and the
    /// delta of everything committed meanwhile. A reply that cannot commit is NOT_CONTROLLER.
    pub fn request(
        &self,
        event: Event,
        now_ms: u64,
    ) -> Result<(Reply, MetadataDelta), MetadataError> {
        self.request_within(event, now_ms, crate::metadata_cluster::CONTROLLER_WAIT_MS)
    }

    /// [`Self::request`], waiting at most `wait_ms` for a controller in cluster mode.
    fn request_within(
        &self,
        event: Event,
        now_ms: u64,
        wait_ms: u64,
    ) -> Result<(Reply, MetadataDelta), MetadataError> {
        let reply = self.reply_within(event, now_ms, wait_ms)?;
        Ok((reply, self.take_pending()))
    }

    /// [`Self::request_within`] leaving what it replayed in the pending delta (the caller
    /// takes and applies it under the replica manager's admin lock, in order).
    pub(crate) fn reply_within(
        &self,
        event: Event,
        now_ms: u64,
        wait_ms: u64,
    ) -> Result<Reply, MetadataError> {
        if let Some(raft) = &self.raft {
            return self.request_cluster(raft, event, wait_ms);
        }
        let id: RequestId = self.next_request.fetch_add(1, Ordering::Relaxed);
        let mut node = self.node.lock();
        let mut now = node.handle(id, event, now_ms);
        now.extend(self.poll_locked(&mut node, now_ms)?);
        drop(node);
        Ok(now
            .into_iter()
            .find(|(r, _)| *r == id)
            .map_or(Reply::NotController, |(_, reply)| reply))
    }

    /// Replay what committed (into the image and the pending delta); the replies released.
    pub(crate) fn poll_locked(
        &self,
        node: &mut MetadataNode<BrokerQuorum>,
        now_ms: u64,
    ) -> Result<Vec<(RequestId, Reply)>, MetadataError> {
        let polled = node.poll(now_ms)?;
        *self.image.write() = node.image().clone();
        if !polled.delta.is_empty() {
            self.pending.lock().merge(polled.delta);
        }
        Ok(polled.replies)
    }
}

/// The one-voter log in `<data-dir>/__cluster_metadata-0`, with an earlier release's registry
/// imported into an empty one.
fn open_durable(
    start: &MetadataStart<'_>,
    import: impl FnOnce() -> std::io::Result<Vec<Record>>,
) -> Result<DurableQuorum, MetadataError> {
    let quorum = DurableQuorum::open(start.node_id as u64, &start.data_dir.join(METADATA_DIR))?;
    if quorum.snapshot().position.offset < 0 {
        let records = import()?;
        if !records.is_empty() {
            tracing::info!(
                records = records.len(),
                "importing the topic registry of an earlier release"
            );
            quorum
                .propose(records)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
    }
    Ok(quorum)
}

/// Producer-id blocks from the controller, for InitProducerId.
pub struct ControllerBlocks {
    pub metadata: std::sync::Arc<MetadataService>,
    pub clock: streamforge_protocol::clock::SharedClock,
}

impl crate::producer_ids::ProducerIdBlocks for ControllerBlocks {
    fn next_block(&self) -> std::io::Result<(i64, i64)> {
        let now_ms = self.clock.now_ms().max(0) as u64;
        match self.metadata.allocate_producer_ids(now_ms) {
            Ok(block) => Ok((block.start, block.len)),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}

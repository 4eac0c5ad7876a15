//! The broker's side of the metadata quorum: a [`MetadataNode`] (controller + committed image)
//! over the quorum, this broker's registration and heartbeats, and the one call admin requests
//! make: `request(event)`, which proposes what the controller writes and answers once it has
//! committed, with the delta the replica manager applies.
//!
//! A broker started without `--controller-quorum-voters` is a one-voter quorum of itself
//! ([`DurableQuorum`], persisted in `<data-dir>/__cluster_metadata-0`): the same controller, the
//! same records, the same deltas as a cluster; a proposal commits (fsynced) when it is made.

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kafka_protocol::ResponseError;
use parking_lot::{Mutex, RwLock};
use streamforge_metadata::controller::{
    BrokerHeartbeat, BrokerRegistration, ControllerConfig, Event, ProducerIdBlock, Reply,
};
use streamforge_metadata::node::{MetadataNode, RequestId};
use streamforge_metadata::quorum::{DurableQuorum, MetadataQuorum};
use streamforge_metadata::records::{Endpoint, Record};
use streamforge_metadata::{MetadataDelta, MetadataImage};

/// Kafka's name for the metadata log's directory.
pub const METADATA_DIR: &str = "__cluster_metadata-0";
/// Heartbeats at start-up until the controller unfences this broker (each one a poll).
const UNFENCE_ATTEMPTS_MAX: usize = 16;

/// Why the metadata service could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata: {0}")]
    Node(#[from] streamforge_metadata::node::NodeError),
    #[error("the controller refused: {0:?}")]
    Refused(ResponseError),
}

/// The metadata node of this broker and its registration.
pub struct MetadataService {
    node_id: i32,
    node: Mutex<MetadataNode<DurableQuorum>>,
    /// The committed image as of the last poll, for readers (handlers) without the node lock.
    image: RwLock<MetadataImage>,
    broker_epoch: AtomicI64,
    last_heartbeat_ms: AtomicU64,
    heartbeat_interval_ms: u64,
    next_request: AtomicU64,
}

impl MetadataService {
    /// Open the metadata log in `data_dir`. When it is empty, `import` gives the records of an
    /// earlier release's files, written once as the log's first batch.
    pub fn open(
        data_dir: &Path,
        node_id: i32,
        controller: ControllerConfig,
        heartbeat_interval_ms: u64,
        import: impl FnOnce() -> std::io::Result<Vec<Record>>,
    ) -> Result<MetadataService, MetadataError> {
        let quorum = DurableQuorum::open(node_id as u64, &data_dir.join(METADATA_DIR))?;
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
        let mut node = MetadataNode::new(quorum, controller);
        node.poll(0)?;
        let image = node.image().clone();
        Ok(MetadataService {
            node_id,
            node: Mutex::new(node),
            image: RwLock::new(image),
            broker_epoch: AtomicI64::new(-1),
            last_heartbeat_ms: AtomicU64::new(0),
            heartbeat_interval_ms,
            next_request: AtomicU64::new(1),
        })
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
    /// a restart, not a duplicate.
    pub fn register(
        &self,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
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
        });
        let (reply, mut delta) = self.request(event, now_ms)?;
        let epoch = match reply {
            Reply::BrokerRegistration(Ok(epoch)) => epoch,
            Reply::BrokerRegistration(Err(e)) => return Err(MetadataError::Refused(e)),
            _ => return Err(MetadataError::Refused(ResponseError::NotController)),
        };
        self.broker_epoch.store(epoch, Ordering::Relaxed);
        for _ in 0..UNFENCE_ATTEMPTS_MAX {
            let (fenced, d) = self.heartbeat(now_ms)?;
            delta.merge(d);
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
    fn heartbeat(&self, now_ms: u64) -> Result<(bool, MetadataDelta), MetadataError> {
        let metadata_offset = self.image.read().position().offset;
        let event = Event::BrokerHeartbeat(BrokerHeartbeat {
            broker_id: self.node_id,
            broker_epoch: self.broker_epoch(),
            metadata_offset,
            wants_fence: false,
            wants_shutdown: false,
        });
        self.last_heartbeat_ms.store(now_ms, Ordering::Relaxed);
        let (reply, delta) = self.request(event, now_ms)?;
        match reply {
            Reply::BrokerHeartbeat(Ok(r)) => Ok((r.is_fenced, delta)),
            Reply::BrokerHeartbeat(Err(e)) => Err(MetadataError::Refused(e)),
            _ => Err(MetadataError::Refused(ResponseError::NotController)),
        }
    }

    /// Periodic work: a heartbeat every `broker.heartbeat.interval.ms`, then the controller's
    /// tick (fencing silent brokers, rebalancing). The tick runs right after this broker's own
    /// heartbeat, with the same time, so a stalled process never fences itself.
    pub fn periodic(&self, now_ms: u64) -> Result<MetadataDelta, MetadataError> {
        let last = self.last_heartbeat_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < self.heartbeat_interval_ms {
            return Ok(MetadataDelta::default());
        }
        let (_, mut delta) = self.heartbeat(now_ms)?;
        let mut node = self.node.lock();
        node.tick(now_ms);
        delta.merge(self.poll_locked(&mut node, now_ms)?.0);
        Ok(delta)
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
        Ok(self.request(event, now_ms)?.1)
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
        let id: RequestId = self.next_request.fetch_add(1, Ordering::Relaxed);
        let mut node = self.node.lock();
        let mut now = node.handle(id, event, now_ms);
        let (delta, replies) = self.poll_locked(&mut node, now_ms)?;
        now.extend(replies);
        let reply = now
            .into_iter()
            .find(|(r, _)| *r == id)
            .map_or(Reply::NotController, |(_, reply)| reply);
        Ok((reply, delta))
    }

    fn poll_locked(
        &self,
        node: &mut MetadataNode<DurableQuorum>,
        now_ms: u64,
    ) -> Result<(MetadataDelta, Vec<(RequestId, Reply)>), MetadataError> {
        let polled = node.poll(now_ms)?;
        *self.image.write() = node.image().clone();
        Ok((polled.delta, polled.replies))
    }
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

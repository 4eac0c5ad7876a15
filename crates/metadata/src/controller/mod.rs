//! The controller as a sans-io state machine: events and the current time in, records and a
//! reply out.
//!
//! Contract with the driver (the broker process, or the simulator):
//! - Feed every *committed* metadata record to [`Controller::replay`], in log order, on every
//!   node (active or not). That builds the committed image.
//! - When the quorum makes this node leader and it has replayed everything before its term,
//!   call [`Controller::activate`]; when it loses leadership, [`Controller::deactivate`].
//! - [`Controller::handle`] returns [`Effects`]: `records` must be proposed to the quorum as one
//!   atomic batch, and `reply` sent only after that batch is committed (if it never commits, the
//!   requester gets NOT_CONTROLLER and retries). An inactive controller writes nothing and
//!   answers [`Reply::NotController`].
//!
//! The active controller decides against its committed image plus the records it has emitted
//! and not yet seen committed, so back-to-back requests see each other (KRaft does the same).
//! Soft state, rebuilt on activation: broker session timers and the rebalance timer.

mod brokers;
mod election;
mod events;
mod partition_change;
mod placement;
mod reassign;
mod rebalance;
mod topics;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use rand::SeedableRng;
use rand::rngs::StdRng;

pub use events::*;
pub use placement::{Load, PlacementError, place_replicas};

use crate::delta::MetadataDelta;
use crate::image::{ApplyError, LogPosition, MetadataImage};
use crate::records::{BrokerId, Record};

/// `broker.session.timeout.ms` default (Kafka's is 9000): a dead broker's partitions get new
/// leaders within about this plus one heartbeat interval (the controller checks sessions at
/// its own heartbeat). Chosen from measurements, docs/METADATA.md "Failure detection".
pub const BROKER_SESSION_TIMEOUT_MS: u64 = 2_000;
/// `broker.heartbeat.interval.ms` default (Kafka's is 2000): four heartbeats per session.
pub const BROKER_HEARTBEAT_INTERVAL_MS: u64 = 500;
/// Kafka's `leader.imbalance.check.interval.seconds` default, in ms.
pub const LEADER_IMBALANCE_CHECK_INTERVAL_MS: u64 = 300_000;
/// `leader.imbalance.per.broker.percentage` default (Kafka's ZooKeeper controller's; its KRaft
/// controller has no such setting and behaves as 0).
pub const LEADER_IMBALANCE_PER_BROKER_PERCENTAGE: u32 = 10;
/// Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Bound on records emitted and not yet replayed; past it, requests wait (NOT_CONTROLLER-free
/// back-pressure is the driver's job; the controller asserts the bound).
pub const PENDING_RECORDS_MAX: usize = 100_000;
/// The topic config that allows electing a leader outside the ISR.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// The topic config below which the ISR keeps eligible leader replicas (KIP-966).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Unclean leader elections this controller decided, by topic (Kafka's
/// `UncleanLeaderElectionsPerSec`).
pub const UNCLEAN_LEADER_ELECTIONS_METRIC: &str = "streamforge_unclean_leader_elections_total";

/// Controller settings (Kafka's names, units last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    pub broker_session_timeout_ms: u64,
    pub default_num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_ms: u64,
    /// A broker gets its preferred leaderships back only when more than this share (in
    /// percent) of them is led elsewhere.
    pub leader_imbalance_per_broker_percentage: u32,
    /// The cluster-wide default of `unclean.leader.election.enable`.
    pub unclean_leader_election_enable: bool,
    /// The cluster-wide default of `min.insync.replicas` (the broker's).
    pub min_insync_replicas: i32,
    pub producer_id_block_size: i64,
    /// Seeds topic-id generation (mixed with the quorum epoch and offset at each activation,
    /// so ids differ across activations). Random by default; fixed in simulations.
    pub id_seed: u64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            broker_session_timeout_ms: BROKER_SESSION_TIMEOUT_MS,
            default_num_partitions: 1,
            default_replication_factor: 1,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: LEADER_IMBALANCE_CHECK_INTERVAL_MS,
            leader_imbalance_per_broker_percentage: LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
            unclean_leader_election_enable: false,
            min_insync_replicas: 1,
            producer_id_block_size: PRODUCER_ID_BLOCK_SIZE,
            id_seed: rand::random(),
        }
    }
}

/// What one event produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Effects {
    /// To propose, in order, as one batch.
    pub records: Vec<Record>,
    /// To send once `records` are committed.
    pub reply: Option<Reply>,
}

/// The controller of one quorum node.
#[derive(Debug)]
pub struct Controller {
    config: ControllerConfig,
    /// Replayed committed records.
    committed: MetadataImage,
    /// `committed` plus `pending`, what the active controller decides against.
    image: MetadataImage,
    /// Records emitted while active and not yet replayed, oldest first.
    pending: VecDeque<Record>,
    /// `Some(quorum epoch)` while active.
    active_epoch: Option<i32>,
    /// Last heartbeat (or registration, or activation) per broker.
    last_contact_ms: BTreeMap<BrokerId, u64>,
    /// The committed offset of each broker's latest registration: it is caught up past it.
    registered_at: BTreeMap<BrokerId, i64>,
    last_rebalance_ms: u64,
    rng: StdRng,
    /// Unclean elections decided while active (also counted in
    /// [`UNCLEAN_LEADER_ELECTIONS_METRIC`]).
    unclean_elections: u64,
}

impl Controller {
    pub fn new(config: ControllerConfig) -> Controller {
        let rng = StdRng::seed_from_u64(config.id_seed);
        Controller {
            config,
            committed: MetadataImage::empty(),
            image: MetadataImage::empty(),
            pending: VecDeque::new(),
            active_epoch: None,
            last_contact_ms: BTreeMap::new(),
            registered_at: BTreeMap::new(),
            last_rebalance_ms: 0,
            rng,
            unclean_elections: 0,
        }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }
    /// The image the controller decides against (committed plus its own pending records); an
    /// inactive controller decides nothing, so that is the committed image.
    pub fn image(&self) -> &MetadataImage {
        if self.is_active() {
            &self.image
        } else {
            &self.committed
        }
    }
    pub fn committed(&self) -> &MetadataImage {
        &self.committed
    }
    pub fn is_active(&self) -> bool {
        self.active_epoch.is_some()
    }
    /// Unclean leader elections this controller has decided (a leader from outside the ISR
    /// and the ELR: records may have been lost).
    pub fn unclean_elections(&self) -> u64 {
        self.unclean_elections
    }

    /// This node leads the quorum at `epoch`: start deciding. Every registered broker gets a
    /// fresh session, as KRaft gives them after a controller failover.
    pub fn activate(&mut self, epoch: i32, now_ms: u64) {
        self.active_epoch = Some(epoch);
        self.pending.clear();
        self.image = self.committed.clone();
        self.last_contact_ms = self
            .image
            .brokers()
            .keys()
            .map(|&id| (id, now_ms))
            .collect();
        self.last_rebalance_ms = now_ms;
        let offset = self.committed.position().offset as u64;
        let seed = self.config.id_seed ^ (u64::from(epoch as u32) << 32) ^ offset.rotate_left(17);
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// This node no longer leads: forget uncommitted decisions.
    pub fn deactivate(&mut self) {
        self.active_epoch = None;
        self.pending.clear();
        self.image = self.committed.clone();
    }

    /// Start over from a snapshot of the committed log (a node too far behind the retained
    /// log). Every broker counts as registered at the snapshot's offset.
    pub fn load_snapshot(&mut self, image: MetadataImage) {
        let offset = image.position().offset;
        self.registered_at = image.brokers().keys().map(|&id| (id, offset)).collect();
        self.committed = image;
        self.deactivate();
    }

    /// Apply one committed record (on every node, in log order).
    pub fn replay(
        &mut self,
        record: &Record,
        at: LogPosition,
    ) -> Result<MetadataDelta, ApplyError> {
        // In place: an inactive node replays the whole log at start-up, and copying the image's
        // maps per record made that grow with topics x records.
        let mut delta = MetadataDelta::default();
        self.committed.apply_mut(record, at, &mut delta)?;
        if let Record::RegisterBroker(r) = record {
            self.registered_at.insert(r.broker_id, at.offset);
        }
        if self.active_epoch.is_some() && self.pending.front() == Some(record) {
            self.pending.pop_front();
            if self.pending.is_empty() {
                self.image = self.committed.clone();
            }
        } else if self.active_epoch.is_some() {
            // A record another leader wrote: the committed log wins.
            self.pending.clear();
            self.image = self.committed.clone();
        } else {
            // Inactive: nothing is decided against `image`; `activate` starts it from the
            // committed image (not keeping it in step here keeps the replay in place).
            self.pending.clear();
        }
        Ok(delta)
    }

    /// React to one event at `now_ms`.
    pub fn handle(&mut self, event: Event, now_ms: u64) -> Effects {
        let mut fx = Effects::default();
        if !self.is_active() {
            if event != Event::Tick {
                fx.reply = Some(Reply::NotController);
            }
            return fx;
        }
        let reply = match event {
            Event::BrokerRegistration(r) => Some(self.register(r, now_ms, &mut fx)),
            Event::BrokerHeartbeat(h) => Some(self.heartbeat(h, now_ms, &mut fx)),
            Event::CreateTopics {
                topics,
                validate_only,
            } => Some(self.create_topics(topics, validate_only, &mut fx)),
            Event::CreatePartitions(c) => Some(self.create_partitions(c, &mut fx)),
            Event::DeleteTopics(t) => Some(self.delete_topics(t, &mut fx)),
            Event::AlterConfigs(c) => Some(self.alter_configs(c, &mut fx)),
            Event::AllocateProducerIds {
                broker_id,
                broker_epoch,
            } => Some(self.allocate_producer_ids(broker_id, broker_epoch, &mut fx)),
            Event::ElectLeaders {
                election,
                partitions,
            } => Some(self.elect_leaders(election, partitions, &mut fx)),
            Event::AlterPartition(a) => Some(self.alter_partition(a, &mut fx)),
            Event::AlterPartitionReassignments {
                partitions,
                allow_replication_factor_change,
            } => {
                Some(self.alter_reassignments(partitions, allow_replication_factor_change, &mut fx))
            }
            Event::ListPartitionReassignments(topics) => {
                Some(self.list_reassignments(topics.as_deref()))
            }
            Event::Tick => {
                self.tick(now_ms, &mut fx);
                None
            }
        };
        fx.reply = reply;
        fx
    }

    /// Emit a record: apply it to the deciding image and queue it for the quorum.
    fn emit(&mut self, record: Record, fx: &mut Effects) {
        assert!(
            self.pending.len() < PENDING_RECORDS_MAX,
            "too many uncommitted records"
        );
        let at = LogPosition {
            offset: self.image.position().offset + 1,
            epoch: self.active_epoch.unwrap_or_default(),
        };
        // The controller validates before it writes; a record that does not apply is a bug here,
        // and writing it would stop every replica of the log.
        let (image, _) = self
            .image
            .apply(&record, at)
            .unwrap_or_else(|e| panic!("controller wrote a record that does not apply: {e}"));
        self.image = image;
        self.pending.push_back(record.clone());
        fx.records.push(record);
    }

    fn unclean_allowed(&self, topic: &str) -> bool {
        match self
            .image
            .topic_config(topic, UNCLEAN_LEADER_ELECTION_ENABLE)
        {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => self.config.unclean_leader_election_enable,
        }
    }
}

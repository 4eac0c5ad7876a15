//! The simulated cluster: three combined nodes (a quorum voter with its controller, and a
//! broker) plus an admin client, talking over a lossy, delaying, partitionable network, all
//! stepped by one seeded random generator.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::ResponseError;
use rand::Rng;
use rand::rngs::StdRng;
use streamforge_metadata::controller::{
    AlterPartition, BrokerHeartbeat, BrokerRegistration, ControllerConfig, CreatePartitions,
    CreateTopic, ElectionType, Event, MIN_INSYNC_REPLICAS, NO_PREVIOUS_BROKER_EPOCH, Reply,
    TopicRef, UNCLEAN_LEADER_ELECTION_ENABLE,
};
use streamforge_metadata::node::{MetadataNode, RequestId};
use streamforge_metadata::quorum::{MetadataQuorum, NodeId};
use streamforge_metadata::{BrokerId, MetadataImage};
use uuid::Uuid;

use crate::model::{Model, SimQuorum};

pub const STEP_MS: u64 = 50;
pub const SESSION_TIMEOUT_MS: u64 = 3000;
pub const HEARTBEAT_INTERVAL_MS: u64 = 500;
/// A request without an answer after this long is given up (and retried as the broker sees fit).
const REQUEST_TIMEOUT_MS: u64 = 2000;
const DELAY_MAX_MS: u64 = 200;
/// The admin client's address on the simulated network.
const ADMIN: NodeId = 0;

#[derive(Debug, Clone)]
enum Body {
    Request(RequestId, Event),
    Response(RequestId, Reply),
}

#[derive(Debug)]
struct Message {
    to: NodeId,
    from: NodeId,
    deliver_at_ms: u64,
    body: Body,
}

/// A broker's side of one node.
#[derive(Debug, Default)]
struct Broker {
    epoch: Option<i64>,
    incarnation: u128,
    /// What the clean-shutdown marker said at this process's start.
    previous_broker_epoch: i64,
    registering: bool,
    next_heartbeat_ms: u64,
    next_isr_check_ms: u64,
    wants_shutdown: bool,
}

/// What the simulator tallies for its invariants and its sanity checks.
#[derive(Debug, Default)]
pub struct Tally {
    pub producer_blocks: Vec<(i64, i64)>,
    pub topics_acknowledged: BTreeSet<Uuid>,
    pub replies: u64,
    pub crashes: u64,
    /// Whole-cluster power losses: every node down at once, every page cache gone.
    pub power_losses: u64,
    /// Processes that started without a clean-shutdown marker: their logs may have lost
    /// anything (the checker treats their replicas as possibly empty until they rejoin an ISR).
    pub unclean_incarnations: BTreeSet<Uuid>,
}

pub struct Cluster {
    pub rng: StdRng,
    pub now_ms: u64,
    pub model: Rc<RefCell<Model>>,
    commit_at: Rc<RefCell<u64>>,
    pub nodes: Vec<Option<MetadataNode<SimQuorum>>>,
    brokers: Vec<Broker>,
    /// Per node: the clean-shutdown marker on its disk (the epoch of a controlled shutdown).
    markers: Vec<Option<i64>>,
    down_until_ms: Vec<u64>,
    net: Vec<Message>,
    in_flight: BTreeMap<RequestId, (NodeId, u64, &'static str)>,
    next_request: RequestId,
    pub tally: Tally,
    pub loss_ratio: (u32, u32),
    topic_counter: u32,
}

fn config(seed: u64, id: NodeId) -> ControllerConfig {
    ControllerConfig {
        broker_session_timeout_ms: SESSION_TIMEOUT_MS,
        leader_imbalance_check_interval_ms: 5000,
        id_seed: seed.wrapping_mul(31).wrapping_add(id),
        ..ControllerConfig::default()
    }
}

impl Cluster {
    pub fn new(seed: u64, rng: StdRng) -> Cluster {
        let model = Model::new(3);
        let commit_at = Rc::new(RefCell::new(0));
        let mut c = Cluster {
            rng,
            now_ms: 0,
            model,
            commit_at,
            nodes: Vec::new(),
            brokers: (0..3).map(|_| Broker::default()).collect(),
            markers: vec![None; 3],
            down_until_ms: vec![0; 3],
            net: Vec::new(),
            in_flight: BTreeMap::new(),
            next_request: 1,
            tally: Tally::default(),
            loss_ratio: (1, 20),
            topic_counter: 0,
        };
        for id in 1..=3 {
            let node = c.fresh_node(seed, id);
            c.nodes.push(Some(node));
        }
        c
    }

    fn fresh_node(&mut self, seed: u64, id: NodeId) -> MetadataNode<SimQuorum> {
        let q = SimQuorum {
            id,
            model: self.model.clone(),
            commit_delay_ms: self.commit_at.clone(),
        };
        let incarnation = u128::from(id) << 64 | u128::from(self.now_ms);
        let marker = self.markers[id as usize - 1].take();
        if marker.is_none() {
            self.tally
                .unclean_incarnations
                .insert(Uuid::from_u128(incarnation));
        }
        self.brokers[id as usize - 1] = Broker {
            incarnation,
            previous_broker_epoch: marker.unwrap_or(NO_PREVIOUS_BROKER_EPOCH),
            ..Broker::default()
        };
        MetadataNode::new(q, config(seed, id))
    }

    pub fn image(&self, id: NodeId) -> Option<&MetadataImage> {
        self.nodes[id as usize - 1].as_ref().map(|n| n.image())
    }

    fn send(&mut self, from: NodeId, to: NodeId, body: Body) {
        let (num, den) = self.loss_ratio;
        if self.rng.random_ratio(num, den) {
            return;
        }
        let deliver_at_ms = self.now_ms + self.rng.random_range(1..=DELAY_MAX_MS);
        self.net.push(Message {
            to,
            from,
            deliver_at_ms,
            body,
        });
    }

    fn link_up(&self, a: NodeId, b: NodeId) -> bool {
        a == ADMIN || b == ADMIN || self.model.borrow().connected(a, b)
    }

    /// Send `event` to the controller `from` believes in (or a random node).
    fn request(&mut self, from: NodeId, event: Event, kind: &'static str) {
        let believed = if from == ADMIN {
            None
        } else {
            self.believed_leader(from)
        };
        let to = believed.unwrap_or_else(|| self.rng.random_range(1..=3));
        let id = self.next_request;
        self.next_request += 1;
        self.in_flight.insert(id, (from, self.now_ms, kind));
        self.send(from, to, Body::Request(id, event));
    }

    fn believed_leader(&self, id: NodeId) -> Option<NodeId> {
        self.nodes[id as usize - 1]
            .as_ref()?
            .quorum()
            .leader()
            .leader
    }

    /// One simulated step: faults, quorum, deliveries, node polls, broker and admin actions.
    pub fn step(&mut self, seed: u64, faults: bool) {
        self.now_ms += STEP_MS;
        *self.commit_at.borrow_mut() = self.now_ms + self.rng.random_range(0..=2 * STEP_MS);
        if faults {
            self.inject_faults();
        }
        self.restart_due(seed);
        let now = self.now_ms;
        self.model.borrow_mut().step(now, &mut self.rng);
        self.deliver();
        for id in 1..=3 {
            self.poll_node(id);
            self.broker_actions(id);
        }
        if self.rng.random_ratio(1, 30) {
            self.admin_action();
        }
        let timeout = REQUEST_TIMEOUT_MS;
        self.in_flight
            .retain(|_, (_, sent, _)| now - *sent < timeout);
        for (i, b) in self.brokers.iter_mut().enumerate() {
            let origin = i as NodeId + 1;
            let waiting = self
                .in_flight
                .values()
                .any(|(o, _, k)| *o == origin && *k == "register");
            if b.registering && !waiting {
                b.registering = false;
            }
        }
    }

    fn inject_faults(&mut self) {
        let id: NodeId = self.rng.random_range(1..=3);
        if self.rng.random_ratio(1, 150) {
            // Cut one node off from the others for a while.
            let mut m = self.model.borrow_mut();
            for other in 1..=3 {
                if other != id {
                    m.cut.insert((id.min(other), id.max(other)));
                }
            }
        }
        if self.rng.random_ratio(1, 40) {
            self.model.borrow_mut().cut.clear();
        }
        if self.rng.random_ratio(1, 300) && self.nodes[id as usize - 1].is_some() {
            let down_ms = self.rng.random_range(1000..5000);
            self.crash(id, down_ms);
        }
        if self.rng.random_ratio(1, 400) {
            self.brokers[id as usize - 1].wants_shutdown = true;
        }
        if self.rng.random_ratio(1, 1200) {
            // Power loss: every node at once, no marker anywhere.
            self.tally.power_losses += 1;
            for id in 1..=3 {
                if self.nodes[id as usize - 1].is_some() {
                    let down_ms = self.rng.random_range(500..4000);
                    self.crash(id, down_ms);
                }
            }
        }
    }

    fn crash(&mut self, id: NodeId, down_ms: u64) {
        self.nodes[id as usize - 1] = None;
        self.model.borrow_mut().alive[id as usize - 1] = false;
        self.down_until_ms[id as usize - 1] = self.now_ms + down_ms;
        self.tally.crashes += 1;
        self.markers[id as usize - 1] = None;
        // A restarted process does not hear answers to the old one's requests.
        self.in_flight.retain(|_, (origin, _, _)| *origin != id);
    }

    fn restart_due(&mut self, seed: u64) {
        for id in 1..=3u64 {
            let i = id as usize - 1;
            if self.nodes[i].is_none() && self.now_ms >= self.down_until_ms[i] {
                self.model.borrow_mut().restart(id);
                let node = self.fresh_node(seed, id);
                self.nodes[i] = Some(node);
            }
        }
    }

    fn deliver(&mut self) {
        let now = self.now_ms;
        let (due, later): (Vec<Message>, Vec<Message>) = std::mem::take(&mut self.net)
            .into_iter()
            .partition(|m| m.deliver_at_ms <= now);
        self.net = later;
        for m in due {
            if !self.link_up(m.from, m.to) {
                continue;
            }
            match m.body {
                Body::Request(id, event) => {
                    let Some(node) = self.nodes[m.to as usize - 1].as_mut() else {
                        continue;
                    };
                    for (rid, reply) in node.handle(id, event, now) {
                        self.send(m.to, m.from, Body::Response(rid, reply));
                    }
                }
                Body::Response(id, reply) => self.on_reply(m.to, id, reply),
            }
        }
    }

    fn poll_node(&mut self, id: NodeId) {
        let now = self.now_ms;
        let Some(node) = self.nodes[id as usize - 1].as_mut() else {
            return;
        };
        let polled = node
            .poll(now)
            .unwrap_or_else(|e| panic!("node {id} poll: {e}"));
        node.tick(now);
        for (rid, reply) in polled.replies {
            if let Some(&(origin, _, _)) = self.in_flight.get(&rid) {
                self.send(id, origin, Body::Response(rid, reply));
            }
        }
    }

    fn on_reply(&mut self, to: NodeId, id: RequestId, reply: Reply) {
        if self.in_flight.remove(&id).is_none() {
            return; // timed out already
        }
        self.tally.replies += 1;
        if to == ADMIN {
            if let Reply::CreateTopics(results) = &reply {
                for (_, r) in results {
                    if let Ok(created) = r {
                        self.tally.topics_acknowledged.insert(created.topic_id);
                    }
                }
            }
            return;
        }
        let b = &mut self.brokers[to as usize - 1];
        match reply {
            Reply::BrokerRegistration(Ok(epoch)) => {
                b.epoch = Some(epoch);
                b.registering = false;
            }
            Reply::BrokerRegistration(Err(_)) => b.registering = false,
            // Controlled shutdown done: the process exits, and comes back later.
            Reply::BrokerHeartbeat(Ok(hb)) if hb.should_shut_down => {
                let epoch = b.epoch;
                self.crash(to, 1500);
                // Its logs closed: the next process finds the marker with this epoch.
                self.markers[to as usize - 1] = epoch;
            }
            Reply::BrokerHeartbeat(Err(ResponseError::StaleBrokerEpoch)) => b.epoch = None,
            Reply::AllocateProducerIds(Ok(block)) => {
                self.tally
                    .producer_blocks
                    .push((block.start, block.start + block.len));
            }
            _ => {}
        }
    }

    fn broker_actions(&mut self, id: NodeId) {
        let now = self.now_ms;
        let i = id as usize - 1;
        let Some(node) = self.nodes[i].as_ref() else {
            return;
        };
        let offset = node.image().position().offset;
        let b = &mut self.brokers[i];
        let Some(epoch) = b.epoch else {
            if !b.registering {
                b.registering = true;
                let reg = BrokerRegistration {
                    broker_id: id as BrokerId,
                    incarnation_id: Uuid::from_u128(b.incarnation),
                    endpoints: vec![],
                    rack: Some(format!("rack-{}", id % 2)),
                    previous_broker_epoch: b.previous_broker_epoch,
                };
                self.request(id, Event::BrokerRegistration(reg), "register");
            }
            return;
        };
        if now >= b.next_heartbeat_ms {
            b.next_heartbeat_ms = now + HEARTBEAT_INTERVAL_MS;
            let hb = BrokerHeartbeat {
                broker_id: id as BrokerId,
                broker_epoch: epoch,
                metadata_offset: offset,
                wants_fence: false,
                wants_shutdown: b.wants_shutdown,
            };
            self.request(id, Event::BrokerHeartbeat(hb), "heartbeat");
        }
        let b = &mut self.brokers[i];
        if now >= b.next_isr_check_ms {
            b.next_isr_check_ms = now + 700;
            self.leader_isr_changes(id, epoch);
        }
        if self.rng.random_ratio(1, 100) {
            let e = Event::AllocateProducerIds {
                broker_id: id as BrokerId,
                broker_epoch: epoch,
            };
            self.request(id, e, "producer-ids");
        }
    }

    /// As a partition leader: take caught-up (unfenced) replicas back into the ISR, and now
    /// and then drop a follower as if it lagged.
    fn leader_isr_changes(&mut self, id: NodeId, epoch: i64) {
        let Some(image) = self.image(id).cloned() else {
            return;
        };
        let me = id as BrokerId;
        for topic in image.topics() {
            for (&partition, p) in &topic.partitions {
                if p.leader != me {
                    continue;
                }
                let mut isr: Vec<BrokerId> = p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|&r| r == me || image.is_unfenced(r))
                    .collect();
                if self.rng.random_ratio(1, 5) && isr.len() > 1 {
                    let drop = isr[self.rng.random_range(0..isr.len())];
                    isr.retain(|&r| r != drop || r == me);
                }
                if isr == p.isr {
                    continue;
                }
                let a = AlterPartition {
                    broker_id: me,
                    broker_epoch: epoch,
                    topic_id: topic.id,
                    partition,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr: isr,
                };
                self.request(id, Event::AlterPartition(a), "alter-partition");
            }
        }
    }

    fn admin_action(&mut self) {
        let names: Vec<String> = (1..=3)
            .filter_map(|id| self.image(id))
            .flat_map(|i| i.topics().map(|t| t.name.clone()).collect::<Vec<_>>())
            .collect();
        let event = match self.rng.random_range(0..10) {
            0..=4 => {
                self.topic_counter += 1;
                let mut configs = BTreeMap::new();
                if self.rng.random_ratio(1, 4) {
                    configs.insert(
                        UNCLEAN_LEADER_ELECTION_ENABLE.to_string(),
                        "true".to_string(),
                    );
                }
                if self.rng.random_ratio(1, 2) {
                    let min_isr = self.rng.random_range(1..=3).to_string();
                    configs.insert(MIN_INSYNC_REPLICAS.to_string(), min_isr);
                }
                let topic = CreateTopic {
                    name: format!("t{}", self.topic_counter),
                    num_partitions: self.rng.random_range(1..=4),
                    replication_factor: self.rng.random_range(1..=3),
                    assignment: BTreeMap::new(),
                    configs,
                };
                Event::CreateTopics {
                    topics: vec![topic],
                    validate_only: false,
                }
            }
            5 if !names.is_empty() => {
                let name = names[self.rng.random_range(0..names.len())].clone();
                Event::DeleteTopics(vec![TopicRef::Name(name)])
            }
            6 if !names.is_empty() => {
                let topic = names[self.rng.random_range(0..names.len())].clone();
                Event::CreatePartitions(vec![CreatePartitions {
                    topic,
                    count: 6,
                    assignment: None,
                }])
            }
            _ => Event::ElectLeaders {
                election: ElectionType::Preferred,
                partitions: None,
            },
        };
        self.request(ADMIN, event, "admin");
    }
}

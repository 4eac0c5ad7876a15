//! One named test per controller rule. The harness commits every emitted batch at once, so
//! each test sees the controller exactly as a driver with an instant quorum would.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::*;

mod brokers;
mod elr;
mod partitions;
mod reassign;
mod rebalance;
mod topics;
use crate::image::{LogPosition, PartitionState};
use crate::records::Endpoint;

pub(super) const TIMEOUT: u64 = BROKER_SESSION_TIMEOUT_MS;

pub(super) struct Harness {
    pub(super) c: Controller,
    pub(super) epochs: BTreeMap<BrokerId, i64>,
}

impl Harness {
    pub(super) fn new(config: ControllerConfig) -> Harness {
        let mut c = Controller::new(config);
        c.activate(1, 0);
        Harness {
            c,
            epochs: BTreeMap::new(),
        }
    }

    /// Handle and commit.
    pub(super) fn run(&mut self, event: Event, now_ms: u64) -> Option<Reply> {
        let fx = self.c.handle(event, now_ms);
        for r in &fx.records {
            let at = LogPosition {
                offset: self.c.committed().position().offset + 1,
                epoch: 1,
            };
            self.c.replay(r, at).unwrap();
        }
        assert_eq!(
            self.c.image(),
            self.c.committed(),
            "pending left after commit"
        );
        fx.reply
    }

    pub(super) fn register(&mut self, id: BrokerId, rack: Option<&str>, now_ms: u64) {
        let reg = BrokerRegistration {
            broker_id: id,
            incarnation_id: Uuid::from_u128(id as u128 + 1000),
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
            }],
            rack: rack.map(str::to_string),
            previous_broker_epoch: -1,
        };
        let Some(Reply::BrokerRegistration(Ok(epoch))) =
            self.run(Event::BrokerRegistration(reg), now_ms)
        else {
            panic!("registration of {id} failed");
        };
        self.epochs.insert(id, epoch);
        self.heartbeat(id, now_ms);
    }

    pub(super) fn heartbeat_with(
        &mut self,
        id: BrokerId,
        now_ms: u64,
        wants_shutdown: bool,
    ) -> HeartbeatReply {
        let hb = BrokerHeartbeat {
            broker_id: id,
            broker_epoch: self.epochs[&id],
            metadata_offset: self.c.committed().position().offset,
            wants_fence: false,
            wants_shutdown,
        };
        match self.run(Event::BrokerHeartbeat(hb), now_ms) {
            Some(Reply::BrokerHeartbeat(Ok(r))) => r,
            other => panic!("heartbeat of {id}: {other:?}"),
        }
    }

    pub(super) fn heartbeat(&mut self, id: BrokerId, now_ms: u64) -> HeartbeatReply {
        self.heartbeat_with(id, now_ms, false)
    }

    pub(super) fn create(
        &mut self,
        name: &str,
        partitions: i32,
        rf: i16,
    ) -> Result<CreatedTopic, ResponseError> {
        self.create_with(CreateTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            assignment: BTreeMap::new(),
            configs: BTreeMap::new(),
        })
    }

    pub(super) fn create_with(&mut self, t: CreateTopic) -> Result<CreatedTopic, ResponseError> {
        let event = Event::CreateTopics {
            topics: vec![t],
            validate_only: false,
        };
        let Some(Reply::CreateTopics(mut results)) = self.run(event, 0) else {
            panic!()
        };
        results.remove(0).1
    }

    pub(super) fn partition(&self, topic: &str, p: i32) -> PartitionState {
        self.c.committed().topic_by_name(topic).unwrap().partitions[&p].clone()
    }

    pub(super) fn fenced(&self, id: BrokerId) -> bool {
        !self.c.committed().is_unfenced(id)
    }
}

pub(super) fn cluster(n: BrokerId) -> Harness {
    let mut h = Harness::new(ControllerConfig::default());
    for id in 1..=n {
        h.register(id, None, 0);
    }
    h
}

mod arbitrary;

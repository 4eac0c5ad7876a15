//! The one-broker path: a single-voter quorum, the same node code as a cluster.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::*;
use crate::controller::{BrokerHeartbeat, BrokerRegistration, CreateTopic};
use crate::quorum::LocalQuorum;

#[test]
fn a_single_broker_registers_unfences_creates_a_topic_and_is_told_to_lead_it() {
    let mut node = MetadataNode::new(LocalQuorum::new(1), ControllerConfig::default());
    assert!(node.poll(0).unwrap().replies.is_empty());
    assert!(
        node.is_active(),
        "a one-voter quorum is led by its only voter"
    );
    let reg = BrokerRegistration {
        broker_id: 1,
        incarnation_id: Uuid::from_u128(5),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    };
    assert!(
        node.handle(1, Event::BrokerRegistration(reg), 0).is_empty(),
        "the reply waits for the commit"
    );
    let polled = node.poll(0).unwrap();
    let [(1, Reply::BrokerRegistration(Ok(epoch)))] = polled.replies[..] else {
        panic!("{:?}", polled.replies)
    };
    let hb = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epoch,
        metadata_offset: node.image().position().offset,
        wants_fence: false,
        wants_shutdown: false,
    };
    node.handle(2, Event::BrokerHeartbeat(hb), 1);
    node.poll(1).unwrap();
    assert!(node.image().is_unfenced(1));
    let topic = CreateTopic {
        name: "t".into(),
        num_partitions: 2,
        replication_factor: 1,
        assignment: BTreeMap::new(),
        configs: BTreeMap::new(),
    };
    node.handle(
        3,
        Event::CreateTopics {
            topics: vec![topic],
            validate_only: false,
        },
        2,
    );
    let polled = node.poll(2).unwrap();
    assert!(matches!(&polled.replies[..], [(3, Reply::CreateTopics(r))] if r[0].1.is_ok()));
    let local = polled.delta.local_changes(1);
    assert_eq!(local.leaders.len(), 2);
    assert!(local.followers.is_empty() && local.deletes.is_empty());
}

#[test]
fn an_inactive_node_answers_not_controller_at_once() {
    let mut node = MetadataNode::new(LocalQuorum::new(1), ControllerConfig::default());
    // Not polled yet, so not active.
    let replies = node.handle(
        9,
        Event::AllocateProducerIds {
            broker_id: 1,
            broker_epoch: 1,
        },
        0,
    );
    assert_eq!(replies, vec![(9, Reply::NotController)]);
}

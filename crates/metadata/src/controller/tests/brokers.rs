//! Registration, sessions, fencing, controlled shutdown, producer ids.

use kafka_protocol::ResponseError;

use super::*;
use uuid::Uuid;

#[test]
fn brokers_register_fenced_and_are_unfenced_once_caught_up() {
    let mut h = Harness::new(ControllerConfig::default());
    let reg = BrokerRegistration {
        broker_id: 1,
        incarnation_id: Uuid::from_u128(1),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    };
    let Some(Reply::BrokerRegistration(Ok(epoch))) = h.run(Event::BrokerRegistration(reg), 0)
    else {
        panic!()
    };
    assert!(h.fenced(1));
    let behind = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epoch,
        metadata_offset: -1,
        wants_fence: false,
        wants_shutdown: false,
    };
    let Some(Reply::BrokerHeartbeat(Ok(r))) = h.run(Event::BrokerHeartbeat(behind), 1) else {
        panic!()
    };
    assert!(r.is_fenced && !r.is_caught_up);
    h.epochs.insert(1, epoch);
    assert!(!h.heartbeat(1, 2).is_fenced);
}

#[test]
fn a_new_incarnation_is_refused_while_the_old_one_is_alive() {
    let mut h = cluster(1);
    let reg = BrokerRegistration {
        broker_id: 1,
        incarnation_id: Uuid::from_u128(77),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    };
    let reply = h.run(Event::BrokerRegistration(reg.clone()), 100);
    assert_eq!(
        reply,
        Some(Reply::BrokerRegistration(Err(
            ResponseError::DuplicateBrokerRegistration
        )))
    );
    let Some(Reply::BrokerRegistration(Ok(epoch))) =
        h.run(Event::BrokerRegistration(reg), TIMEOUT + 1)
    else {
        panic!()
    };
    assert!(epoch > h.epochs[&1]);
}

#[test]
fn a_broker_is_fenced_after_the_session_timeout_and_not_before() {
    let mut h = cluster(2);
    h.run(Event::Tick, TIMEOUT);
    assert!(!h.fenced(1), "fenced at exactly the timeout");
    h.run(Event::Tick, TIMEOUT + 1);
    assert!(h.fenced(1) && h.fenced(2));
}

#[test]
fn a_heartbeat_resets_the_session_timer() {
    let mut h = cluster(2);
    h.heartbeat(1, TIMEOUT - 1);
    h.run(Event::Tick, TIMEOUT + 1);
    assert!(!h.fenced(1));
    assert!(h.fenced(2));
    h.run(Event::Tick, 2 * TIMEOUT);
    assert!(h.fenced(1));
}

#[test]
fn a_heartbeat_with_a_stale_broker_epoch_is_refused() {
    let mut h = cluster(1);
    let hb = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: 99,
        metadata_offset: 0,
        wants_fence: false,
        wants_shutdown: false,
    };
    assert_eq!(
        h.run(Event::BrokerHeartbeat(hb), 1),
        Some(Reply::BrokerHeartbeat(Err(ResponseError::StaleBrokerEpoch)))
    );
}

#[test]
fn controlled_shutdown_moves_leadership_before_the_broker_stops() {
    let mut h = cluster(3);
    h.create("t", 6, 3).unwrap();
    let reply = h.heartbeat_with(1, 10, true);
    assert!(reply.should_shut_down);
    for p in
        h.c.committed()
            .topic_by_name("t")
            .unwrap()
            .partitions
            .values()
    {
        assert_ne!(p.leader, 1);
        assert!(!p.isr.contains(&1));
    }
    assert!(h.fenced(1));
}

#[test]
fn producer_id_blocks_are_unique_and_increasing() {
    let mut h = cluster(2);
    let mut last_end = 0;
    for i in 0..10 {
        let id = 1 + (i % 2);
        let event = Event::AllocateProducerIds {
            broker_id: id,
            broker_epoch: h.epochs[&id],
        };
        let Some(Reply::AllocateProducerIds(Ok(block))) = h.run(event, 0) else {
            panic!()
        };
        assert_eq!(
            block.start, last_end,
            "blocks are contiguous and never overlap"
        );
        assert_eq!(block.len, PRODUCER_ID_BLOCK_SIZE);
        last_end = block.start + block.len;
    }
    assert_eq!(h.c.committed().next_producer_id(), last_end);
    let stale = Event::AllocateProducerIds {
        broker_id: 1,
        broker_epoch: 0,
    };
    assert_eq!(
        h.run(stale, 0),
        Some(Reply::AllocateProducerIds(Err(
            ResponseError::StaleBrokerEpoch
        )))
    );
}

#[test]
fn an_inactive_controller_writes_nothing_and_answers_not_controller() {
    let mut c = Controller::new(ControllerConfig::default());
    let fx = c.handle(
        Event::AllocateProducerIds {
            broker_id: 1,
            broker_epoch: 1,
        },
        0,
    );
    assert_eq!(
        fx,
        Effects {
            records: vec![],
            reply: Some(Reply::NotController)
        }
    );
    assert_eq!(c.handle(Event::Tick, 0), Effects::default());
}

#[test]
fn a_negative_broker_id_cannot_register() {
    let mut h = Harness::new(ControllerConfig::default());
    let reg = BrokerRegistration {
        broker_id: -1,
        incarnation_id: Uuid::from_u128(1),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    };
    let reply = h.run(Event::BrokerRegistration(reg), 0);
    assert_eq!(
        reply,
        Some(Reply::BrokerRegistration(Err(
            ResponseError::InvalidRequest
        )))
    );
}

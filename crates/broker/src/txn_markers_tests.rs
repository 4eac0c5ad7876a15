use super::*;

fn key(tid: &str, epoch: i16) -> TxnKey {
    TxnKey {
        transactional_id: tid.to_string(),
        producer_id: 7,
        producer_epoch: epoch,
        commit: true,
    }
}

fn parts(n: i32) -> Vec<(String, i32)> {
    (0..n).map(|i| ("t".to_string(), i)).collect()
}

/// Partition i is led by broker i % 3.
fn by_index(_: &str, p: i32) -> Destination {
    Destination::Broker(p % 3)
}

#[test]
fn markers_are_batched_per_leader_and_finish_once_all_are_written() {
    let mut q = MarkerQueue::default();
    assert!(q.submit(key("a", 0), 5, &parts(6)));
    q.route(by_index);
    assert_eq!(q.ready_brokers(), vec![0, 1, 2]);
    let b0 = q.take_batch(0);
    assert_eq!(
        b0.iter().map(|m| m.partition).collect::<Vec<_>>(),
        vec![0, 3]
    );
    assert!(b0.iter().all(|m| m.coordinator_epoch == 5));
    assert!(
        q.take_batch(0).is_empty(),
        "one request in flight per broker"
    );
    let b1 = q.take_batch(1);
    let b2 = q.take_batch(2);
    q.done(0, b0.into_iter().map(|m| (m, Outcome::Written)).collect());
    q.done(1, b1.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert!(q.take_finished().is_empty(), "broker 2 has not answered");
    q.done(2, b2.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert_eq!(q.take_finished(), vec![key("a", 0)]);
    assert_eq!(q.waiting(), 0);
}

#[test]
fn a_retry_is_routed_again_to_the_new_leader() {
    let mut q = MarkerQueue::default();
    q.submit(key("a", 0), 0, &parts(1));
    q.route(|_, _| Destination::Broker(1));
    let b = q.take_batch(1);
    q.done(1, b.into_iter().map(|m| (m, Outcome::Retry)).collect());
    assert!(q.take_finished().is_empty());
    // The image moved: the partition is led by broker 2 now.
    q.route(|_, _| Destination::Broker(2));
    assert_eq!(q.ready_brokers(), vec![2]);
    let b = q.take_batch(2);
    assert_eq!(b.len(), 1);
    q.done(2, b.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert_eq!(q.take_finished(), vec![key("a", 0)]);
}

#[test]
fn no_leader_waits_and_a_deleted_topic_counts_as_written() {
    let mut q = MarkerQueue::default();
    q.submit(key("a", 0), 0, &parts(2));
    q.route(|_, p| {
        if p == 0 {
            Destination::NoLeader
        } else {
            Destination::Gone
        }
    });
    assert!(q.ready_brokers().is_empty());
    assert_eq!(q.waiting(), 1, "partition 0 waits for a leader");
    q.route(|_, _| Destination::Broker(0));
    let b = q.take_batch(0);
    q.done(0, b.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert_eq!(q.take_finished(), vec![key("a", 0)]);
}

#[test]
fn resubmitting_a_pending_transaction_sends_nothing_twice() {
    let mut q = MarkerQueue::default();
    assert!(q.submit(key("a", 0), 0, &parts(3)));
    assert!(
        !q.submit(key("a", 0), 0, &parts(3)),
        "the tick re-submits prepared transactions"
    );
    q.route(|_, _| Destination::Broker(1));
    assert_eq!(q.take_batch(1).len(), 3);
}

#[test]
fn fenced_stops_the_transaction_and_late_answers_are_ignored() {
    let mut q = MarkerQueue::default();
    q.submit(key("a", 0), 0, &parts(2));
    q.route(|_, p| Destination::Broker(p));
    let b0 = q.take_batch(0);
    let b1 = q.take_batch(1);
    q.done(0, b0.into_iter().map(|m| (m, Outcome::Fenced)).collect());
    q.done(1, b1.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert!(
        q.take_finished().is_empty(),
        "a fenced coordinator never completes it"
    );
    assert!(!q.is_pending(&key("a", 0)));
}

#[test]
fn a_newer_transaction_of_the_id_replaces_the_old_and_unloads_drop_it() {
    let mut q = MarkerQueue::default();
    q.submit(key("a", 0), 0, &parts(1));
    q.route(|_, _| Destination::Broker(1));
    let old = q.take_batch(1);
    assert!(q.submit(key("a", 1), 1, &parts(1)));
    q.done(1, old.into_iter().map(|m| (m, Outcome::Written)).collect());
    assert!(
        q.take_finished().is_empty(),
        "the old epoch's answer does not finish the new one"
    );
    q.submit(key("b", 0), 1, &parts(1));
    q.retain(|tid| tid != "a");
    q.route(|_, _| Destination::Broker(1));
    let b = q.take_batch(1);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].txn.transactional_id, "b");
}

#[test]
fn queues_are_bounded_and_requests_are_batched() {
    let mut q = MarkerQueue::default();
    let n = (QUEUE_PER_BROKER_MAX + 5) as i32;
    q.submit(key("a", 0), 0, &parts(n));
    q.route(|_, _| Destination::Broker(0));
    assert_eq!(q.waiting(), n as usize);
    let mut sent = 0;
    let mut requests = 0;
    loop {
        let b = q.take_batch(0);
        if b.is_empty() {
            q.route(|_, _| Destination::Broker(0));
            if q.ready_brokers().is_empty() {
                break;
            }
            continue;
        }
        assert!(b.len() <= MARKERS_PER_REQUEST_MAX);
        sent += b.len();
        requests += 1;
        q.done(0, b.into_iter().map(|m| (m, Outcome::Written)).collect());
    }
    assert_eq!(sent, n as usize);
    assert_eq!(requests, (n as usize).div_ceil(MARKERS_PER_REQUEST_MAX));
    assert_eq!(q.take_finished(), vec![key("a", 0)]);
}

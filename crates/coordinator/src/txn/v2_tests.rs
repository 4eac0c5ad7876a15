//! Transaction version 2: the epoch bump at every EndTxn, retries told apart by epoch, the
//! exhausted epoch moving to a new producer id, and the v1 records replaying to the same state.

use kafka_protocol::ResponseError;

use super::*;

fn ids() -> impl FnMut() -> Option<i64> {
    let mut next = 2000;
    move || {
        next += 1;
        Some(next)
    }
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_string(), p)
}

fn current(c: &TxnCoordinator) -> (i64, i16, TxnState) {
    let m = c.get("tx").unwrap();
    (m.producer_id, m.producer_epoch, m.state)
}

/// Apply `out`'s markers as the broker does: every marker written.
fn write_markers(c: &mut TxnCoordinator, out: &mut TxnEffects) -> Vec<MarkerRequest> {
    let markers = std::mem::take(&mut out.markers);
    for m in &markers {
        c.markers_written(&m.transactional_id, 10, out);
    }
    markers
}

#[test]
fn every_end_txn_bumps_the_epoch_and_the_markers_carry_it() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(1, "tx", pid, e0, &[tp("a", 0)], &mut out)
        .unwrap();
    c.end_txn_v2(2, "tx", pid, e0, true, &mut alloc, &mut out)
        .unwrap();
    let markers = write_markers(&mut c, &mut out);
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0].producer_epoch, e0 + 1);
    assert_eq!(current(&c), (pid, e0 + 1, TxnState::CompleteCommit));
    assert_eq!(c.get("tx").unwrap().client_transaction_version, 2);

    // A retry under the old epoch is answered; the wrong outcome is INVALID_TXN_STATE.
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0, true, &mut alloc, &mut out),
        Ok(())
    );
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0, false, &mut alloc, &mut out),
        Err(ResponseError::InvalidTxnState)
    );
    // The old epoch can no longer add partitions; the new one starts the next transaction.
    assert_eq!(
        c.add_partitions(4, "tx", pid, e0, &[tp("a", 0)], &mut out),
        Err(ResponseError::ProducerFenced)
    );
    c.add_partitions(4, "tx", pid, e0 + 1, &[tp("a", 1)], &mut out)
        .unwrap();
    c.end_txn_v2(5, "tx", pid, e0 + 1, false, &mut alloc, &mut out)
        .unwrap();
    let markers = write_markers(&mut c, &mut out);
    assert!(!markers[0].commit);
    assert_eq!(markers[0].partitions, vec![tp("a", 1)]);
    assert_eq!(current(&c), (pid, e0 + 2, TxnState::CompleteAbort));
    // Two epochs back is a zombie.
    assert_eq!(
        c.end_txn_v2(6, "tx", pid, e0, false, &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    // Aborting with nothing open bumps the epoch without markers; committing is ITS.
    c.end_txn_v2(7, "tx", pid, e0 + 2, false, &mut alloc, &mut out)
        .unwrap();
    assert!(out.markers.is_empty());
    assert_eq!(current(&c), (pid, e0 + 3, TxnState::CompleteAbort));
    assert_eq!(
        c.end_txn_v2(8, "tx", pid, e0 + 3, true, &mut alloc, &mut out),
        Err(ResponseError::InvalidTxnState)
    );

    // The records (v1 for this id) replay to the same state.
    let mut replayed = TxnCoordinator::new(TxnConfig::default());
    for a in &out.appends {
        replayed.replay(&a.record).unwrap();
    }
    assert_eq!(
        replayed.get("tx"),
        c.get("tx").map(|m| m.as_replayed()).as_ref()
    );
}

#[test]
fn an_exhausted_epoch_moves_to_a_new_producer_id_after_the_markers() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, _) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    let last = i16::MAX - 1;
    c.txns.get_mut("tx").unwrap().producer_epoch = last;
    c.add_partitions(1, "tx", pid, last, &[tp("a", 0)], &mut out)
        .unwrap();
    c.end_txn_v2(2, "tx", pid, last, true, &mut alloc, &mut out)
        .unwrap();
    let prepared = c.get("tx").unwrap().clone();
    assert_eq!(prepared.producer_epoch, i16::MAX);
    assert!(prepared.next_producer_id > pid);
    // The prepared state survives a restart with its next producer id.
    let mut replayed = TxnCoordinator::new(TxnConfig::default());
    for a in &out.appends {
        replayed.replay(&a.record).unwrap();
    }
    assert_eq!(replayed.get("tx"), Some(&prepared.as_replayed()));

    let markers = write_markers(&mut c, &mut out);
    assert_eq!(
        (markers[0].producer_id, markers[0].producer_epoch),
        (pid, i16::MAX)
    );
    let m = c.get("tx").unwrap();
    assert_eq!(
        (m.producer_id, m.producer_epoch),
        (prepared.next_producer_id, 0)
    );
    assert_eq!(m.previous_producer_id, pid);
    // The retry under the old id and its last epoch is answered.
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, last, true, &mut alloc, &mut out),
        Ok(())
    );
}

#[test]
fn an_end_txn_while_the_markers_are_on_their_way_waits_for_them() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(1, "tx", pid, e0, &[tp("a", 0)], &mut out)
        .unwrap();
    c.end_txn_v2(2, "tx", pid, e0, true, &mut alloc, &mut out)
        .unwrap();
    assert_eq!(current(&c), (pid, e0 + 1, TxnState::PrepareCommit));
    let concurrent = Err(ResponseError::ConcurrentTransactions);
    // The same EndTxn sent again (epoch before the bump), either outcome.
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0, true, &mut alloc, &mut out),
        concurrent
    );
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0, false, &mut alloc, &mut out),
        concurrent
    );
    // The next transaction's EndTxn under the epoch the answer handed out (the producer
    // aborts before anything it sent reached a leader): Kafka answers CONCURRENT_TRANSACTIONS
    // (KAFKA-18464), never PRODUCER_FENCED for it.
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0 + 1, false, &mut alloc, &mut out),
        concurrent
    );
    assert_eq!(
        c.end_txn_v2(3, "tx", pid, e0 + 1, true, &mut alloc, &mut out),
        concurrent
    );
    // Another producer id is still not this producer.
    assert_eq!(
        c.end_txn_v2(3, "tx", pid + 1, e0 + 1, true, &mut alloc, &mut out),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    // The next transaction's partitions wait too; the old epoch is fenced.
    assert_eq!(
        c.add_partitions(3, "tx", pid, e0 + 1, &[tp("a", 1)], &mut out),
        concurrent
    );
    assert_eq!(
        c.add_partitions(3, "tx", pid, e0, &[tp("a", 1)], &mut out),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(current(&c), (pid, e0 + 1, TxnState::PrepareCommit));

    // Markers written: the retry is answered, the empty abort bumps the epoch.
    write_markers(&mut c, &mut out);
    assert_eq!(
        c.end_txn_v2(4, "tx", pid, e0, true, &mut alloc, &mut out),
        Ok(())
    );
    c.end_txn_v2(5, "tx", pid, e0 + 1, false, &mut alloc, &mut out)
        .unwrap();
    assert!(out.markers.is_empty());
    assert_eq!(current(&c), (pid, e0 + 2, TxnState::CompleteAbort));
}

#[test]
fn a_timeout_abort_in_flight_answers_the_fenced_producers_end_txn_concurrent() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 1_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(1, "tx", pid, e0, &[tp("a", 0)], &mut out)
        .unwrap();
    c.tick(5_000, &mut out);
    assert_eq!(current(&c), (pid, e0 + 1, TxnState::PrepareAbort));
    assert_eq!(
        c.end_txn_v2(5_001, "tx", pid, e0, true, &mut alloc, &mut out),
        Err(ResponseError::ConcurrentTransactions)
    );
    write_markers(&mut c, &mut out);
    // Complete: the commit overtaken by the timeout's abort is fenced (KAFKA-20785), which a
    // client recovers from; its abort is answered.
    assert_eq!(
        c.end_txn_v2(5_002, "tx", pid, e0, true, &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn_v2(5_002, "tx", pid, e0, false, &mut alloc, &mut out),
        Ok(())
    );
}

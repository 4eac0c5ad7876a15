//! The transaction coordinator's transitions, each with the Kafka error a client gets.

use kafka_protocol::ResponseError;

use super::*;

fn coordinator() -> TxnCoordinator {
    TxnCoordinator::new(TxnConfig::default())
}

fn ids() -> impl FnMut() -> Option<i64> {
    let mut next = 1000;
    move || {
        next += 1;
        Some(next)
    }
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_string(), p)
}

#[test]
fn commit_flow_persists_every_transition_and_completes_on_markers() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, epoch) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    assert_eq!((pid, epoch), (1001, 0));
    c.add_partitions(1, "tx", pid, epoch, &[tp("a", 0), tp("a", 1)], &mut out)
        .unwrap();
    assert_eq!(c.get("tx").unwrap().state, TxnState::Ongoing);
    assert_eq!(
        c.verify_partitions("tx", pid, epoch, &[tp("a", 0), tp("b", 0)]),
        vec![0, ResponseError::InvalidTxnState.code()]
    );
    c.end_txn(2, "tx", pid, epoch, true, &mut out).unwrap();
    assert_eq!(out.markers.len(), 1);
    assert!(out.markers[0].commit);
    assert_eq!(out.markers[0].partitions, vec![tp("a", 0), tp("a", 1)]);
    // The markers on their way: the same EndTxn and the other outcome both wait (Kafka's
    // pending transition to Complete answers before the state is looked at).
    assert_eq!(
        c.end_txn(2, "tx", pid, epoch, true, &mut out),
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(
        c.end_txn(2, "tx", pid, epoch, false, &mut out),
        Err(ResponseError::ConcurrentTransactions)
    );
    c.markers_written("tx", 3, &mut out);
    assert_eq!(c.get("tx").unwrap().state, TxnState::CompleteCommit);
    // A retried EndTxn succeeds; the wrong outcome is INVALID_TXN_STATE.
    assert_eq!(c.end_txn(4, "tx", pid, epoch, true, &mut out), Ok(()));
    assert_eq!(
        c.end_txn(4, "tx", pid, epoch, false, &mut out),
        Err(ResponseError::InvalidTxnState)
    );
    assert_eq!(out.appends.len(), 4, "init, add, prepare, complete");

    // Replaying the records rebuilds the same state.
    let mut replayed = coordinator();
    for a in &out.appends {
        assert_eq!(a.partition, c.partition_for("tx"));
        replayed.replay(&a.record).unwrap();
    }
    assert_eq!(replayed.get("tx"), c.get("tx"));
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(1, "tx", pid, e0, &[tp("a", 0)], &mut out)
        .unwrap();
    out = TxnEffects::default();
    assert_eq!(
        c.init_producer_id(2, "tx", 60_000, None, &mut alloc, &mut out),
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(out.markers.len(), 1);
    assert!(!out.markers[0].commit);
    assert_eq!(out.markers[0].producer_epoch, e0 + 1);
    c.markers_written("tx", 3, &mut out);
    let (pid2, e2) = c
        .init_producer_id(4, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    assert_eq!((pid2, e2), (pid, e0 + 2));
    // The zombie is fenced.
    assert_eq!(
        c.add_partitions(5, "tx", pid, e0, &[tp("a", 0)], &mut out),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn(5, "tx", pid + 7, e2, true, &mut out),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.init_producer_id(5, "tx", i32::MAX, None, &mut alloc, &mut out),
        Err(ResponseError::InvalidTransactionTimeout)
    );
}

#[test]
fn timeouts_abort_with_a_bumped_epoch_and_prepared_ones_finish_after_replay() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 1_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(10, "tx", pid, e0, &[tp("a", 0)], &mut out)
        .unwrap();
    assert_eq!(c.next_deadline_ms(), Some(1_011));
    let mut tick = TxnEffects::default();
    c.tick(1_010, &mut tick);
    assert!(tick.markers.is_empty());
    c.tick(1_011, &mut tick);
    assert_eq!(tick.markers.len(), 1);
    assert_eq!(tick.markers[0].producer_epoch, e0 + 1);
    assert_eq!(
        c.end_txn(1_012, "tx", pid, e0, true, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    // A crash before the markers were confirmed: the replayed coordinator rewrites them.
    let mut replayed = coordinator();
    for a in out.appends.iter().chain(&tick.appends) {
        replayed.replay(&a.record).unwrap();
    }
    let mut again = TxnEffects::default();
    replayed.finish_replay(2_000, &mut again);
    assert_eq!(again.markers, tick.markers);
    assert_eq!(replayed.prepared_count(), 1);
    // The timer asks for the same markers again while the transaction stays prepared.
    let mut retried = TxnEffects::default();
    replayed.retry_prepared(&mut retried);
    assert_eq!(retried.markers, tick.markers);
    replayed.markers_written("tx", 2_001, &mut retried);
    assert_eq!(replayed.prepared_count(), 0);
    let mut none = TxnEffects::default();
    replayed.retry_prepared(&mut none);
    assert!(none.markers.is_empty());
    // KIP-360: the producer the timeout fenced cannot come back with its old epoch (Kafka's
    // epoch fence clears the last epoch); a new producer (no epoch) is welcome.
    c.markers_written("tx", 1_013, &mut out);
    assert_eq!(
        c.init_producer_id(1_014, "tx", 1_000, Some((pid, e0)), &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.init_producer_id(1_015, "tx", 1_000, None, &mut alloc, &mut out),
        Ok((pid, e0 + 2))
    );
}

#[test]
fn kip_360_bumps_the_producers_own_epoch_answers_its_retry_and_fences_a_fenced_epoch() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, e0) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    // An epoch it never handed out is fenced.
    assert_eq!(
        c.init_producer_id(1, "tx", 60_000, Some((pid, e0 + 5)), &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    // The producer's own epoch (after an abortable error needing a bump): bumped.
    assert_eq!(
        c.init_producer_id(2, "tx", 60_000, Some((pid, e0)), &mut alloc, &mut out),
        Ok((pid, e0 + 1))
    );
    // Its retry (the answer was lost) under the epoch before: the same epoch, no second bump.
    assert_eq!(
        c.init_producer_id(3, "tx", 60_000, Some((pid, e0)), &mut alloc, &mut out),
        Ok((pid, e0 + 1))
    );
    assert_eq!(
        c.init_producer_id(
            4,
            "tx",
            60_000,
            Some((pid + 1, e0 + 1)),
            &mut alloc,
            &mut out
        ),
        Err(ResponseError::ProducerFenced),
        "another producer id"
    );
    // A new instance (no epoch) between transactions fences it with one bump; the zombie's
    // own bump under its old epoch, one below the new one, is fenced, and the new instance
    // keeps its epoch.
    assert_eq!(
        c.init_producer_id(5, "tx", 60_000, None, &mut alloc, &mut out),
        Ok((pid, e0 + 2))
    );
    assert_eq!(
        c.init_producer_id(6, "tx", 60_000, Some((pid, e0 + 1)), &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    c.add_partitions(7, "tx", pid, e0 + 2, &[tp("a", 0)], &mut out)
        .unwrap();
    // An operator's abort fences like a timeout: the aborted epoch cannot bump itself back.
    c.abort_open("tx", 8, &mut out).unwrap();
    let markers = std::mem::take(&mut out.markers);
    assert_eq!(markers[0].producer_epoch, e0 + 3);
    c.markers_written("tx", 9, &mut out);
    assert_eq!(
        c.init_producer_id(10, "tx", 60_000, Some((pid, e0 + 2)), &mut alloc, &mut out),
        Err(ResponseError::ProducerFenced)
    );
    // A producer fenced in the middle of its transaction by another one's InitProducerId:
    // the same (the fencing bump is never handed out, the new instance's retry bumps again).
    let (_, e4) = c
        .init_producer_id(11, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    c.add_partitions(12, "tx", pid, e4, &[tp("a", 0)], &mut out)
        .unwrap();
    assert_eq!(
        c.init_producer_id(13, "tx", 60_000, None, &mut alloc, &mut out),
        Err(ResponseError::ConcurrentTransactions)
    );
    c.markers_written("tx", 14, &mut out);
    assert_eq!(
        c.init_producer_id(15, "tx", 60_000, None, &mut alloc, &mut out),
        Ok((pid, e4 + 2))
    );
    for zombie in [e4, e4 + 1] {
        assert_eq!(
            c.init_producer_id(16, "tx", 60_000, Some((pid, zombie)), &mut alloc, &mut out),
            Err(ResponseError::ProducerFenced)
        );
    }
    // A replay knows no last epoch (as Kafka after a load): the current epoch still bumps.
    let mut replayed = coordinator();
    for a in &out.appends {
        replayed.replay(&a.record).unwrap();
    }
    assert_eq!(replayed.get("tx").unwrap().last_producer_epoch, -1);
    assert_eq!(
        replayed.init_producer_id(17, "tx", 60_000, Some((pid, e4 + 2)), &mut alloc, &mut out),
        Ok((pid, e4 + 3))
    );
}

#[test]
fn an_operator_abort_fences_the_producer_and_only_applies_to_an_open_transaction() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    assert_eq!(
        c.abort_open("tx", 0, &mut out),
        Err(ResponseError::TransactionalIdNotFound)
    );
    let (pid, e0) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    assert_eq!(
        c.abort_open("tx", 1, &mut out),
        Err(ResponseError::InvalidTxnState),
        "Empty: nothing to abort"
    );
    c.add_partitions(2, "tx", pid, e0, &[tp("a", 0), tp("b", 1)], &mut out)
        .unwrap();
    let mut abort = TxnEffects::default();
    c.abort_open("tx", 3, &mut abort).unwrap();
    assert_eq!(c.get("tx").unwrap().state, TxnState::PrepareAbort);
    assert_eq!(abort.appends.len(), 1, "the PrepareAbort record");
    assert_eq!(abort.markers.len(), 1);
    assert!(!abort.markers[0].commit);
    assert_eq!(abort.markers[0].producer_epoch, e0 + 1);
    assert_eq!(abort.markers[0].partitions, vec![tp("a", 0), tp("b", 1)]);
    assert_eq!(
        c.abort_open("tx", 4, &mut abort),
        Err(ResponseError::InvalidTxnState),
        "already completing"
    );
    c.markers_written("tx", 5, &mut abort);
    assert_eq!(c.get("tx").unwrap().state, TxnState::CompleteAbort);
    // The producer, still at the old epoch, is fenced.
    assert_eq!(
        c.end_txn(6, "tx", pid, e0, true, &mut out),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn end_txn_with_nothing_open_is_invalid_txn_state_but_a_retry_is_answered() {
    let mut c = coordinator();
    let mut alloc = ids();
    let mut out = TxnEffects::default();
    let (pid, epoch) = c
        .init_producer_id(0, "tx", 60_000, None, &mut alloc, &mut out)
        .unwrap();
    // Empty: neither outcome has anything to end (Kafka's `endTransactionWithTV1`).
    for commit in [false, true] {
        assert_eq!(
            c.end_txn(1, "tx", pid, epoch, commit, &mut out),
            Err(ResponseError::InvalidTxnState)
        );
    }
    assert_eq!(c.get("tx").unwrap().state, TxnState::Empty);
    // An abort completed: its retry is answered, a commit is not.
    c.add_partitions(2, "tx", pid, epoch, &[tp("a", 0)], &mut out)
        .unwrap();
    c.end_txn(3, "tx", pid, epoch, false, &mut out).unwrap();
    c.markers_written("tx", 4, &mut out);
    assert_eq!(c.end_txn(5, "tx", pid, epoch, false, &mut out), Ok(()));
    assert_eq!(
        c.end_txn(5, "tx", pid, epoch, true, &mut out),
        Err(ResponseError::InvalidTxnState)
    );
    assert_eq!(c.get("tx").unwrap().state, TxnState::CompleteAbort);
}

//! The transaction coordinator follows `__transaction_state` leadership: node 2 leads
//! partition 0, follows partition 1 and does not host partition 2.

use kafka_protocol::ResponseError;
use streamforge_coordinator::records::encode_batch;
use streamforge_coordinator::txn::{
    TRANSACTION_STATE_TOPIC, TxnConfig, TxnMetadata, TxnState, records,
};
use streamforge_coordinator::{TxnOffset, partition_for_group};

use crate::coordinator_load::led_partitions;
use crate::partition::{Acks, AppendParams};
use crate::replica_manager::ReplicaManager;
use crate::replica_manager::test_cluster::{NODE, cluster, move_leader};
use crate::txn_service::TxnService;

fn open(dir: &std::path::Path) -> (ReplicaManager, TxnService) {
    let rm = cluster(
        dir,
        TRANSACTION_STATE_TOPIC,
        &[&[NODE, 1], &[1, NODE], &[3, 1]],
    );
    let config = TxnConfig {
        state_partitions: 3,
        transactional_id_expiration_ms: 1_000,
        ..TxnConfig::default()
    };
    let service = TxnService::open(&rm, config).unwrap();
    (rm, service)
}

fn tid_on(partition: i32) -> String {
    (0..)
        .map(|i| format!("tid-{i}"))
        .find(|t| partition_for_group(t, 3) == partition)
        .unwrap()
}

/// An open transaction of `tid` written to its partition's log, as the coordinator would.
fn write_ongoing(rm: &ReplicaManager, tid: &str) {
    let mut m = TxnMetadata::new(42, 60_000, crate::util::now_ms());
    m.state = TxnState::Ongoing;
    m.start_ms = crate::util::now_ms();
    m.partitions.insert(("t".into(), 0));
    let mut batch = encode_batch(&[records::record(tid, &m)], 0).unwrap();
    let p = rm.partition(TRANSACTION_STATE_TOPIC, 0).unwrap();
    p.append(&mut batch, AppendParams { acks: Acks::All })
        .unwrap();
}

fn known(service: &TxnService, tid: &str) -> Result<bool, ResponseError> {
    service.read_for(tid, |c| c.get(tid).is_some())
}

fn follow(rm: &ReplicaManager, service: &TxnService) -> Vec<crate::coordinator_load::LoadJob> {
    service.follow_leadership(&led_partitions(rm, TRANSACTION_STATE_TOPIC).unwrap())
}

fn offsets() -> Vec<TxnOffset> {
    vec![TxnOffset {
        topic: "t".into(),
        partition: 0,
        offset: 11,
        leader_epoch: -1,
        metadata: String::new(),
    }]
}

/// Pending offsets of `tid`'s transaction as an older data dir holds them in
/// `__transaction_state` (key version 1000; no longer written).
fn write_legacy_pending(rm: &ReplicaManager, tid: &str, pid: i64) {
    let record = crate::txn_pending::record(tid, "g", pid, offsets().iter());
    let mut batch = encode_batch(&[record], 0).unwrap();
    let p = rm.partition(TRANSACTION_STATE_TOPIC, 0).unwrap();
    p.append(&mut batch, AppendParams { acks: Acks::All })
        .unwrap();
}

#[test]
fn transactional_ids_follow_their_partitions_leadership() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let tid = tid_on(0);
    for p in [1, 2] {
        assert_eq!(
            known(&service, &tid_on(p)),
            Err(ResponseError::NotCoordinator)
        );
    }
    write_ongoing(&rm, &tid);
    // Away and back: the transaction is loaded from the log.
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, 1);
    follow(&rm, &service);
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, NODE);
    service.load(follow(&rm, &service).remove(0));
    assert_eq!(known(&service, &tid), Ok(true));
    // An older data dir's pending offsets of the transaction: replayed with it.
    write_legacy_pending(&rm, &tid, 42);

    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, 1);
    assert!(follow(&rm, &service).is_empty());
    assert_eq!(known(&service, &tid), Err(ResponseError::NotCoordinator));
    assert!(
        service.inner.lock().pending_offsets.lock().is_empty(),
        "dropped"
    );

    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, NODE);
    let job = follow(&rm, &service).remove(0);
    assert_eq!(
        known(&service, &tid),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    service.load(job);
    assert_eq!(known(&service, &tid), Ok(true), "replayed from the log");
    let inner = service.inner.lock();
    assert_eq!(
        inner.coordinator.get(&tid).unwrap().state,
        TxnState::Ongoing
    );
    assert_eq!(
        inner.pending_offsets.lock()[&("g".to_string(), 42)].len(),
        1
    );
    drop(inner);
    rm.close_all();
}

#[test]
fn an_unloaded_partition_takes_its_transaction_timers_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    write_ongoing(&rm, &tid_on(0));
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, 1);
    follow(&rm, &service);
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, NODE);
    service.load(follow(&rm, &service).remove(0));
    assert!(service.read(|c| c.next_deadline_ms()).is_some(), "timed");
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, 1);
    follow(&rm, &service);
    assert_eq!(service.read(|c| c.next_deadline_ms()), None);
    rm.close_all();
}

#[test]
fn the_first_use_creates_the_topic_and_serves_the_partitions_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let rm =
        std::sync::Arc::new(ReplicaManager::open(dir.path(), Default::default(), None).unwrap());
    let config = TxnConfig {
        state_partitions: 3,
        ..TxnConfig::default()
    };
    let service = std::sync::Arc::new(TxnService::open(&rm, config).unwrap());
    assert!(rm.topic(TRANSACTION_STATE_TOPIC).is_none());
    // Bounded: the creation loads under the coordinator's lock, it must not take it again.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn({
        let (rm, service) = (rm.clone(), service.clone());
        move || tx.send(service.serve(&rm, "tid"))
    });
    let added = rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
    assert_eq!(added, Ok(()));
    assert_eq!(
        rm.topic(TRANSACTION_STATE_TOPIC).unwrap().partition_count(),
        3
    );
    for p in 0..3 {
        assert_eq!(known(&service, &tid_on(p)), Ok(false), "{p} is served here");
    }
    rm.close_all();
}

/// An idle id of `tid` (Empty, last updated at 0) written to partition 0's log.
fn write_idle(rm: &ReplicaManager, tid: &str) {
    let m = TxnMetadata::new(43, 60_000, 0);
    let mut batch = encode_batch(&[records::record(tid, &m)], 0).unwrap();
    let p = rm.partition(TRANSACTION_STATE_TOPIC, 0).unwrap();
    p.append(&mut batch, AppendParams { acks: Acks::All })
        .unwrap();
}

/// Moves partition 0 away and back and loads it again (replayed from its log).
fn reload(rm: &ReplicaManager, service: &TxnService) {
    move_leader(rm, TRANSACTION_STATE_TOPIC, 0, 1);
    follow(rm, service);
    move_leader(rm, TRANSACTION_STATE_TOPIC, 0, NODE);
    service.load(follow(rm, service).remove(0));
}

/// Looks for expired ids now and writes their tombstones as the timer does.
fn expire(rm: &ReplicaManager, service: &TxnService) {
    let mut inner = service.inner.lock();
    let mut out = streamforge_coordinator::txn::TxnEffects::default();
    inner
        .coordinator
        .expire_transactional_ids(crate::util::now_ms(), &mut out);
    assert_eq!(out.expirations.len(), 1, "one batch");
    service.write_tombstones(rm, &mut inner, out.expirations);
}

#[test]
fn an_expired_id_whose_tombstone_cannot_be_appended_stays_until_a_later_check() {
    let dir = tempfile::tempdir().unwrap();
    let (rm, service) = open(dir.path());
    let tid = tid_on(0);
    write_idle(&rm, &tid);
    reload(&rm, &service);
    assert_eq!(known(&service, &tid), Ok(true));

    // The partition moves away before this broker follows: the load is stale, the append
    // refused (NOT_COORDINATOR). The id stays in memory, as it stays in the log.
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, 1);
    let end_before = rm
        .partition(TRANSACTION_STATE_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    expire(&rm, &service);
    assert!(service.read(|c| c.get(&tid).is_some()), "kept");

    // Led here again: the next check writes the tombstone and the id goes; a replay of the
    // log keeps it gone.
    move_leader(&rm, TRANSACTION_STATE_TOPIC, 0, NODE);
    service.load(follow(&rm, &service).remove(0));
    expire(&rm, &service);
    assert_eq!(known(&service, &tid), Ok(false));
    let end_after = rm
        .partition(TRANSACTION_STATE_TOPIC, 0)
        .unwrap()
        .offsets()
        .unwrap()
        .log_end_offset;
    assert_eq!(end_after, end_before + 1, "one tombstone, appended once");
    reload(&rm, &service);
    assert_eq!(known(&service, &tid), Ok(false), "the tombstone replays");
    rm.close_all();
}

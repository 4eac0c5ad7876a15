//! Three in-process voters: a leader is elected, batches commit on all, the leader is cut off,
//! a new leader takes over, and no committed record is lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::*;
use crate::records::RegisterBroker;

pub(super) const WAIT_MAX: Duration = Duration::from_secs(20);
pub(super) const FAST: RaftTiming = RaftTiming {
    heartbeat_interval_ms: 50,
    election_timeout_min_ms: 300,
    election_timeout_max_ms: 600,
};

pub(super) fn register(id: i32) -> Vec<Record> {
    vec![Record::RegisterBroker(RegisterBroker {
        broker_id: id,
        broker_epoch: i64::from(id),
        incarnation_id: Uuid::from_u128(id as u128),
        endpoints: vec![],
        rack: None,
        fenced: true,
    })]
}

pub(super) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The leader every node in `nodes` agrees on.
pub(super) async fn agreed_leader(nodes: &[&RaftQuorum]) -> NodeId {
    let mut leader = None;
    wait_until("an agreed leader", || {
        let seen: Vec<_> = nodes.iter().map(|q| q.leader().leader).collect();
        leader = seen[0]
            .filter(|l| seen.iter().all(|s| *s == Some(*l)) && nodes.iter().any(|q| q.id == *l));
        leader.is_some()
    })
    .await;
    leader.unwrap_or_else(|| unreachable!())
}

pub(super) fn committed(q: &RaftQuorum) -> Vec<CommittedBatch> {
    q.read_committed(0, usize::MAX).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_commit_and_survive_losing_the_leader() {
    let router = Router::default();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(RaftQuorum::start(id, FAST, &router).await.unwrap());
    }
    nodes[0].initialize(&[1, 2, 3]).await.unwrap();
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    let leader = agreed_leader(&all).await;
    let first_epoch = nodes[0].leader().epoch;
    let lead = &nodes[leader as usize - 1];
    wait_until("the leader is ready", || lead.is_ready_leader()).await;
    assert!(nodes.iter().filter(|q| q.is_ready_leader()).count() == 1);
    for id in 1..=5 {
        lead.propose(register(id)).unwrap();
    }
    let follower = nodes.iter().find(|q| q.id != leader).unwrap();
    assert_eq!(
        follower.propose(register(9)),
        Err(QuorumError::NotLeader {
            leader: Some(leader)
        })
    );
    wait_until("5 batches on every voter", || {
        nodes.iter().all(|q| committed(q).len() == 5)
    })
    .await;
    let before = committed(lead);
    assert!(
        nodes.iter().all(|q| committed(q) == before),
        "voters disagree"
    );
    assert_eq!(before.last().unwrap().last_offset(), 4);
    let voters = lead.voters();
    assert_eq!(voters.len(), 3);
    wait_until("followers caught up", || {
        lead.voters().iter().all(|v| v.lag_entries == Some(0))
    })
    .await;

    // Cut the leader off: the other two elect a new one in a newer epoch.
    router.isolate(leader);
    let rest: Vec<&RaftQuorum> = nodes.iter().filter(|q| q.id != leader).collect();
    let new_leader = agreed_leader(&rest).await;
    assert_ne!(new_leader, leader);
    let new_lead = &nodes[new_leader as usize - 1];
    assert!(new_lead.leader().epoch > first_epoch);
    for id in 6..=10 {
        new_lead.propose(register(id)).unwrap();
    }
    wait_until("10 batches on the majority", || {
        rest.iter().all(|q| committed(q).len() == 10)
    })
    .await;
    let after = committed(new_lead);
    assert_eq!(
        after[..5],
        before[..],
        "a committed batch was lost or changed"
    );
    assert!(
        after[5..]
            .iter()
            .all(|b| b.base.epoch > first_epoch && b.proposer == new_leader)
    );

    // The old leader comes back and catches up to the same log.
    router.heal(leader);
    let old = &nodes[leader as usize - 1];
    wait_until("the old leader catches up", || committed(old) == after).await;
    assert_eq!(old.snapshot(), new_lead.snapshot());
    for q in &nodes {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_voter_raft_quorum_commits_alone_and_snapshots() {
    let router = Router::default();
    let q = RaftQuorum::start(1, FAST, &router).await.unwrap();
    q.initialize(&[1]).await.unwrap();
    agreed_leader(&[&q]).await;
    q.propose(register(1)).unwrap();
    wait_until("the batch commits", || committed(&q).len() == 1).await;
    q.raft().trigger().snapshot().await.unwrap();
    let mut sm = q.state_machine.clone();
    wait_until("a snapshot", || {
        q.raft().metrics().borrow().snapshot.is_some()
    })
    .await;
    let current = openraft::storage::RaftStateMachine::get_current_snapshot(&mut sm)
        .await
        .unwrap();
    let data = current.expect("snapshot stored").snapshot.into_inner();
    let decoded = Snapshot::decode(&data).unwrap();
    assert_eq!(
        crate::image::MetadataImage::load(&decoded).unwrap(),
        *q.state_machine.inner.lock().log.image()
    );
    q.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_over_tcp_survive_killing_the_leader() {
    let mut listeners = Vec::new();
    let mut addresses = BTreeMap::new();
    for id in 1..=3 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addresses.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push(listener);
    }
    let mut nodes = Vec::new();
    for (id, listener) in (1..=3).zip(listeners) {
        nodes.push(RaftQuorum::start_tcp(id, FAST, listener).await.unwrap());
    }
    nodes[0]
        .initialize_with_addresses(&addresses)
        .await
        .unwrap();
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    let leader = agreed_leader(&all).await;
    let lead = &nodes[leader as usize - 1];
    wait_until("the leader is ready", || lead.is_ready_leader()).await;
    for id in 1..=3 {
        lead.propose(register(id)).unwrap();
    }
    wait_until("3 batches on every voter", || {
        nodes.iter().all(|q| committed(q).len() == 3)
    })
    .await;
    let before = committed(lead);

    // Kill the leader (its Raft task and its listener).
    lead.shutdown().await;
    let rest: Vec<&RaftQuorum> = nodes.iter().filter(|q| q.id != leader).collect();
    let new_leader = agreed_leader(&rest).await;
    assert_ne!(new_leader, leader);
    let new_lead = &nodes[new_leader as usize - 1];
    wait_until("the new leader is ready", || new_lead.is_ready_leader()).await;
    for id in 4..=6 {
        new_lead.propose(register(id)).unwrap();
    }
    wait_until("6 batches on the survivors", || {
        rest.iter().all(|q| committed(q).len() == 6)
    })
    .await;
    assert_eq!(
        committed(new_lead)[..3],
        before[..],
        "a committed batch was lost"
    );
    for q in &rest {
        q.shutdown().await;
    }
}

#[test]
fn a_raft_core_that_stopped_on_an_error_is_a_failure_and_a_shutdown_is_not() {
    use openraft::error::Fatal;
    use openraft::{StorageError, StorageIOError};
    let mut m = openraft::RaftMetrics::<NodeId, openraft::BasicNode>::new_initial(3);
    assert_eq!(super::fatal_error(&m), None);
    m.running_state = Err(Fatal::Stopped);
    assert_eq!(super::fatal_error(&m), None);
    let full = std::io::Error::from_raw_os_error(28);
    m.running_state = Err(Fatal::StorageError(StorageError::from(
        StorageIOError::write_logs(&full),
    )));
    let e = super::fatal_error(&m).expect("a failure");
    assert!(e.contains("No space left"), "{e}");
}

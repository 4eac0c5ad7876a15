//! Observers over TCP: a node outside the voters joins as a learner, follows every committed
//! batch, never leads and never counts for a commit; stopped and started again from its
//! directory it catches up; one that joins after the log was folded into a snapshot gets the
//! snapshot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::observer::{JoinAnswer, JoinRequest};
use super::tests::{FAST, WAIT_MAX, agreed_leader, committed, register, wait_until};
use super::*;

/// The observer's node id in these tests (voters are 1..=3).
const OBSERVER: NodeId = 4;

async fn listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// Voters `1..=count` over loopback TCP, in memory, with their membership initialized.
async fn voters(count: NodeId) -> (Vec<RaftQuorum>, BTreeMap<NodeId, String>) {
    let mut listeners = Vec::new();
    let mut addresses = BTreeMap::new();
    for id in 1..=count {
        let (l, addr) = listener().await;
        addresses.insert(id, addr);
        listeners.push(l);
    }
    let mut nodes = Vec::new();
    for (id, l) in (1..=count).zip(listeners) {
        nodes.push(RaftQuorum::start_tcp(id, FAST, l).await.unwrap());
    }
    nodes[0]
        .initialize_with_addresses(&addresses)
        .await
        .unwrap();
    (nodes, addresses)
}

/// Start the observer from `dir` on `listener` and join the quorum of `voters`.
async fn observer(
    dir: &std::path::Path,
    listener: tokio::net::TcpListener,
    voters: &BTreeMap<NodeId, String>,
) -> RaftQuorum {
    let addr = listener.local_addr().unwrap().to_string();
    let q = RaftQuorum::start_tcp_durable(OBSERVER, FAST, listener, dir)
        .await
        .unwrap();
    q.join_as_observer(voters, &addr, WAIT_MAX).await.unwrap();
    q
}

/// Propose `ids` on the ready leader among `nodes`.
async fn propose_on_leader(nodes: &[&RaftQuorum], ids: std::ops::RangeInclusive<i32>) {
    let leader = agreed_leader(nodes).await;
    let lead = nodes.iter().find(|q| q.id == leader).unwrap();
    wait_until("the leader is ready", || lead.is_ready_leader()).await;
    for id in ids {
        while lead.propose(register(id)) == Err(QuorumError::TooManyInFlight) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_every_committed_batch_without_voting() {
    let dir = tempfile::tempdir().unwrap();
    let (l, observer_addr) = listener().await;
    let (nodes, addresses) = voters(3).await;
    let joined = {
        let addresses = addresses.clone();
        let dir = dir.path().to_path_buf();
        // The observer may start before a leader exists: it asks until one adds it.
        tokio::spawn(async move { observer(&dir, l, &addresses).await })
    };
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    propose_on_leader(&all, 1..=5).await;
    let obs = joined.await.unwrap();
    wait_until("every batch on every voter and on the observer", || {
        nodes.iter().all(|q| committed(q).len() == 5) && committed(&obs).len() == 5
    })
    .await;
    let leader = agreed_leader(&all).await;
    let lead = &nodes[leader as usize - 1];
    assert_eq!(committed(&obs), committed(lead));
    assert_eq!(obs.snapshot(), lead.snapshot());
    assert_eq!(
        obs.leader().leader,
        Some(leader),
        "the observer knows the leader"
    );
    assert_eq!(
        obs.leader_addr(),
        Some((leader, addresses[&leader].clone()))
    );

    // Not a voter: it counts nowhere, proposes nothing and is listed as an observer.
    assert!(!obs.is_voter() && lead.is_voter());
    assert!(!obs.is_ready_leader());
    assert_eq!(
        obs.propose(register(9)),
        Err(QuorumError::NotLeader {
            leader: Some(leader)
        })
    );
    let ids = |s: Vec<VoterStatus>| s.iter().map(|v| v.id).collect::<Vec<_>>();
    assert_eq!(ids(lead.voters()), vec![1, 2, 3]);
    assert_eq!(ids(obs.voters()), vec![1, 2, 3]);
    wait_until("the leader sees the observer caught up", || {
        lead.observers()
            == vec![VoterStatus {
                id: OBSERVER,
                lag_entries: Some(0),
            }]
    })
    .await;

    // Asking again answers at once: the learner is already there, at that address.
    let again = obs.join_as_observer(&addresses, &observer_addr, WAIT_MAX);
    tokio::time::timeout(Duration::from_secs(5), again)
        .await
        .expect("an observer already in the membership is answered at once")
        .unwrap();
    for q in nodes.iter().chain([&obs]) {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voters_commit_without_the_observer_and_it_catches_up_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (l, observer_addr) = listener().await;
    let (mut nodes, addresses) = voters(3).await;
    let obs = observer(dir.path(), l, &addresses).await;
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    propose_on_leader(&all, 1..=3).await;
    wait_until("3 batches on the observer", || committed(&obs).len() == 3).await;

    // The observer is gone (its Raft task and listener), and so is a voter: the two left are
    // still a majority of the three voters, and commit.
    obs.shutdown().await;
    drop(obs);
    let leader = agreed_leader(&all).await;
    let down = if leader == 1 { 2 } else { 1 };
    nodes[down as usize - 1].shutdown().await;
    let rest: Vec<&RaftQuorum> = nodes.iter().filter(|q| q.id != down).collect();
    propose_on_leader(&rest, 4..=6).await;
    wait_until("6 batches on the two voters", || {
        rest.iter().all(|q| committed(q).len() == 6)
    })
    .await;

    // Started again from its directory on the same address, the observer catches up.
    let deadline = Instant::now() + WAIT_MAX;
    let l = loop {
        match tokio::net::TcpListener::bind(&observer_addr).await {
            Ok(l) => break l,
            Err(e) => assert!(Instant::now() < deadline, "rebind {observer_addr}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let obs = observer(dir.path(), l, &addresses).await;
    let expected = committed(rest[0]);
    wait_until("the restarted observer catches up", || {
        committed(&obs) == expected
    })
    .await;
    assert!(!obs.is_voter());
    nodes.retain(|q| q.id != down);
    for q in nodes.iter().chain([&obs]) {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_never_leads_even_with_every_voter_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (l, _) = listener().await;
    let (nodes, addresses) = voters(3).await;
    let obs = observer(dir.path(), l, &addresses).await;
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    propose_on_leader(&all, 1..=2).await;
    wait_until("2 batches on the observer", || committed(&obs).len() == 2).await;
    for q in &nodes {
        q.shutdown().await;
    }
    // Several election timeouts with nobody to hear from: a voter would stand for election.
    let watch_until = Instant::now() + Duration::from_millis(4 * FAST.election_timeout_max_ms);
    while Instant::now() < watch_until {
        assert_ne!(obs.leader().leader, Some(OBSERVER), "the observer led");
        assert!(!obs.is_ready_leader());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = obs.raft().metrics().borrow().clone();
    assert_eq!(metrics.state, openraft::ServerState::Learner);
    obs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_id_is_refused_and_a_follower_names_the_leader() {
    let (nodes, addresses) = voters(3).await;
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    let leader = agreed_leader(&all).await;
    let follower = if leader == 1 { 2 } else { 1 };
    let ask = |to: NodeId, id: NodeId| {
        let addr = addresses[&to].clone();
        let request = JoinRequest {
            id,
            addr: "127.0.0.1:1".into(),
        };
        async move {
            super::observer::ask_join(&Default::default(), &addr, &request, Duration::from_secs(5))
                .await
                .unwrap()
        }
    };
    assert_eq!(
        ask(follower, OBSERVER).await,
        JoinAnswer::NotLeader {
            leader: Some((leader, addresses[&leader].clone()))
        }
    );
    assert!(matches!(
        ask(leader, follower).await,
        JoinAnswer::Refused(_)
    ));
    // The node itself refuses to join with a voter's id before asking anyone.
    let (l, addr) = listener().await;
    let voter_dir = tempfile::tempdir().unwrap();
    let q = RaftQuorum::start_tcp_durable(2, FAST, l, voter_dir.path())
        .await
        .unwrap();
    assert!(
        q.join_as_observer(&addresses, &addr, WAIT_MAX)
            .await
            .is_err()
    );
    for q in nodes.iter().chain([&q]) {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_joining_after_a_snapshot_gets_the_snapshot() {
    let (nodes, addresses) = voters(1).await;
    let lead = &nodes[0];
    let batches = SNAPSHOT_LOGS_SINCE_LAST as i32 + 50;
    propose_on_leader(&[lead], 1..=batches).await;
    wait_until("a snapshot and a purge", || {
        let m = lead.raft().metrics().borrow().clone();
        m.snapshot.is_some() && m.purged.is_some()
    })
    .await;
    wait_until("every batch commits", || {
        lead.snapshot().position.offset == i64::from(batches) - 1
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (l, _) = listener().await;
    let obs = observer(dir.path(), l, &addresses).await;
    propose_on_leader(&[lead], batches + 1..=batches + 1).await;
    wait_until("the observer has the image and the batch after it", || {
        obs.snapshot() == lead.snapshot()
    })
    .await;
    assert!(
        obs.raft().metrics().borrow().snapshot.is_some(),
        "installed from a snapshot"
    );
    for q in nodes.iter().chain([&obs]) {
        q.shutdown().await;
    }
}

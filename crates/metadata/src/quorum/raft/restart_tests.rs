//! Durable voters (`start_tcp_durable`, `start_durable`): stopped and started again from their
//! directories, they keep their vote, log and snapshot, so no committed batch is lost.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::tests::{FAST, WAIT_MAX, agreed_leader, committed, register, wait_until};
use super::*;

/// Bind `addr` again once the stopped voter's listener is gone.
async fn rebind(addr: &str) -> tokio::net::TcpListener {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => assert!(Instant::now() < deadline, "cannot bind {addr} again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Voters 1..=3 on loopback, each in its own directory.
struct Cluster {
    dirs: Vec<tempfile::TempDir>,
    addresses: BTreeMap<NodeId, String>,
}

impl Cluster {
    async fn new() -> (Cluster, Vec<tokio::net::TcpListener>) {
        let mut listeners = Vec::new();
        let mut addresses = BTreeMap::new();
        for id in 1..=3 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addresses.insert(id, listener.local_addr().unwrap().to_string());
            listeners.push(listener);
        }
        let dirs = (1..=3).map(|_| tempfile::tempdir().unwrap()).collect();
        (Cluster { dirs, addresses }, listeners)
    }

    fn dir(&self, id: NodeId) -> &Path {
        self.dirs[id as usize - 1].path()
    }

    async fn start(&self, id: NodeId, listener: tokio::net::TcpListener) -> RaftQuorum {
        RaftQuorum::start_tcp_durable(id, FAST, listener, self.dir(id))
            .await
            .unwrap()
    }

    async fn restart(&self, id: NodeId) -> RaftQuorum {
        let listener = rebind(&self.addresses[&id]).await;
        self.start(id, listener).await
    }
}

/// Propose `ids` on the ready leader of `nodes` and wait until every node has `total` batches.
async fn commit(nodes: &[&RaftQuorum], ids: std::ops::RangeInclusive<i32>, total: usize) {
    let leader = agreed_leader(nodes).await;
    let lead = nodes.iter().find(|q| q.id == leader).unwrap();
    wait_until("the leader is ready", || lead.is_ready_leader()).await;
    for id in ids {
        lead.propose(register(id)).unwrap();
    }
    wait_until("the batches on every voter", || {
        nodes.iter().all(|q| committed(q).len() == total)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_stopped_together_restart_from_their_directories_with_every_batch() {
    let (cluster, listeners) = Cluster::new().await;
    let mut nodes = Vec::new();
    for (id, listener) in (1..=3).zip(listeners) {
        nodes.push(cluster.start(id, listener).await);
    }
    nodes[0]
        .initialize_with_addresses(&cluster.addresses)
        .await
        .unwrap();
    commit(&nodes.iter().collect::<Vec<_>>(), 1..=5, 5).await;
    let before = committed(&nodes[0]);
    let epoch_before = nodes[0].leader().epoch;
    let seqs_before: Vec<u64> = before.iter().map(|b| b.seq).collect();

    // Stop all three: Raft tasks, listeners and their connections.
    for q in &nodes {
        q.shutdown().await;
    }
    drop(nodes);
    // Voter 1 alone (no majority: nothing commits) replays its own log up to its commit index.
    let mut nodes = vec![cluster.restart(1).await];
    wait_until("voter 1 replays its committed batches alone", || {
        committed(&nodes[0]) == before
    })
    .await;
    for id in 2..=3 {
        nodes.push(cluster.restart(id).await);
    }
    let all: Vec<&RaftQuorum> = nodes.iter().collect();
    // No initialize: the membership and the votes are on disk.
    let leader = agreed_leader(&all).await;
    let lead = &nodes[leader as usize - 1];
    // The same term when the old leader's vote, on disk, lets it lead again (openraft does
    // that at start-up), or a newer one: never an older one.
    assert!(lead.leader().epoch >= epoch_before, "the term went back");
    wait_until("the committed batches are back on every voter", || {
        nodes.iter().all(|q| committed(q) == before)
    })
    .await;
    commit(&all, 6..=8, 8).await;
    let after = committed(lead);
    assert_eq!(
        after[..5],
        before[..],
        "a committed batch was lost or changed"
    );
    assert!(
        nodes.iter().all(|q| committed(q) == after),
        "voters disagree"
    );
    assert!(
        after[5..]
            .iter()
            .all(|b| b.seq >= 1 << 32 && !seqs_before.contains(&b.seq)),
        "sequence numbers after a restart never repeat earlier ones"
    );
    for q in &nodes {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_voter_keeps_its_log_and_catches_up_on_what_it_missed() {
    let (cluster, listeners) = Cluster::new().await;
    let mut nodes = Vec::new();
    for (id, listener) in (1..=3).zip(listeners) {
        nodes.push(Some(cluster.start(id, listener).await));
    }
    nodes[0]
        .as_ref()
        .unwrap()
        .initialize_with_addresses(&cluster.addresses)
        .await
        .unwrap();
    let all: Vec<&RaftQuorum> = nodes.iter().flatten().collect();
    commit(&all, 1..=3, 3).await;
    let leader = agreed_leader(&all).await;
    let down = if leader == 1 { 2 } else { 1 };

    // Stop a follower; the other two commit without it.
    let stopped = nodes[down as usize - 1].take().unwrap();
    stopped.shutdown().await;
    drop(stopped);
    let rest: Vec<&RaftQuorum> = nodes.iter().flatten().collect();
    commit(&rest, 4..=6, 6).await;

    // Started again from its directory, it catches up on the batches it missed.
    let back = cluster.restart(down).await;
    let after = committed(rest[0]);
    wait_until("the restarted voter catches up", || {
        committed(&back) == after
    })
    .await;
    assert_eq!(back.snapshot(), rest[0].snapshot());
    nodes[down as usize - 1] = Some(back);
    let all: Vec<&RaftQuorum> = nodes.iter().flatten().collect();
    commit(&all, 7..=7, 7).await;
    for q in &all {
        q.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_snapshots_purges_its_log_and_restarts_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::default();
    let q = RaftQuorum::start_durable(1, FAST, &router, dir.path())
        .await
        .unwrap();
    q.initialize(&[1]).await.unwrap();
    agreed_leader(&[&q]).await;
    wait_until("the leader is ready", || q.is_ready_leader()).await;
    let batches = SNAPSHOT_LOGS_SINCE_LAST as i32 + 50;
    let started = Instant::now();
    for id in 1..=batches {
        while q.propose(register(id)) == Err(QuorumError::TooManyInFlight) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    wait_until("every batch commits", || {
        q.snapshot().position.offset == i64::from(batches) - 1
    })
    .await;
    let commit_ms = started.elapsed().as_millis();
    wait_until("a snapshot and a purge", || {
        let m = q.raft().metrics().borrow().clone();
        m.snapshot.is_some() && m.purged.is_some()
    })
    .await;
    let purged = q.raft().metrics().borrow().purged.unwrap().index;
    let before = q.snapshot();
    q.shutdown().await;
    drop(q);
    let raft_dir = dir.path().join(RAFT_DIR);
    let log = RaftLogFile::open(&raft_dir).unwrap();
    let in_file = log.entries(..).unwrap();
    assert!(
        in_file.first().unwrap().log_id.index == purged + 1
            && (in_file.len() as u64) < SNAPSHOT_LOGS_SINCE_LAST,
        "the log file holds only what follows the purge point ({} entries)",
        in_file.len()
    );
    drop(log);
    eprintln!("one durable voter: {batches} batches committed in {commit_ms} ms");

    let q = RaftQuorum::start_durable(1, FAST, &router, dir.path())
        .await
        .unwrap();
    wait_until("the image is back", || q.snapshot() == before).await;
    agreed_leader(&[&q]).await;
    wait_until("the leader is ready", || q.is_ready_leader()).await;
    q.propose(register(batches + 1)).unwrap();
    wait_until("a new batch commits", || {
        q.snapshot().position.offset == i64::from(batches)
    })
    .await;
    q.shutdown().await;
}

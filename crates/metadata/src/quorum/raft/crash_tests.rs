//! A durable voter killed (SIGKILL) while it writes: the test binary runs itself as a child
//! process that commits batch after batch on a one-voter `start_durable` quorum and prints each
//! commit; the parent kills it at a varying point, opens the same directory and checks that
//! every batch the child saw committed is there, in order, then lets the next child go on.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::tests::{FAST, WAIT_MAX, agreed_leader, register, wait_until};
use super::*;

/// Set in the child: the directory to run the voter in.
const CHILD_DIR_ENV: &str = "STREAMFORGE_RAFT_CRASH_CHILD_DIR";
const TEST_NAME: &str =
    "quorum::raft::crash_tests::a_voter_killed_while_writing_keeps_every_batch_it_saw_committed";
const ROUNDS: usize = 4;
/// Upper bound on the batches one child commits (it is killed well before).
const CHILD_BATCHES_MAX: i32 = 10_000;

/// The child: commit one batch at a time, forever, printing `committed <n>` after each.
async fn child(dir: &str) {
    let router = Router::default();
    let q = RaftQuorum::start_durable(1, FAST, &router, Path::new(dir))
        .await
        .unwrap();
    // Only the first child forms the quorum; later ones find it on disk.
    let _ = q.initialize(&[1]).await;
    agreed_leader(&[&q]).await;
    wait_until("the leader is ready", || q.is_ready_leader()).await;
    let mut done = q.snapshot().position.offset + 1;
    while done < i64::from(CHILD_BATCHES_MAX) {
        q.propose(register(done as i32 + 1)).unwrap();
        wait_until("the batch commits", || {
            q.snapshot().position.offset + 1 > done
        })
        .await;
        done = q.snapshot().position.offset + 1;
        println!("committed {done}");
    }
}

/// Run a child on `dir` until it has reported `kill_after` new commits, kill it, and return the
/// last count it reported.
fn run_and_kill(dir: &Path, kill_after: usize) -> i64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("committed ") {
                let _ = lines.send(n.parse::<i64>().unwrap());
            }
        }
    });
    let deadline = Instant::now() + WAIT_MAX;
    let mut last = 0;
    for _ in 0..kill_after {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(n) => last = n,
            Err(e) => {
                let _ = child.kill();
                panic!("the child stopped reporting commits: {e}");
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    // Lines read after the count was taken are commits too.
    received.try_iter().fold(last, i64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_killed_while_writing_keeps_every_batch_it_saw_committed() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        return child(&dir).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged = 0;
    for round in 0..ROUNDS {
        let path = dir.path().to_path_buf();
        let kill_after = 5 + 7 * round;
        let seen = tokio::task::spawn_blocking(move || run_and_kill(&path, kill_after))
            .await
            .unwrap();
        assert!(
            seen >= acknowledged + kill_after as i64,
            "the child went back"
        );
        acknowledged = seen;

        let router = Router::default();
        let q = RaftQuorum::start_durable(1, FAST, &router, dir.path())
            .await
            .unwrap();
        agreed_leader(&[&q]).await;
        wait_until("the restarted voter is ready", || q.is_ready_leader()).await;
        let batches = q.read_committed(0, usize::MAX).unwrap();
        assert!(
            batches.len() as i64 >= acknowledged,
            "round {round}: {} batches after the kill, {acknowledged} were seen committed",
            batches.len()
        );
        for (i, batch) in batches.iter().enumerate() {
            assert_eq!(batch.records, register(i as i32 + 1), "batch {i} changed");
        }
        q.shutdown().await;
    }
    assert!(acknowledged >= 5 * ROUNDS as i64);
}

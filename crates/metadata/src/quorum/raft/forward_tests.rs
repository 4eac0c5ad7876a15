//! The forward pool: connections are reused, a peer that closed them or died is handled.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::forward::{FORWARD_IDLE_CONNECTIONS_MAX, ForwardPool, Forwarded};
use super::tcp::{Request, Response, read_frame, write_frame};
use crate::controller::{Event, WireReply};

const TIMEOUT: Duration = Duration::from_secs(5);

/// A stand-in for a controller's quorum listener: answers every forwarded event with
/// `committed_offset` = the number of frames this connection has served so far, and counts
/// the connections it accepted. Aborting the task closes every connection.
struct FakeController {
    addr: String,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FakeController {
    async fn start(addr: &str) -> FakeController {
        let listener = TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                connections.spawn(answer_each(stream));
            }
        });
        FakeController {
            addr,
            accepted,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Die: the listener and every accepted connection close.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn answer_each(mut stream: TcpStream) {
    let mut served = 0;
    while let Ok(Request::Forward(_)) = read_frame::<Request>(&mut stream).await {
        let answer = Forwarded {
            reply: WireReply::NotController,
            committed_offset: served,
        };
        served += 1;
        if write_frame(&mut stream, &Response::Forward(answer))
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn call(pool: &ForwardPool, addr: &str) -> std::io::Result<Forwarded> {
    pool.forward(addr, Event::Tick, TIMEOUT).await
}

#[tokio::test]
async fn sequential_calls_share_one_connection() {
    let controller = FakeController::start("127.0.0.1:0").await;
    let pool = ForwardPool::default();
    for n in 0..20 {
        let answer = call(&pool, &controller.addr).await.expect("forward");
        assert_eq!(
            answer.committed_offset, n,
            "the same connection serves call {n}"
        );
    }
    assert_eq!(controller.accepted(), 1);
    assert_eq!(pool.idle_count(&controller.addr), 1);
    controller.kill().await;
}

#[tokio::test]
async fn concurrent_calls_open_connections_and_keep_a_bounded_number_idle() {
    let controller = FakeController::start("127.0.0.1:0").await;
    let pool = Arc::new(ForwardPool::default());
    let callers = 3 * FORWARD_IDLE_CONNECTIONS_MAX;
    // Each caller holds its connection until all have theirs: the pool must open one each.
    let barrier = Arc::new(tokio::sync::Barrier::new(callers));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let (pool, addr, barrier) = (pool.clone(), controller.addr.clone(), barrier.clone());
        calls.spawn(async move {
            barrier.wait().await;
            call(&pool, &addr).await.expect("forward")
        });
    }
    while let Some(done) = calls.join_next().await {
        done.expect("caller");
    }
    assert!(
        controller.accepted() > 1,
        "concurrent calls do not wait for each other"
    );
    assert!(pool.idle_count(&controller.addr) <= FORWARD_IDLE_CONNECTIONS_MAX);
    let opened = controller.accepted();
    for _ in 0..10 {
        call(&pool, &controller.addr).await.expect("forward");
    }
    assert_eq!(
        controller.accepted(),
        opened,
        "later calls reuse idle connections"
    );
    controller.kill().await;
}

#[tokio::test]
async fn a_restarted_controller_is_reached_on_a_new_connection() {
    let controller = FakeController::start("127.0.0.1:0").await;
    let addr = controller.addr.clone();
    let pool = ForwardPool::default();
    call(&pool, &addr).await.expect("forward");
    assert_eq!(pool.idle_count(&addr), 1);
    controller.kill().await;

    // The same address listens again (a restarted voter): the pooled connection is dead, the
    // call goes through on a fresh one.
    let restarted = FakeController::start(&addr).await;
    let answer = call(&pool, &addr).await.expect("forward after the restart");
    assert_eq!(answer.committed_offset, 0, "a new connection served it");
    assert_eq!(restarted.accepted(), 1);
    assert_eq!(pool.idle_count(&addr), 1);
    restarted.kill().await;
}

#[tokio::test]
async fn a_dead_controller_fails_the_call_fast_and_leaves_nothing_pooled() {
    let controller = FakeController::start("127.0.0.1:0").await;
    let addr = controller.addr.clone();
    let pool = ForwardPool::default();
    call(&pool, &addr).await.expect("forward");
    controller.kill().await;

    let started = std::time::Instant::now();
    let error = call(&pool, &addr).await.expect_err("nobody listens");
    assert_ne!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
    assert!(started.elapsed() < TIMEOUT / 2, "refused, not timed out");
    assert_eq!(pool.idle_count(&addr), 0);
}

#[tokio::test]
async fn a_controller_that_never_answers_times_the_call_out() {
    // Accepts and reads, never answers (a stopped process whose socket stays open).
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let silent = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let _ = read_frame::<Request>(&mut stream).await;
        std::future::pending::<()>().await;
    });
    let pool = ForwardPool::default();
    let error = pool
        .forward(&addr, Event::Tick, Duration::from_millis(200))
        .await
        .expect_err("no answer");
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(
        pool.idle_count(&addr),
        0,
        "a connection in an unknown state is not kept"
    );
    silent.abort();
}

/// The in-test latency figure of docs/BENCHMARKS.md: forwarded calls to a controller that
/// answers at once, through one pool (reused connection) and through a new pool per call (a
/// new connection per call, as before the pool). Prints p50/p99 of each; run with
/// `cargo test -p streamforge-metadata --lib forward_tests::latency -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_of_reused_and_new_connections() {
    const CALLS: usize = 500;
    let controller = FakeController::start("127.0.0.1:0").await;
    let pooled = ForwardPool::default();
    let mut reused = Vec::with_capacity(CALLS);
    let mut fresh = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = std::time::Instant::now();
        call(&pooled, &controller.addr).await.expect("pooled");
        reused.push(started.elapsed());
        let started = std::time::Instant::now();
        call(&ForwardPool::default(), &controller.addr)
            .await
            .expect("fresh");
        fresh.push(started.elapsed());
    }
    assert_eq!(
        controller.accepted(),
        1 + CALLS,
        "one pooled connection, one per fresh call"
    );
    for (name, mut took) in [("reused connection", reused), ("new connection", fresh)] {
        took.sort();
        let at = |q: f64| took[((q * CALLS as f64).ceil() as usize).clamp(1, CALLS) - 1];
        println!(
            "forwarded call, {name}: p50 {:?}, p99 {:?} over {CALLS} calls",
            at(0.5),
            at(0.99)
        );
    }
    controller.kill().await;
}

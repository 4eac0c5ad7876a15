//! Rebalance benchmark (issue 5): a group of members settles a rebalance — every member has
//! its SyncGroup answer with an assignment, i.e. the group is Stable — how long after the join
//! window closes? Runs a real broker in-process on a loopback port and drives the members over
//! TCP with the raw protocol (JoinGroup v9 / SyncGroup v5, range assignment by the leader).
//!
//! `cargo bench -p streamforge-broker --bench group_rebalance -- [members] [rounds]`

#[path = "../tests/support/group_client.rs"]
#[allow(dead_code)] // shared with the integration tests, which use more of it
mod group_client;

use std::time::{Duration, Instant};

use futures::future::join_all;
use group_client::{RawClient, assignment, range_assign, subscription};
use streamforge_broker::{Broker, BrokerConfig};

const TOPIC: &str = "bench-topic";
const PARTITIONS: i32 = 10;
const GROUP: &str = "bench-group";
/// `group.initial.rebalance.delay.ms` for the first formation (Kafka's default is 3000).
const INITIAL_DELAY_MS: i64 = 1_000;
/// Bounds the wait for a follower to see the rebalance start.
const SEE_REBALANCE_POLLS_MAX: usize = 10_000;

struct MemberTimes {
    join_sent: Instant,
    join_done: Instant,
    sync_done: Instant,
    member_id: String,
    leader: String,
    generation: i32,
}

/// One member's join + sync.
async fn member_round(client: &mut RawClient, member_id: &str) -> MemberTimes {
    let join_sent = Instant::now();
    let join = client.join(GROUP, member_id, subscription(TOPIC)).await;
    assert_eq!(join.error_code, 0, "join failed");
    let join_done = Instant::now();
    let me = join.member_id.to_string();
    let assignments = if join.leader.as_str() == me {
        let ids: Vec<String> = join
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect();
        range_assign(&ids, PARTITIONS)
            .into_iter()
            .map(|(id, ps)| (id, assignment(TOPIC, &ps)))
            .collect()
    } else {
        Vec::new()
    };
    let sync = client
        .sync(GROUP, &me, join.generation_id, assignments)
        .await;
    assert_eq!(sync.error_code, 0, "sync failed");
    assert!(
        !sync.assignment.is_empty(),
        "every member gets an assignment"
    );
    MemberTimes {
        join_sent,
        join_done,
        sync_done: Instant::now(),
        member_id: me,
        leader: join.leader.to_string(),
        generation: join.generation_id,
    }
}

/// Settle time: from the join window closing (the coordinator answers every JoinGroup at that
/// moment; the first answer marks it) to the last member holding its assignment.
fn settle(times: &[MemberTimes]) -> Duration {
    let window_closed = times.iter().map(|t| t.join_done).min().unwrap();
    let settled = times.iter().map(|t| t.sync_done).max().unwrap();
    settled - window_closed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let members: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);

    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        http_listen: None,
        ..BrokerConfig::default()
    };
    config.groups.coordinator.group_initial_rebalance_delay_ms = INITIAL_DELAY_MS;
    config.groups.coordinator.offsets_topic_partitions = 10;
    let broker = Broker::start(config).await.expect("broker starts");
    let addr = broker.kafka_addr();

    let mut clients = Vec::with_capacity(members);
    for _ in 0..members {
        clients.push(RawClient::connect(addr).await);
    }
    // KIP-394 round trip: every member first learns its id.
    let mut ids = Vec::with_capacity(members);
    for c in clients.iter_mut() {
        let r = c.join(GROUP, "", subscription(TOPIC)).await;
        assert_eq!(r.error_code, 79, "MEMBER_ID_REQUIRED");
        ids.push(r.member_id.to_string());
    }

    // Formation: everyone joins an Empty group; the window is the initial delay.
    let started = Instant::now();
    let times = join_all(
        clients
            .iter_mut()
            .zip(&ids)
            .map(|(c, id)| member_round(c, id)),
    )
    .await;
    let formation_settle = settle(&times);
    let formation_total = times.iter().map(|t| t.sync_done).max().unwrap() - started;
    let leader = times[0].leader.clone();
    let mut generation = times[0].generation;
    // Keep the leader first: it starts every later rebalance by rejoining.
    let leader_index = ids
        .iter()
        .position(|id| *id == leader)
        .expect("leader is a member");
    clients.swap(0, leader_index);
    ids.swap(0, leader_index);

    let mut settles = Vec::with_capacity(rounds);
    let mut windows = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (first, rest) = clients.split_at_mut(1);
        let (leader_client, follower_ids) = (&mut first[0], &ids[1..]);
        let leader_id = ids[0].clone();
        let leader_round = member_round(leader_client, &leader_id);
        let followers = async {
            // Followers notice the rebalance through their heartbeats, as consumers do.
            let mut polls = 0;
            while rest[0].heartbeat(GROUP, &follower_ids[0], generation).await
                != kafka_protocol::ResponseError::RebalanceInProgress.code()
            {
                polls += 1;
                assert!(polls < SEE_REBALANCE_POLLS_MAX, "rebalance never started");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            join_all(
                rest.iter_mut()
                    .zip(follower_ids)
                    .map(|(c, id)| member_round(c, id)),
            )
            .await
        };
        let (leader_times, mut follower_times) = tokio::join!(leader_round, followers);
        follower_times.push(leader_times);
        let last_join_sent = follower_times.iter().map(|t| t.join_sent).max().unwrap();
        let window_closed = follower_times.iter().map(|t| t.join_done).min().unwrap();
        windows.push(window_closed.saturating_duration_since(last_join_sent));
        settles.push(settle(&follower_times));
        generation = follower_times[0].generation;
        assert!(follower_times.iter().all(|t| t.generation == generation));
        assert!(follower_times.iter().all(|t| ids.contains(&t.member_id)));
    }
    settles.sort();
    windows.sort();
    println!(
        "group rebalance benchmark: {members} members, {PARTITIONS} partitions, range assignor, {rounds} rebalances"
    );
    println!(
        "formation (initial delay {INITIAL_DELAY_MS} ms): join window closed -> all Stable {:.2} ms (first join -> all Stable {:.1} ms)",
        ms(formation_settle),
        ms(formation_total)
    );
    println!(
        "rebalance: join window closed -> all Stable  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        ms(percentile(&settles, 0.5)),
        ms(percentile(&settles, 0.99)),
        ms(*settles.last().unwrap())
    );
    println!(
        "rebalance: last JoinGroup sent -> window closed  p50 {:.2} ms  max {:.2} ms",
        ms(percentile(&windows, 0.5)),
        ms(*windows.last().unwrap())
    );
    broker.shutdown().await;
}

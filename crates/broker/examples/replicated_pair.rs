//! Two brokers in one process, one partition replicated from broker 1 to broker 2, each with its
//! dashboard: the fixture the browser tests (tests/browser) use to see replication on the
//! topic page until brokers in separate processes replicate (docs/REPLICATION.md "Not built
//! yet"). It plays the controller (`tests/support/pair.rs`): it calls `lead` / `follow` and
//! accepts every current ISR change.
//!
//! Prints one line `READY {"leader_url", "follower_url", "topic"}` once both serve. Reads
//! commands from stdin: `stop-follower` shuts broker 2 down (then prints `STOPPED`); end of
//! input shuts everything down.
//!
//! `cargo run -p streamforge-broker --example replicated_pair -- [replica.lag.time.max.ms]`

#[path = "../tests/support/pair.rs"]
mod pair;

const TOPIC: &str = "replicated";
const REPLICA_LAG_MS_DEFAULT: i64 = 2_000;

#[tokio::main]
async fn main() {
    let lag_ms = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(REPLICA_LAG_MS_DEFAULT);
    let (dir_1, dir_2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = pair::start_broker(dir_1.path(), 1, lag_ms, true, TOPIC).await;
    let follower = pair::start_broker(dir_2.path(), 2, lag_ms, true, TOPIC).await;
    pair::replicate(&leader, &follower, TOPIC);
    let url = |b: &streamforge_broker::BrokerHandle| format!("http://{}", b.http_addr().unwrap());
    let ready = serde_json::json!({
        "leader_url": url(&leader),
        "follower_url": url(&follower),
        "topic": TOPIC,
    });
    println!("READY {ready}");

    let mut follower = Some(follower);
    // Commands from stdin, read on a blocking thread (at most a few waiting).
    let (tx, mut commands) = tokio::sync::mpsc::channel::<String>(4);
    tokio::task::spawn_blocking(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        if line.trim() == "stop-follower"
            && let Some(f) = follower.take()
        {
            f.shutdown().await;
            println!("STOPPED");
        }
    }
    if let Some(f) = follower {
        f.shutdown().await;
    }
    leader.shutdown().await;
}

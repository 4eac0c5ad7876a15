//! D4: connections that announce a large frame and then stall must not stall other clients
//! (request memory is reserved as frame bytes arrive, not by the announced length).
mod client_support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use client_support::{BrokerProcess, client, consume_n, create};
use streamforge_client::{
    Acks, Admin, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig, ProducerRecord,
};

/// Stalled senders: 12 x 100 MiB announced is more than the 1 GiB `queued.max.request.bytes`.
const STALLED_CONNECTIONS: usize = 12;
/// Just under the default `socket.request.max.bytes` (100 MiB).
const ANNOUNCED_FRAME_BYTES: i32 = 100 * 1024 * 1024 - 16;
/// How long a normal client may take to create, produce and consume meanwhile.
const PROMPT: Duration = Duration::from_secs(5);

/// The reproduction: 12 x 100 MiB announced against the default 1 GiB pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_large_frames_do_not_stall_other_clients() {
    stalled_senders_then_a_normal_client(STALLED_CONNECTIONS, &[]).await;
}

/// Many stalled senders against a small pool: 300 x 64 KiB held is 19 MiB of the 100 MiB
/// (with a 1 MiB reservation per stalled frame it would be 300 MiB, and every client waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_stalled_frames_hold_little_request_memory() {
    stalled_senders_then_a_normal_client(300, &["--queued-max-request-bytes", "104857600"]).await;
}

async fn stalled_senders_then_a_normal_client(connections: usize, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), extra);
    // Each sends a length prefix and the first bytes of a header, then nothing (44 bytes in
    // the reproduction).
    let mut stalled = Vec::new();
    for _ in 0..connections {
        let mut s = TcpStream::connect(b.bootstrap()).unwrap();
        s.write_all(&ANNOUNCED_FRAME_BYTES.to_be_bytes()).unwrap();
        s.write_all(&[0, 0, 0, 9, 0, 0, 0, 1, 0, 4]).unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let work = async {
        let admin = Admin::new(client(&b));
        create(&admin, "live", 1).await;
        let p = Producer::new(ProducerConfig {
            client: client(&b),
            acks: Acks::All,
            linger_ms: 1,
            ..Default::default()
        })
        .await
        .unwrap();
        let mut futs = Vec::new();
        for i in 0..20 {
            futs.push(
                p.send(ProducerRecord::new("live", format!("v{i}").as_bytes()))
                    .await
                    .unwrap(),
            );
        }
        p.flush().await.unwrap();
        for f in futs {
            assert!(f.await.unwrap().offset >= 0);
        }
        let mut c = Consumer::new(ConsumerConfig {
            client: client(&b),
            auto_offset_reset: OffsetReset::Earliest,
            ..Default::default()
        });
        c.assign(&[("live".to_string(), 0)]);
        consume_n(&mut c, 20).await.len()
    };
    let consumed = tokio::time::timeout(Duration::from_secs(30), work)
        .await
        .expect("a normal client stalled behind the stalled frames");
    let elapsed = started.elapsed();
    assert_eq!(consumed, 20);
    assert!(elapsed < PROMPT, "took {elapsed:?}");
    drop(stalled);
}

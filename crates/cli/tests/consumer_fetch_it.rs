//! The consumer fetches from each leader broker independently: with two real `streamforge`
//! processes in one cluster, partitions led by each, and data on one broker only, the records
//! of that broker are delivered long before the empty broker's long poll
//! (`fetch_max_wait_ms`) ends.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use streamforge_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord,
};

/// Bound on the cluster forming and on each wait here.
const FORM_MAX: Duration = Duration::from_secs(60);
/// The empty broker's long poll.
const FETCH_MAX_WAIT_MS: i32 = 2_000;
/// Records of the broker with data must arrive well within the other one's long poll.
const DELIVERY_MAX: Duration = Duration::from_millis(500);
/// Records produced (and timed) one after another.
const ROUNDS: usize = 5;

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Broker processes, killed (by pid) on drop.
struct Brokers {
    children: Vec<Child>,
}

impl Drop for Brokers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_two(dir: &Path) -> (Brokers, Vec<u16>) {
    let voters: Vec<String> = (1..=2)
        .map(|id| format!("{id}@127.0.0.1:{}", free_port()))
        .collect();
    let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let mut brokers = Brokers {
        children: Vec::new(),
    };
    for (i, port) in ports.iter().enumerate() {
        let id = i + 1;
        let log = std::fs::File::create(dir.join(format!("broker-{id}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
            .args(["broker", "--node-id", &id.to_string()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.join(format!("broker-{id}")))
            .args(["--http-listen", "off"])
            .args(["--controller-quorum-voters", &voters.join(",")])
            .args(["--offsets-topic-partitions", "2"])
            .env("RUST_LOG", "info,openraft=error")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn streamforge");
        brokers.children.push(child);
    }
    for port in &ports {
        let deadline = Instant::now() + FORM_MAX;
        while TcpStream::connect(("127.0.0.1", *port)).is_err() {
            assert!(Instant::now() < deadline, "broker on {port} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    (brokers, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_one_broker_are_not_held_by_another_brokers_long_poll() {
    let dir = tempfile::tempdir().unwrap();
    let (_brokers, ports) = start_two(dir.path());
    let client = ClientConfig::new(&format!("127.0.0.1:{}", ports[0]));
    let admin = Admin::new(client.clone());
    let topic = "split";
    // Both brokers must be registered before the topic is placed on them.
    let deadline = Instant::now() + FORM_MAX;
    loop {
        if let Ok(m) = admin.describe_cluster().await
            && m.brokers.len() == 2
        {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster did not form");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin
        .create_topics(
            &[NewTopic {
                name: topic.into(),
                partitions: 4,
                replication_factor: 1,
                configs: vec![],
            }],
            false,
        )
        .await
        .unwrap();
    // One partition led by each broker.
    let (with_data, empty) = loop {
        if let Ok(ts) = admin.describe_topics(&[topic.to_string()]).await
            && let Some(t) = ts.first()
            && t.partitions.len() == 4
            && t.partitions.iter().all(|p| p.leader >= 0)
        {
            let first = &t.partitions[0];
            let other = t.partitions.iter().find(|p| p.leader != first.leader);
            let other = other.expect("partitions of a 4-partition topic on one broker only");
            break (first.partition, other.partition);
        }
        assert!(Instant::now() < deadline, "the topic got no leaders");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let producer = Producer::new(ProducerConfig {
        client: client.clone(),
        acks: Acks::All,
        linger_ms: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut consumer = Consumer::new(ConsumerConfig {
        client,
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        fetch_max_wait_ms: FETCH_MAX_WAIT_MS,
        ..Default::default()
    });
    consumer.assign(&[(topic.into(), with_data), (topic.into(), empty)]);
    // Positions resolved and both brokers long-polling.
    assert!(
        consumer
            .poll(Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    let mut waits = Vec::new();
    for round in 0..ROUNDS {
        let value = format!("record-{round}");
        producer
            .send(ProducerRecord::new(topic, value.as_bytes()).partition(with_data))
            .await
            .unwrap()
            .await
            .unwrap();
        let acked = Instant::now();
        let got = loop {
            let got = consumer.poll(Duration::from_secs(10)).await.unwrap();
            if !got.is_empty() || acked.elapsed() > Duration::from_secs(10) {
                break got;
            }
        };
        waits.push(acked.elapsed());
        assert_eq!(got.len(), 1, "round {round}: {got:?}");
        assert_eq!(got[0].partition, with_data);
        assert_eq!(got[0].offset, round as i64);
        assert_eq!(got[0].value.as_deref(), Some(value.as_bytes()));
    }
    println!("delivery after the ack: {waits:?}");
    let slowest = waits.iter().max().unwrap();
    assert!(
        *slowest < DELIVERY_MAX,
        "delivery took up to {slowest:?} with the other broker's long poll at \
         {FETCH_MAX_WAIT_MS} ms: {waits:?}"
    );
    consumer.close().await.unwrap();
}

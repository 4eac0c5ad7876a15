//! The Rust `rdkafka` crate (librdkafka) against three real broker processes in one cluster: an
//! RF=3 topic with min.insync.replicas=2, a `FutureProducer` with enable.idempotence and a
//! `StreamConsumer` in a group, running while the leader of a partition is killed -9 twice (the
//! killed broker restarted in between). Checked: no delivery fails (librdkafka retries through
//! the leader change), the consumer keeps receiving after each kill, and every acknowledged
//! message is consumed at the offset it was acknowledged with, once per offset, in production
//! order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use streamforge_it::BrokerProcess;
use streamforge_it::cluster::{self, CLUSTER_SIZE, full_isr, placement, wait_for};

const TOPIC: &str = "rdkafka-replicated";
const PARTITIONS: i64 = 3;
const KILLS: usize = 2;
const WAIT: Duration = Duration::from_secs(30);
/// The controller fences a silent broker after its session timeout (3 s); new leaders from the
/// ISR must be in place well within this.
const FAILOVER_BOUND: Duration = Duration::from_secs(15);
/// Acks (and consumed messages) that must arrive after a kill before it counts as survived.
const PROGRESS_AFTER_KILL: usize = 50;
/// Deliveries the producer loop waits on at most (keeps the rate, and the check, bounded).
const IN_FLIGHT_MAX: usize = 50;
const CONSUMER_POLL: Duration = Duration::from_millis(200);

/// partition -> offset -> value, for what was acknowledged and what was consumed.
type Log = Vec<BTreeMap<i64, i64>>;

#[derive(Default)]
struct Seen {
    acked: Mutex<Log>,
    acked_count: AtomicUsize,
    send_errors: Mutex<Vec<String>>,
    consumed: Mutex<Log>,
    consumed_count: AtomicUsize,
    /// Two different values read at one offset.
    conflicts: Mutex<Vec<String>>,
    /// librdkafka's notices that a connection to a broker dropped (the killed one): expected.
    transport_notices: AtomicUsize,
    consumer_errors: Mutex<Vec<String>>,
}

impl Seen {
    fn new() -> Seen {
        let log = || Mutex::new(vec![BTreeMap::new(); PARTITIONS as usize]);
        Seen {
            acked: log(),
            consumed: log(),
            ..Seen::default()
        }
    }
}

#[test]
fn rdkafka_idempotent_producer_and_group_consumer_survive_leader_kills() {
    let mut brokers = cluster::start_cluster().expect("start the cluster");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if let Err(e) = rt.block_on(run(&mut brokers)) {
        let tails: Vec<String> = brokers
            .iter()
            .enumerate()
            .map(|(i, b)| format!("--- broker {} log tail ---\n{}", i + 1, b.log_tail(60)))
            .collect();
        panic!("{e:#}\n{}", tails.join("\n"));
    }
}

async fn run(brokers: &mut [BrokerProcess]) -> Result<()> {
    let started = Instant::now();
    let bootstrap = brokers
        .iter()
        .map(BrokerProcess::bootstrap)
        .collect::<Vec<_>>()
        .join(",");
    create_topic(&bootstrap).await?;
    wait_for("the ISR full", WAIT, || {
        placement(&brokers[0].bootstrap(), TOPIC).filter(full_isr)
    })?;

    let seen = Arc::new(Seen::new());
    let stop_producing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(
        bootstrap.clone(),
        seen.clone(),
        stop_producing.clone(),
    ));
    let consumer = tokio::spawn(consume(
        bootstrap.clone(),
        seen.clone(),
        stop_consuming.clone(),
    ));
    let acked = || seen.acked_count.load(Ordering::Relaxed);
    let consumed = || seen.consumed_count.load(Ordering::Relaxed);
    wait_for("first acks and messages", WAIT, || {
        (acked() > 100 && consumed() > 100).then_some(())
    })?;

    let mut failovers = Vec::new();
    for k in 0..KILLS {
        let p = wait_for("a placement", WAIT, || {
            placement(&brokers[0].bootstrap(), TOPIC)
        })?;
        let victim_id = p[&((k as i64 % PARTITIONS) as i32)].leader;
        ensure!(
            (1..=CLUSTER_SIZE as i32).contains(&victim_id),
            "no leader: {p:?}"
        );
        let victim = victim_id as usize - 1;
        let witness = brokers[(victim + 1) % CLUSTER_SIZE].bootstrap();
        let (acked_before, consumed_before) = (acked(), consumed());
        let killed_at = Instant::now();
        brokers[victim].kill()?;
        wait_for("new leaders from the ISR", FAILOVER_BOUND, || {
            placement(&witness, TOPIC)
                .filter(|p| p.values().all(|v| v.leader > 0 && v.leader != victim_id))
        })?;
        failovers.push(killed_at.elapsed());
        wait_for("acks without the killed broker", WAIT, || {
            (acked() > acked_before + PROGRESS_AFTER_KILL).then_some(())
        })?;
        wait_for("the consumer to go on", WAIT, || {
            (consumed() > consumed_before + PROGRESS_AFTER_KILL).then_some(())
        })?;
        brokers[victim].start_again()?;
        wait_for("the ISR full again", WAIT, || {
            placement(&witness, TOPIC).filter(full_isr)
        })?;
    }

    stop_producing.store(true, Ordering::Relaxed);
    producer.await.context("producer task")??;
    wait_for("every acknowledged message consumed", WAIT, || {
        let acked = seen.acked.lock().expect("acked");
        let consumed = seen.consumed.lock().expect("consumed");
        let all = acked
            .iter()
            .zip(consumed.iter())
            .all(|(a, c)| a.keys().all(|o| c.contains_key(o)));
        all.then_some(())
    })?;
    stop_consuming.store(true, Ordering::Relaxed);
    consumer.await.context("consumer task")??;

    check(&seen)?;
    let ms: Vec<String> = failovers
        .iter()
        .map(|d| format!("{} ms", d.as_millis()))
        .collect();
    println!(
        "rdkafka failover: {} acked, {} consumed, leader failovers {}, {} transport notices, {} ms in all",
        acked(),
        consumed(),
        ms.join(", "),
        seen.transport_notices.load(Ordering::Relaxed),
        started.elapsed().as_millis()
    );
    Ok(())
}

async fn create_topic(bootstrap: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("admin client")?;
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let topic = NewTopic::new(TOPIC, PARTITIONS as i32, TopicReplication::Fixed(3))
        .set("min.insync.replicas", "2");
    for r in admin.create_topics(&[topic], &opts).await? {
        r.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

/// Value n to partition n % PARTITIONS (so each partition's values grow) until told to stop,
/// then wait for every delivery.
async fn produce(bootstrap: String, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "300000")
        .set("retry.backoff.ms", "100")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .context("producer")?;
    let mut in_flight: VecDeque<(i64, DeliveryFuture)> = VecDeque::new();
    let mut n = 0i64;
    while !stop.load(Ordering::Relaxed) {
        let value = n.to_string();
        let record = FutureRecord::<(), _>::to(TOPIC)
            .partition((n % PARTITIONS) as i32)
            .payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => {
                in_flight.push_back((n, delivery));
                n += 1;
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {}
            Err((e, _)) => seen.send_errors.lock().expect("errors").push(e.to_string()),
        }
        if in_flight.len() >= IN_FLIGHT_MAX {
            let (n, delivery) = in_flight.pop_front().expect("in flight");
            settle(&seen, n, delivery).await;
        }
    }
    while let Some((n, delivery)) = in_flight.pop_front() {
        settle(&seen, n, delivery).await;
    }
    Ok(())
}

async fn settle(seen: &Seen, n: i64, delivery: DeliveryFuture) {
    let failed = match delivery.await {
        Ok(Ok(d)) if i64::from(d.partition) == n % PARTITIONS => {
            let mut acked = seen.acked.lock().expect("acked");
            match acked[d.partition as usize].insert(d.offset, n) {
                None => {
                    seen.acked_count.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Some(other) => format!(
                    "{n} and {other} both acknowledged at {}/{}",
                    d.partition, d.offset
                ),
            }
        }
        Ok(Ok(d)) => format!("{n} delivered to partition {}", d.partition),
        Ok(Err((e, _))) => format!("{n}: {e}"),
        Err(_) => format!("{n}: delivery canceled"),
    };
    seen.send_errors.lock().expect("errors").push(failed);
}

/// A consumer group member reading the topic from the start until told to stop.
async fn consume(bootstrap: String, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> Result<()> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "rdkafka-failover")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .context("consumer")?;
    consumer.subscribe(&[TOPIC])?;
    while !stop.load(Ordering::Relaxed) {
        let Ok(r) = tokio::time::timeout(CONSUMER_POLL, consumer.recv()).await else {
            continue;
        };
        match r {
            Ok(m) => {
                let value = m
                    .payload()
                    .and_then(|p| std::str::from_utf8(p).ok())
                    .and_then(|s| s.parse::<i64>().ok())
                    .with_context(|| format!("payload at {}/{}", m.partition(), m.offset()))?;
                let mut consumed = seen.consumed.lock().expect("consumed");
                // Redelivery after a rebalance is allowed (the group commits at least once);
                // a different value at the same offset is not.
                if let Some(old) = consumed[m.partition() as usize].insert(m.offset(), value)
                    && old != value
                {
                    seen.conflicts.lock().expect("conflicts").push(format!(
                        "{}/{}: {old} then {value}",
                        m.partition(),
                        m.offset()
                    ));
                }
                seen.consumed_count.fetch_add(1, Ordering::Relaxed);
            }
            Err(KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure)) => {
                seen.transport_notices.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => seen
                .consumer_errors
                .lock()
                .expect("errors")
                .push(e.to_string()),
        }
    }
    Ok(())
}

fn check(seen: &Seen) -> Result<()> {
    let errors = seen.send_errors.lock().expect("errors");
    ensure!(
        errors.is_empty(),
        "deliveries failed: {:?}",
        &errors[..errors.len().min(5)]
    );
    let errors = seen.consumer_errors.lock().expect("errors");
    ensure!(
        errors.is_empty(),
        "consumer errors: {:?}",
        &errors[..errors.len().min(5)]
    );
    let conflicts = seen.conflicts.lock().expect("conflicts");
    ensure!(
        conflicts.is_empty(),
        "two values at one offset: {conflicts:?}"
    );
    let acked = seen.acked.lock().expect("acked");
    let consumed = seen.consumed.lock().expect("consumed");
    for (p, (acked, consumed)) in acked.iter().zip(consumed.iter()).enumerate() {
        for (o, v) in acked {
            if consumed.get(o) != Some(v) {
                bail!(
                    "partition {p}: {v} acknowledged at {o}, read {:?}",
                    consumed.get(o)
                );
            }
        }
        // BTreeMap: values in offset order.
        let values: Vec<i64> = consumed.values().copied().collect();
        ensure!(
            values.windows(2).all(|w| w[0] < w[1]),
            "partition {p} holds a duplicate or is out of order"
        );
        ensure!(values.iter().all(|v| v % PARTITIONS == p as i64));
    }
    Ok(())
}

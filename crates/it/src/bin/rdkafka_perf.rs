//! Producer/consumer throughput with a standard client (librdkafka via the `rdkafka` crate), in the
//! spirit of librdkafka's own perf tool: N messages of S bytes into P partitions.
//!
//!   rdkafka-perf --spawn --acks 1             # start target/<profile>/streamforge, produce, consume
//!   rdkafka-perf --bootstrap 127.0.0.1:9092 --acks all --messages 1000000
//!   rdkafka-perf --bootstrap 127.0.0.1:9092 --acks all --idempotence --produce-only
//!   rdkafka-perf --bootstrap 127.0.0.1:9092 --acks all --transaction-messages 1000 --produce-only
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use streamforge_it::BrokerProcess;

const QUEUE_FULL_BACKOFF: Duration = Duration::from_micros(200);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(600);
/// Sleep between looks at the delivery count while waiting for every acknowledgement.
const DELIVERY_POLL: Duration = Duration::from_micros(20);
const CONSUME_TIMEOUT: Duration = Duration::from_secs(600);
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "Producer/consumer throughput against a Kafka-compatible broker (librdkafka)")]
struct Args {
    /// Broker to measure; without it, --spawn starts the streamforge binary on a free port.
    #[arg(long)]
    bootstrap: Option<String>,
    /// Start `streamforge broker` ($STREAMFORGE_BIN or next to this binary) with a temp data dir.
    #[arg(long)]
    spawn: bool,
    /// Topic name (created with --partitions if it does not exist).
    #[arg(long, default_value = "perf")]
    topic: String,
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 100)]
    size_bytes: usize,
    #[arg(long, default_value_t = 10)]
    partitions: i32,
    /// Producer acks: 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// librdkafka batch.num.messages.
    #[arg(long, default_value_t = 2000)]
    batch_messages: u32,
    #[arg(long, default_value_t = 5)]
    linger_ms: u32,
    #[arg(long, default_value = "none")]
    compression: String,
    /// Skip the consume phase.
    #[arg(long)]
    produce_only: bool,
    /// Skip the produce phase (consume an existing topic).
    #[arg(long)]
    consume_only: bool,
    /// enable.idempotence=true (needs --acks all; implied by --transaction-messages).
    #[arg(long)]
    idempotence: bool,
    /// Transactional producer: commit every N messages (0: no transactions). The producer id is
    /// fetched (init_transactions) before the clock starts.
    #[arg(long, default_value_t = 0)]
    transaction_messages: u64,
}

#[derive(Default)]
struct Counts {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for Counts {}

impl ProducerContext for Counts {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let _spawned;
    let bootstrap = match (&args.bootstrap, args.spawn) {
        (Some(b), false) => b.clone(),
        (None, true) => {
            let b = BrokerProcess::start(&[]).context("starting the broker")?;
            let addr = b.bootstrap();
            eprintln!("spawned broker on {addr} (log {})", b.log_path().display());
            _spawned = b;
            addr
        }
        _ => bail!("give exactly one of --bootstrap or --spawn"),
    };
    ensure_topic(&bootstrap, &args)?;
    println!(
        "# {} messages x {} bytes, {} partitions, acks={}, batch.num.messages={}, linger.ms={}, compression={}, idempotence={}, transaction.messages={}",
        args.messages,
        args.size_bytes,
        args.partitions,
        args.acks,
        args.batch_messages,
        args.linger_ms,
        args.compression,
        args.idempotence,
        args.transaction_messages
    );
    if !args.consume_only {
        let (secs, delivered) = produce(&bootstrap, &args)?;
        report("produce", delivered, args.size_bytes, secs);
    }
    if !args.produce_only {
        let (secs, n, bytes) = consume(&bootstrap, &args)?;
        report("consume", n, (bytes / n.max(1)) as usize, secs);
    }
    Ok(())
}

fn report(what: &str, messages: u64, size_bytes: usize, secs: f64) {
    let mb = messages as f64 * size_bytes as f64 / (1024.0 * 1024.0);
    println!(
        "{what}: {messages} msgs in {secs:.3} s = {:.0} msg/s, {:.1} MiB/s",
        messages as f64 / secs,
        mb / secs
    );
}

fn ensure_topic(bootstrap: &str, args: &Args) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let results = rt.block_on(admin.create_topics(
        &[NewTopic::new(
            &args.topic,
            args.partitions,
            TopicReplication::Fixed(1),
        )],
        &opts,
    ))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => bail!("create topic {t}: {e}"),
        }
    }
    Ok(())
}

fn produce(bootstrap: &str, args: &Args) -> Result<(f64, u64)> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("acks", &args.acks)
        .set("batch.num.messages", args.batch_messages.to_string())
        .set("linger.ms", args.linger_ms.to_string())
        .set("compression.type", &args.compression)
        .set("queue.buffering.max.messages", "500000")
        .set("queue.buffering.max.kbytes", "1048576")
        // A transactional producer is idempotent (librdkafka refuses the pair otherwise).
        .set(
            "enable.idempotence",
            (args.idempotence || args.transaction_messages > 0).to_string(),
        );
    if args.transaction_messages > 0 {
        config.set("transactional.id", format!("rdkafka-perf-{}", args.topic));
    }
    let producer: ThreadedProducer<Counts> = config.create_with_context(Counts::default())?;
    if args.transaction_messages > 0 {
        producer.init_transactions(TXN_TIMEOUT)?;
    }
    let payload: Vec<u8> = (0..args.size_bytes)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let mut txns = TxnTimes::default();
    let start = Instant::now();
    if args.transaction_messages == 0 {
        send_all(&producer, args, &payload, args.messages)?;
    } else {
        let mut sent = 0;
        while sent < args.messages {
            let n = args.transaction_messages.min(args.messages - sent);
            let tb = Instant::now();
            producer.begin_transaction()?;
            send_all(&producer, args, &payload, n)?;
            let t0 = Instant::now();
            txns.send_s.push((t0 - tb).as_secs_f64());
            wait_delivered(&producer, sent + n)?;
            let t1 = Instant::now();
            producer.commit_transaction(TXN_TIMEOUT)?;
            txns.flush_s.push((t1 - t0).as_secs_f64());
            txns.commit_s.push(t1.elapsed().as_secs_f64());
            sent += n;
        }
    }
    wait_delivered(&producer, args.messages)?;
    let secs = start.elapsed().as_secs_f64();
    let c = producer.context();
    let failed = c.failed.load(Ordering::Relaxed);
    ensure!(failed == 0, "{failed} messages failed");
    txns.report(args.transaction_messages);
    Ok((secs, c.delivered.load(Ordering::Relaxed)))
}

/// Per transaction: from its last send to its last acknowledgement ("flush"), then
/// commit_transaction (EndTxn) after that.
#[derive(Default)]
struct TxnTimes {
    send_s: Vec<f64>,
    flush_s: Vec<f64>,
    commit_s: Vec<f64>,
}

impl TxnTimes {
    fn report(mut self, per_txn: u64) {
        if self.commit_s.is_empty() {
            return;
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64 * 1000.0;
        println!(
            "transaction means: begin+send {:.3} ms, flush {:.3} ms, commit {:.3} ms",
            mean(&self.send_s),
            mean(&self.flush_s),
            mean(&self.commit_s)
        );
        let ms = |v: &mut Vec<f64>, q: f64| {
            v.sort_by(f64::total_cmp);
            v[((v.len() - 1) as f64 * q).round() as usize] * 1000.0
        };
        println!(
            "transactions: {} x {per_txn} msgs, flush p50 {:.3} ms p99 {:.3} ms, commit p50 {:.3} ms p99 {:.3} ms",
            self.commit_s.len(),
            ms(&mut self.flush_s, 0.5),
            ms(&mut self.flush_s, 0.99),
            ms(&mut self.commit_s, 0.5),
            ms(&mut self.commit_s, 0.99),
        );
    }
}

/// Waits until `messages` delivery reports have arrived and librdkafka holds no message (its
/// out queue is empty). Not `flush()`: rust-rdkafka's flush, also called by its
/// `commit_transaction`, sleeps a whole 100 ms poll on a ThreadedProducer whenever a message is
/// still held (the polling thread takes the reports), which put 100 ms on a third of the
/// commits of 1,000-message transactions and up to 100 ms on the end of every run.
fn wait_delivered(producer: &ThreadedProducer<Counts>, messages: u64) -> Result<()> {
    let c = producer.context();
    let start = Instant::now();
    while c.delivered.load(Ordering::Relaxed) + c.failed.load(Ordering::Relaxed) < messages
        || producer.in_flight_count() > 0
    {
        ensure!(
            start.elapsed() < FLUSH_TIMEOUT,
            "not every message acknowledged in {FLUSH_TIMEOUT:?}"
        );
        std::thread::sleep(DELIVERY_POLL);
    }
    Ok(())
}

fn send_all(
    producer: &ThreadedProducer<Counts>,
    args: &Args,
    payload: &[u8],
    messages: u64,
) -> Result<()> {
    for _ in 0..messages {
        let mut record: BaseRecord<'_, (), [u8]> = BaseRecord::to(&args.topic).payload(payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(QUEUE_FULL_BACKOFF);
                }
                Err((e, _)) => bail!("send: {e}"),
            }
        }
    }
    Ok(())
}

fn consume(bootstrap: &str, args: &Args) -> Result<(f64, u64, u64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "rdkafka-perf")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .set("queued.min.messages", "1000000")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..args.partitions {
        tpl.add_partition_offset(&args.topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let (mut n, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    while n < args.messages {
        ensure!(
            start.elapsed() < CONSUME_TIMEOUT,
            "consumed only {n} messages in {CONSUME_TIMEOUT:?}"
        );
        match consumer.poll(Duration::from_millis(500)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => bail!("consume: {e}"),
            Some(Ok(m)) => {
                n += 1;
                bytes += m.payload_len() as u64;
            }
        }
    }
    Ok((start.elapsed().as_secs_f64(), n, bytes))
}

//! The compatibility-matrix dataset (the same shape as the Python and node suites) and its
//! checks: every message back exactly once with key, value and headers; offsets contiguous from
//! 0 per partition; production order kept per partition; acknowledged offsets where found.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

pub const MESSAGES: u32 = 10_000;
pub const PARTITIONS: i32 = 4;
pub const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const KEYS: u32 = 97;
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);
const CONSUME_TIMEOUT: Duration = Duration::from_secs(120);
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(5);

pub fn key_of(i: u32) -> Vec<u8> {
    format!("key-{}", i % KEYS).into_bytes()
}

pub fn value_of(i: u32, codec: &str) -> Vec<u8> {
    let mut v = format!("value-{i}-{codec}-").into_bytes();
    v.extend(std::iter::repeat_n(b'x', 20 + (i % 40) as usize));
    v
}

pub fn headers_of(i: u32, codec: &str) -> Vec<(String, Vec<u8>)> {
    vec![
        ("seq".into(), i.to_string().into_bytes()),
        ("codec".into(), codec.as_bytes().to_vec()),
        ("bin".into(), vec![0, 1, 2, 255 - (i % 256) as u8]),
    ]
}

/// One consumed message.
#[derive(Debug, Clone)]
pub struct Msg {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Collects delivery reports: seq -> (partition, offset), plus errors.
#[derive(Default)]
pub struct Acks {
    pub acked: Mutex<HashMap<u32, (i32, i64)>>,
    pub errors: Mutex<Vec<String>>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = Box<u32>;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u32>) {
        match result {
            Ok(m) => {
                self.acked
                    .lock()
                    .expect("acks lock")
                    .insert(*seq, (m.partition(), m.offset()));
            }
            Err((e, _)) => self
                .errors
                .lock()
                .expect("errors lock")
                .push(format!("seq {seq}: {e}")),
        }
    }
}

/// Produce seqs `0..n` with `codec` (acks=all); returns seq -> (partition, offset).
pub fn produce(
    bootstrap: &str,
    topic: &str,
    codec: &str,
    n: u32,
) -> Result<HashMap<u32, (i32, i64)>> {
    let producer: ThreadedProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.type", codec)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.num.messages", "1000")
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "60000")
        .create_with_context(Acks::default())
        .context("creating producer")?;
    for i in 0..n {
        let key = key_of(i);
        let value = value_of(i, codec);
        let mut headers = OwnedHeaders::new();
        for (k, v) in headers_of(i, codec) {
            headers = headers.insert(Header {
                key: &k,
                value: Some(&v),
            });
        }
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(i))
            .key(&key)
            .payload(&value)
            .headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(QUEUE_FULL_BACKOFF);
                }
                Err((e, _)) => bail!("send seq {i}: {e}"),
            }
        }
    }
    producer.flush(FLUSH_TIMEOUT).context("flush")?;
    let ctx = producer.context();
    let errors = ctx.errors.lock().expect("errors lock");
    ensure!(
        errors.is_empty(),
        "{} delivery errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    let acked = ctx.acked.lock().expect("acks lock").clone();
    ensure!(
        acked.len() == n as usize,
        "{} of {n} acknowledged",
        acked.len()
    );
    Ok(acked)
}

/// Assign all partitions from the beginning (no group management) and read `n` messages.
pub fn consume(bootstrap: &str, topic: &str, partitions: i32, n: usize) -> Result<Vec<Msg>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("sf-it-{topic}"))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "200")
        .create()
        .context("creating consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut out = Vec::with_capacity(n);
    let deadline = Instant::now() + CONSUME_TIMEOUT;
    while out.len() < n && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => bail!("consume error: {e}"),
            Some(Ok(m)) => out.push(Msg {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (
                                    h.key.to_string(),
                                    h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
        }
    }
    Ok(out)
}

/// Check a round trip of seqs `0..n` (see the module docs).
pub fn verify(
    consumed: &[Msg],
    codec: &str,
    n: u32,
    acked: &HashMap<u32, (i32, i64)>,
) -> Result<()> {
    ensure!(
        consumed.len() == n as usize,
        "consumed {} messages, want {n}",
        consumed.len()
    );
    let mut seen = vec![false; n as usize];
    let mut key_partition: HashMap<Vec<u8>, i32> = HashMap::new();
    let mut by_partition: BTreeMap<i32, Vec<(i64, u32)>> = BTreeMap::new();
    for m in consumed {
        let seq_raw = m
            .headers
            .iter()
            .find(|(k, _)| k == "seq")
            .map(|(_, v)| v.clone())
            .context("message without seq header")?;
        let seq: u32 = std::str::from_utf8(&seq_raw)?.parse()?;
        ensure!(seq < n, "unexpected seq {seq}");
        ensure!(!seen[seq as usize], "duplicate seq {seq}");
        seen[seq as usize] = true;
        ensure!(
            m.key.as_deref() == Some(&key_of(seq)[..]),
            "seq {seq}: key {:?}",
            m.key
        );
        ensure!(
            m.value.as_deref() == Some(&value_of(seq, codec)[..]),
            "seq {seq}: wrong value"
        );
        ensure!(
            m.headers == headers_of(seq, codec),
            "seq {seq}: headers {:?}",
            m.headers
        );
        let kp = *key_partition
            .entry(m.key.clone().unwrap_or_default())
            .or_insert(m.partition);
        ensure!(
            kp == m.partition,
            "key {:?} in partitions {kp} and {}",
            m.key,
            m.partition
        );
        ensure!(
            acked.get(&seq) == Some(&(m.partition, m.offset)),
            "seq {seq}: acknowledged at {:?}, found at {:?}",
            acked.get(&seq),
            (m.partition, m.offset)
        );
        by_partition
            .entry(m.partition)
            .or_default()
            .push((m.offset, seq));
    }
    ensure!(
        by_partition.len() >= 2,
        "only {} partition(s) used",
        by_partition.len()
    );
    for (p, entries) in &mut by_partition {
        entries.sort_unstable();
        for (idx, (offset, seq)) in entries.iter().enumerate() {
            ensure!(
                *offset == idx as i64,
                "partition {p}: offset {offset} at index {idx}"
            );
            if idx > 0 {
                ensure!(
                    *seq > entries[idx - 1].1,
                    "partition {p}: order broken at offset {offset}"
                );
            }
        }
    }
    Ok(())
}

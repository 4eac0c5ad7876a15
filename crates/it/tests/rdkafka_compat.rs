//! The Rust `rdkafka` crate (librdkafka built from source) against the real broker: 10,000 keyed
//! messages with headers across several partitions for every compression codec, checked for
//! content, per-partition order and offsets; plus restart durability.

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use streamforge_it::BrokerProcess;
use streamforge_it::dataset::{self, CODECS, MESSAGES, PARTITIONS};

fn create_topic(bootstrap: &str, name: &str, partitions: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("admin client")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let results = rt.block_on(admin.create_topics(
        &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
        &opts,
    ))?;
    for r in results {
        r.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

fn unwrap_or_log_tail<T>(broker: &BrokerProcess, r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e:#}\n--- broker log tail ---\n{}", broker.log_tail(150)),
    }
}

#[test]
fn rdkafka_round_trip_every_codec() {
    let broker = BrokerProcess::start(&[]).expect("start broker");
    for codec in CODECS {
        let topic = format!("rdkafka-{codec}");
        let run = || -> Result<()> {
            create_topic(&broker.bootstrap(), &topic, PARTITIONS)?;
            let acked = dataset::produce(&broker.bootstrap(), &topic, codec, MESSAGES)?;
            let consumed =
                dataset::consume(&broker.bootstrap(), &topic, PARTITIONS, MESSAGES as usize)?;
            dataset::verify(&consumed, codec, MESSAGES, &acked)
                .with_context(|| format!("codec {codec}"))
        };
        unwrap_or_log_tail(&broker, run());
    }
}

#[test]
fn rdkafka_acknowledged_messages_survive_sigterm_and_sigkill() {
    let mut broker = BrokerProcess::start(&[]).expect("start broker");
    for (i, hard) in [false, true].into_iter().enumerate() {
        let topic = format!("rdkafka-restart-{i}");
        let n = 3_000;
        let run = |broker: &mut BrokerProcess| -> Result<()> {
            create_topic(&broker.bootstrap(), &topic, PARTITIONS)?;
            let acked = dataset::produce(&broker.bootstrap(), &topic, "zstd", n)?;
            broker.restart(hard)?;
            let consumed = dataset::consume(&broker.bootstrap(), &topic, PARTITIONS, n as usize)?;
            dataset::verify(&consumed, "zstd", n, &acked)
                .with_context(|| format!("after restart (hard={hard})"))
        };
        let r = run(&mut broker);
        unwrap_or_log_tail(&broker, r);
    }
}

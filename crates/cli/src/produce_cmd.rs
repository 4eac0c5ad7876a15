//! `streamforge produce`: one record per input line, from stdin or a file.
use std::io::BufRead;

use bytes::Bytes;
use serde_json::json;
use streamforge_client::{Acks, Compression, Header, Producer, ProducerConfig, ProducerRecord};

use crate::client_common::{ConnArgs, block_on, parse_kv, print_json};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    /// Topic to produce to.
    topic: String,
    /// Read lines from this file instead of stdin.
    #[arg(long, short = 'f')]
    file: Option<std::path::PathBuf>,
    /// Split each line at the first SEP into key and value (no key otherwise).
    #[arg(long, short = 'K')]
    key_separator: Option<String>,
    /// Header KEY=VALUE added to every record (repeatable).
    #[arg(long = "header", short = 'H', value_parser = parse_kv)]
    headers: Vec<(String, String)>,
    /// Produce to this partition instead of using the partitioner.
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: Acks,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: Compression,
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    #[arg(long, default_value_t = 16384)]
    batch_size: usize,
    /// Idempotent producer (producer id + sequences; needs acks=all).
    #[arg(long)]
    idempotence: bool,
    /// Skip empty lines.
    #[arg(long)]
    skip_empty: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let producer = Producer::new(ProducerConfig {
        client: args.conn.client_config(),
        acks: args.acks,
        compression: args.compression,
        linger_ms: args.linger_ms,
        batch_size_bytes: args.batch_size,
        enable_idempotence: args.idempotence,
        ..Default::default()
    })
    .await?;
    let headers: Vec<Header> = args
        .headers
        .iter()
        .map(|(k, v)| Header {
            key: k.clone(),
            value: Some(Bytes::from(v.clone())),
        })
        .collect();
    let input: Box<dyn BufRead> = match &args.file {
        Some(p) => Box::new(std::io::BufReader::new(std::fs::File::open(p)?)),
        None => Box::new(std::io::BufReader::new(std::io::stdin())),
    };
    let mut pending = Vec::new();
    let mut count = 0u64;
    for line in input.lines() {
        let line = line?;
        if args.skip_empty && line.is_empty() {
            continue;
        }
        let (key, value) = match &args.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.as_bytes()), v.as_bytes()),
                None => (None, line.as_bytes()),
            },
            None => (None, line.as_bytes()),
        };
        let mut rec = ProducerRecord::new(&args.topic, value).headers(&headers);
        rec.key = key;
        rec.partition = args.partition;
        pending.push(producer.send(rec).await?);
        count += 1;
        // Check results as we go so memory stays bounded on long inputs.
        if pending.len() >= 10_000 {
            producer.flush().await?;
            for f in pending.drain(..) {
                f.await?;
            }
        }
    }
    producer.flush().await?;
    let mut last = None;
    for f in pending {
        last = Some(f.await?);
    }
    producer.close().await?;
    if args.conn.json {
        print_json(
            &json!({"topic": args.topic, "records": count, "last": last.map(|m| json!({"partition": m.partition, "offset": m.offset}))}),
        );
    } else {
        eprintln!("Produced {count} records to {}", args.topic);
    }
    Ok(())
}

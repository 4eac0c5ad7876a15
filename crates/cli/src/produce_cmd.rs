//! `streamforge produce`: one record per delimited chunk of bytes (a line by default), from
//! stdin or a file; binary-safe, nothing needs to be UTF-8.
use std::io::BufRead;

use bytes::Bytes;
use serde_json::json;
use streamforge_client::{Acks, Compression, Header, Producer, ProducerConfig, ProducerRecord};

use crate::client_common::{ConnArgs, block_on, parse_kv, print_json};
use crate::record_format::{next_record, split_key, unescape};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    /// Topic to produce to.
    topic: String,
    /// Read records from this file instead of stdin.
    #[arg(long, short = 'f')]
    file: Option<std::path::PathBuf>,
    /// What ends each record ('\n', '\t', '\0' and '\\' escapes; several bytes allowed).
    #[arg(long, short = 'D', default_value = "\\n")]
    delimiter: String,
    /// Split each record at the first SEP into key and value (no key otherwise; escapes as
    /// --delimiter).
    #[arg(long, short = 'K', visible_alias = "key-delimiter")]
    key_separator: Option<String>,
    /// Header KEY=VALUE added to every record (repeatable).
    #[arg(long = "header", short = 'H', value_parser = parse_kv)]
    headers: Vec<(String, String)>,
    /// Produce to this partition instead of using the partitioner.
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// Acknowledgements to wait for: 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: Acks,
    /// Batch compression: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: Compression,
    /// How long a batch waits for more records before it is sent (`linger.ms`).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Most bytes per partition batch (`batch.size`).
    #[arg(long, default_value_t = 16384)]
    batch_size: usize,
    /// Idempotent producer (producer id + sequences; needs acks=all).
    #[arg(long)]
    idempotence: bool,
    /// Skip empty records.
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
    let mut input: Box<dyn BufRead> = match &args.file {
        Some(p) => Box::new(std::io::BufReader::new(std::fs::File::open(p)?)),
        None => Box::new(std::io::BufReader::new(std::io::stdin())),
    };
    let delimiter = unescape(&args.delimiter);
    anyhow::ensure!(!delimiter.is_empty(), "--delimiter must not be empty");
    let key_delimiter = args.key_separator.as_deref().map(unescape);
    anyhow::ensure!(
        key_delimiter.as_ref().is_none_or(|d| !d.is_empty()),
        "--key-delimiter must not be empty"
    );
    let mut pending = Vec::new();
    let mut count = 0u64;
    while let Some(record) = next_record(&mut input, &delimiter)? {
        if args.skip_empty && record.is_empty() {
            continue;
        }
        let (key, value) = match &key_delimiter {
            Some(d) => split_key(&record, d),
            None => (None, &record[..]),
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

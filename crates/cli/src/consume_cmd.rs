//! `streamforge consume`: print records from the beginning, the end, an offset or a
//! timestamp, with or without a consumer group.
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;
use streamforge_client::offsets::CommittedOffset;
use streamforge_client::{Admin, Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};

use crate::client_common::{ConnArgs, block_on};
use crate::record_format;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    /// Topic to consume.
    topic: String,
    /// Join this consumer group (subscribe) and commit offsets.
    #[arg(long, short = 'g')]
    group: Option<String>,
    /// Start position: beginning, end, offset:N or timestamp:MS (with a group: used when the
    /// group has no committed offset; only beginning/end).
    #[arg(long, default_value = "end")]
    from: String,
    /// Same as `--from beginning` (kafka-console-consumer's flag).
    #[arg(long, conflicts_with = "from")]
    from_beginning: bool,
    /// Only this partition (without a group).
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// Stop after this many records.
    #[arg(long, short = 'n')]
    max_messages: Option<u64>,
    /// Stop when no record arrives for this long.
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// Output: value, kv (key SEP value), json (one object per line), or a kcat format string
    /// such as '%t %p %o %k %v\n' (%t topic, %p partition, %o offset, %k key, %v value,
    /// %T timestamp ms, %h headers, %K / %S key / value length, %% a percent sign).
    #[arg(long, short = 'f', default_value = "value")]
    format: String,
    /// Separator between key and value for --format kv.
    #[arg(long, default_value = "\t")]
    key_separator: String,
    /// Also print headers (value and kv formats).
    #[arg(long)]
    print_headers: bool,
}

enum Start {
    Beginning,
    End,
    Offset(i64),
    Timestamp(i64),
}

fn parse_start(s: &str) -> anyhow::Result<Start> {
    Ok(match s {
        "beginning" | "earliest" => Start::Beginning,
        "end" | "latest" => Start::End,
        _ => match s.split_once(':') {
            Some(("offset", n)) => Start::Offset(n.parse()?),
            Some(("timestamp", n)) => Start::Timestamp(n.parse()?),
            _ => anyhow::bail!("--from must be beginning, end, offset:N or timestamp:MS"),
        },
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let start = if args.from_beginning {
        Start::Beginning
    } else {
        parse_start(&args.from)?
    };
    let format = if args.conn.json {
        "json".to_string()
    } else {
        args.format.clone()
    };
    let pieces = if format.contains('%') {
        Some(record_format::parse(&format).map_err(anyhow::Error::msg)?)
    } else {
        anyhow::ensure!(
            ["value", "kv", "json"].contains(&format.as_str()),
            "--format must be value, kv, json or a format string with %-tokens"
        );
        None
    };
    let reset = match start {
        Start::Beginning => OffsetReset::Earliest,
        _ => OffsetReset::Latest,
    };
    // Offsets are committed explicitly at exit, for exactly the records printed.
    let mut consumer = Consumer::new(ConsumerConfig {
        client: args.conn.client_config(),
        group_id: args.group.clone(),
        auto_offset_reset: reset,
        enable_auto_commit: false,
        ..Default::default()
    });
    if args.group.is_some() {
        consumer.subscribe(std::slice::from_ref(&args.topic))?;
    } else {
        let partitions: Vec<i32> = match args.partition {
            Some(p) => vec![p],
            None => Admin::new(args.conn.client_config())
                .describe_topics(std::slice::from_ref(&args.topic))
                .await?[0]
                .partitions
                .iter()
                .map(|p| p.partition)
                .collect(),
        };
        consumer.assign(
            &partitions
                .iter()
                .map(|p| (args.topic.clone(), *p))
                .collect::<Vec<_>>(),
        );
        match start {
            Start::Beginning => consumer.seek_to_beginning().await?,
            Start::End => consumer.seek_to_end().await?,
            Start::Offset(o) => {
                for p in &partitions {
                    consumer.seek(&args.topic, *p, o)?;
                }
            }
            Start::Timestamp(ts) => consumer.seek_to_timestamp(ts).await?,
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut count = 0u64;
    // Next offset per partition after the records printed: what a group commits.
    let mut printed: HashMap<(String, i32), CommittedOffset> = HashMap::new();
    let mut last_record = Instant::now();
    let max = args.max_messages.unwrap_or(u64::MAX);
    'outer: while count < max {
        let recs = consumer.poll(Duration::from_millis(200)).await?;
        if recs.is_empty() {
            out.flush()?;
            if let Some(idle) = args.idle_timeout_ms
                && last_record.elapsed() >= Duration::from_millis(idle)
            {
                break;
            }
            continue;
        }
        last_record = Instant::now();
        for r in &recs {
            match &pieces {
                Some(p) => record_format::write(&mut out, r, p)?,
                None => print_record(&mut out, r, &format, &args)?,
            }
            printed.insert(
                (r.topic.to_string(), r.partition),
                CommittedOffset {
                    offset: r.offset + 1,
                    metadata: None,
                },
            );
            count += 1;
            if count >= max {
                break 'outer;
            }
        }
    }
    out.flush()?;
    drop(out);
    if args.group.is_some() {
        consumer.commit_offsets(&printed).await?;
    }
    consumer.close().await?;
    Ok(())
}

fn text(b: &Option<bytes::Bytes>) -> String {
    b.as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn print_record(
    out: &mut impl Write,
    r: &ConsumerRecord,
    format: &str,
    args: &Args,
) -> std::io::Result<()> {
    match format {
        "json" => {
            let headers: serde_json::Map<String, serde_json::Value> = r
                .headers
                .iter()
                .map(|h| {
                    (
                        h.key.clone(),
                        h.value.as_ref().map_or(serde_json::Value::Null, |v| {
                            json!(String::from_utf8_lossy(v))
                        }),
                    )
                })
                .collect();
            let v = json!({
                "topic": &*r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp_ms,
                "key": r.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
                "value": r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
                "headers": headers,
            });
            writeln!(out, "{v}")
        }
        _ => {
            if args.print_headers && !r.headers.is_empty() {
                let hs: Vec<String> = r
                    .headers
                    .iter()
                    .map(|h| format!("{}={}", h.key, text(&h.value)))
                    .collect();
                write!(out, "{}{}", hs.join(","), args.key_separator)?;
            }
            // Keys and values as their bytes: binary-safe, as produce reads them.
            if format == "kv" {
                out.write_all(r.key.as_deref().unwrap_or_default())?;
                out.write_all(args.key_separator.as_bytes())?;
            }
            out.write_all(r.value.as_deref().unwrap_or_default())?;
            out.write_all(b"\n")
        }
    }
}

//! `streamforge dump-log <segment.log>`: offline view of a segment: batches, records, index
//! entries, with CRC verification. Exits non-zero when it finds corruption.
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde_json::json;
use streamforge_client::records::{BATCH_HEADER_BYTES, parse_header};

#[derive(clap::Args)]
pub struct Args {
    /// A segment `.log` file (its `.index` and `.timeindex` are read from beside it).
    segment: PathBuf,
    /// Print every record (offset, timestamp, key, value sizes).
    #[arg(long)]
    records: bool,
    /// With --records, also print keys and values (lossy UTF-8).
    #[arg(long)]
    print_values: bool,
    /// Print the offset and time index entries.
    #[arg(long)]
    index: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

/// The segment's base offset from its file name (20 digits).
fn base_offset(path: &Path) -> i64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let data = Bytes::from(
        std::fs::read(&args.segment)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.segment.display()))?,
    );
    let mut pos = 0usize;
    let (mut batches, mut records, mut bad) = (0u64, 0u64, 0u64);
    let mut problem: Option<String> = None;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.len() < BATCH_HEADER_BYTES {
            // A preallocated or torn tail: all zeros is padding, anything else is a torn batch.
            if rest.iter().any(|b| *b != 0) {
                problem = Some(format!(
                    "{} trailing bytes at position {pos} (torn batch)",
                    rest.len()
                ));
            }
            break;
        }
        let h = match parse_header(rest) {
            Ok(h) => h,
            Err(e) => {
                problem = Some(format!("bad batch header at position {pos}: {e}"));
                break;
            }
        };
        let total = h.total_bytes();
        if total > rest.len() {
            problem = Some(format!(
                "batch at position {pos} claims {total} bytes, {} remain (torn)",
                rest.len()
            ));
            break;
        }
        let batch = streamforge_client::records::RawBatch {
            header: h.clone(),
            bytes: data.slice(pos..pos + total),
        };
        let crc_ok = batch.verify_crc().is_ok();
        if !crc_ok {
            bad += 1;
        }
        batches += 1;
        records += h.record_count.max(0) as u64;
        let codec = h.compression().map(|c| c.name()).unwrap_or("unknown");
        if args.json {
            println!(
                "{}",
                json!({"type": "batch", "position": pos, "base_offset": h.base_offset, "last_offset": h.last_offset(),
                    "count": h.record_count, "size": total, "crc": h.crc, "crc_valid": crc_ok, "compression": codec,
                    "producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
                    "partition_leader_epoch": h.partition_leader_epoch, "max_timestamp": h.max_timestamp_ms,
                    "transactional": h.is_transactional(), "control": h.is_control()})
            );
        } else {
            println!(
                "baseOffset: {} lastOffset: {} count: {} position: {} size: {} crc: {:#010x} isValid: {} compression: {} producerId: {} producerEpoch: {} baseSequence: {} leaderEpoch: {} maxTimestamp: {}",
                h.base_offset,
                h.last_offset(),
                h.record_count,
                pos,
                total,
                h.crc,
                crc_ok,
                codec,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.partition_leader_epoch,
                h.max_timestamp_ms
            );
        }
        if args.records && crc_ok {
            match batch.records() {
                Ok(iter) => {
                    for r in iter {
                        match r {
                            Ok(r) => print_record(&args, &r),
                            Err(e) => {
                                problem = Some(format!(
                                    "bad record in batch at offset {}: {e}",
                                    h.base_offset
                                ));
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    problem = Some(format!(
                        "cannot decode batch at offset {}: {e}",
                        h.base_offset
                    ))
                }
            }
        }
        pos += total;
    }
    if args.index {
        dump_indexes(&args)?;
    }
    let summary = json!({"type": "summary", "segment": args.segment.display().to_string(), "base_offset": base_offset(&args.segment),
        "batches": batches, "records": records, "bytes": data.len(), "crc_errors": bad, "problem": problem});
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "Summary: {batches} batches, {records} records, {} bytes, {bad} CRC errors{}",
            data.len(),
            problem
                .as_ref()
                .map(|p| format!(", {p}"))
                .unwrap_or_default()
        );
    }
    anyhow::ensure!(
        bad == 0 && problem.is_none(),
        "segment {} is corrupt",
        args.segment.display()
    );
    Ok(())
}

fn print_record(args: &Args, r: &streamforge_client::Record) {
    let lossy = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    if args.json {
        let mut v = json!({"type": "record", "offset": r.offset, "timestamp": r.timestamp_ms,
            "key_size": r.key.as_ref().map_or(-1, |k| k.len() as i64), "value_size": r.value.as_ref().map_or(-1, |v| v.len() as i64),
            "headers": r.headers.len()});
        if args.print_values {
            v["key"] = json!(lossy(&r.key));
            v["value"] = json!(lossy(&r.value));
        }
        println!("{v}");
    } else {
        let mut line = format!(
            "| offset: {} timestamp: {} keySize: {} valueSize: {} headers: {}",
            r.offset,
            r.timestamp_ms,
            r.key.as_ref().map_or(-1, |k| k.len() as i64),
            r.value.as_ref().map_or(-1, |v| v.len() as i64),
            r.headers.len()
        );
        if args.print_values {
            line.push_str(&format!(
                " key: {} payload: {}",
                lossy(&r.key).unwrap_or_default(),
                lossy(&r.value).unwrap_or_default()
            ));
        }
        println!("{line}");
    }
}

/// Prints Kafka-format index entries: `.index` (relative offset u32, position u32) and
/// `.timeindex` (timestamp i64, relative offset u32). Zero entries after the first are
/// preallocated space and end the listing.
fn dump_indexes(args: &Args) -> anyhow::Result<()> {
    let base = base_offset(&args.segment);
    let idx_path = args.segment.with_extension("index");
    if let Ok(idx) = std::fs::read(&idx_path) {
        for (i, e) in idx.chunks_exact(8).enumerate() {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let position = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if i > 0 && rel == 0 && position == 0 {
                break;
            }
            if args.json {
                println!(
                    "{}",
                    json!({"type": "offset_index", "offset": base + i64::from(rel), "position": position})
                );
            } else {
                println!(
                    "index: offset: {} position: {position}",
                    base + i64::from(rel)
                );
            }
        }
    }
    let tidx_path = args.segment.with_extension("timeindex");
    if let Ok(tidx) = std::fs::read(&tidx_path) {
        for (i, e) in tidx.chunks_exact(12).enumerate() {
            let ts = i64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
            let rel = u32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            if i > 0 && ts == 0 && rel == 0 {
                break;
            }
            if args.json {
                println!(
                    "{}",
                    json!({"type": "time_index", "timestamp": ts, "offset": base + i64::from(rel)})
                );
            } else {
                println!(
                    "timeindex: timestamp: {ts} offset: {}",
                    base + i64::from(rel)
                );
            }
        }
    }
    Ok(())
}

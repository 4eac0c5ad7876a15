//! What record validation (issue D3) costs on the produce path, before vs. after in one run.
//!
//! - `validate/<workload>/before`: what the log checked per batch before: header parse, CRC,
//!   header consistency.
//! - `validate/<workload>/after`: header parse, CRC and `validate_batch` (every record walked;
//!   compressed batches decompressed with a bounded output first), as the log does now.
//!
//! Workloads: uncompressed batches of 1,000 × 1 KiB records (librdkafka's `batch.size` of 1 MB)
//! and the reference 2,000 × 100 B; compressed batches of 100 × 1 KiB text-like records with each
//! codec (decompression is a cost Kafka's LogValidator pays too).
//!
//! Before criterion runs, a counting allocator checks that validating an uncompressed batch
//! allocates nothing, and prints it.
//!
//! Run: `cargo bench -p streamforge-protocol --bench validate`

use std::alloc::System;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::batch::{HEADER_BYTES, RecordBatch};
use streamforge_protocol::decompress::{
    CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, codec_name,
};
use streamforge_protocol::malformed;
use streamforge_protocol::validate::{RecordPolicy, validate_batch};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Records with keys and text-like values (compressible about 2-3×, like JSON).
fn batch(n: usize, value_bytes: usize) -> Vec<u8> {
    const WORDS: [&str; 8] = [
        "user", "id", "event", "click", "value", "true", "12345", "page",
    ];
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("key-{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let noise = malformed::noise(value_bytes, i as u64 + 1);
            let mut v = Vec::with_capacity(value_bytes);
            for b in noise {
                if v.len() >= value_bytes {
                    break;
                }
                v.extend_from_slice(WORDS[(b % 8) as usize].as_bytes());
                v.push(b" :,"[(b % 3) as usize]);
            }
            v.truncate(value_bytes);
            v
        })
        .collect();
    let records: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| (Some(&k[..]), Some(&v[..])))
        .collect();
    let spec = BatchSpec {
        base_timestamp: 1_700_000_000_000,
        ..BatchSpec::default()
    };
    build_batch(spec, &records)
}

fn compressed(codec: u8, plain: &[u8]) -> Vec<u8> {
    malformed::replace_records(
        plain,
        codec,
        &malformed::compress(codec, &plain[HEADER_BYTES..]),
    )
}

fn before(bytes: &[u8]) -> i32 {
    let view = RecordBatch::parse(bytes).unwrap();
    view.verify_crc().unwrap();
    view.validate_header().unwrap();
    view.record_count()
}

fn after(bytes: &[u8], scratch: &mut Vec<u8>) -> i32 {
    let view = RecordBatch::parse(bytes).unwrap();
    view.verify_crc().unwrap();
    validate_batch(&view, RecordPolicy::default(), scratch).unwrap();
    view.record_count()
}

fn report_allocations(bytes: &[u8]) {
    let mut scratch = Vec::new();
    let region = Region::new(GLOBAL);
    for _ in 0..100 {
        black_box(after(bytes, &mut scratch));
    }
    let stats = region.change();
    println!(
        "allocations per uncompressed validate_batch: {} ({} bytes per 100)",
        stats.allocations as f64 / 100.0,
        stats.bytes_allocated
    );
    assert_eq!(
        stats.allocations, 0,
        "the uncompressed path must not allocate"
    );
}

fn bench(c: &mut Criterion) {
    let mut workloads = vec![
        ("none_1000x1KiB".to_string(), batch(1000, 1024)),
        ("none_2000x100B".to_string(), batch(2000, 100)),
    ];
    report_allocations(&workloads[0].1);
    let plain = batch(100, 1024);
    for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
        workloads.push((
            format!("{}_100x1KiB", codec_name(codec)),
            compressed(codec, &plain),
        ));
    }
    let mut group = c.benchmark_group("validate");
    for (name, bytes) in &workloads {
        let records = RecordBatch::parse(bytes).unwrap().record_count() as u64;
        group.throughput(Throughput::Elements(records));
        group.bench_function(format!("{name}/before"), |b| {
            b.iter(|| before(black_box(bytes)))
        });
        // A fresh scratch buffer per batch, as the log's append does.
        group.bench_function(format!("{name}/after"), |b| {
            b.iter(|| after(black_box(bytes), &mut Vec::new()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

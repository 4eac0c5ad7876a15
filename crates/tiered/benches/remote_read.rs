//! Consumer read throughput of one partition: local log vs remote store (cold and warm
//! chunk cache), in one run, for the local-directory store and (when `moto_server` is
//! installed) an S3-compatible server on loopback.
//!
//! The reads are what the broker's Fetch path does per partition: `Log::read` for local
//! data (zero-copy slices of page-cached segments), `TieredStorage::read` for remote data
//! (ranged GETs through the chunk cache, CRC check of every batch). Each fetch asks for
//! 1 MiB (`max.partition.fetch.bytes`), and every returned byte is touched, as a consumer
//! would. Run: `cargo bench -p streamforge-tiered --bench remote_read`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use streamforge_log::{Log, LogConfig};
use streamforge_tiered::batch::fixture::make_batch;
use streamforge_tiered::{PartitionId, TieredConfig, TieredStorage, local};

const TOTAL_BYTES: usize = 128 << 20;
const SEGMENT_BYTES: u64 = 8 << 20;
const RECORDS_PER_BATCH: i32 = 500;
const VALUE_BYTES: usize = 100;
const FETCH_BYTES: usize = 1 << 20;

fn touch(b: &[u8]) -> u64 {
    b.iter().step_by(64).map(|x| u64::from(*x)).sum()
}

fn write_log(dir: &Path) -> i64 {
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir, config, 0).expect("open log");
    let mut written = 0usize;
    let mut ts = 1_700_000_000_000i64;
    while written < TOTAL_BYTES {
        let mut b = make_batch(0, RECORDS_PER_BATCH, ts, VALUE_BYTES);
        ts += 1_000;
        written += b.len();
        log.append_as_leader(&mut b, 0, ts).expect("append");
    }
    let leo = log.log_end_offset();
    log.close().expect("close");
    leo
}

fn read_local(dir: &Path, end: i64) -> (usize, Duration) {
    let log = Log::open(
        dir,
        LogConfig {
            segment_bytes: SEGMENT_BYTES,
            ..LogConfig::default()
        },
        0,
    )
    .expect("reopen");
    let started = Instant::now();
    let (mut offset, mut bytes, mut sink) = (0i64, 0usize, 0u64);
    while offset < end {
        let r = log
            .read(offset, FETCH_BYTES, end, true)
            .expect("local read");
        for s in &r.slices {
            sink = sink.wrapping_add(touch(s));
            offset = last_offset_plus_one(s).max(offset);
        }
        bytes += r.bytes;
    }
    std::hint::black_box(sink);
    (bytes, started.elapsed())
}

fn last_offset_plus_one(mut b: &[u8]) -> i64 {
    let mut next = 0;
    while let Ok(info) = streamforge_tiered::batch::parse_header(b) {
        next = info.last_offset + 1;
        b = &b[info.size_bytes.min(b.len())..];
    }
    next
}

async fn read_remote(storage: &TieredStorage, id: &PartitionId, end: i64) -> (usize, Duration) {
    let part = storage
        .open_partition(id.clone())
        .await
        .expect("open partition");
    let started = Instant::now();
    let (mut offset, mut bytes, mut sink) = (0i64, 0usize, 0u64);
    while offset < end {
        let b = storage
            .read(&part, offset, FETCH_BYTES, i64::MAX, true)
            .await
            .expect("remote read");
        sink = sink.wrapping_add(touch(&b));
        offset = last_offset_plus_one(&b);
        bytes += b.len();
    }
    std::hint::black_box(sink);
    (bytes, started.elapsed())
}

fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

async fn run_store(name: &str, store: Arc<dyn ObjectStore>, dir: &Path, local_mb_s: f64) {
    let config = TieredConfig {
        cache_bytes: 2 * TOTAL_BYTES as u64,
        ..TieredConfig::default()
    };
    let id = PartitionId::new("bench", "0123456789abcdef0123456789abcdef", 0);
    let uploader = TieredStorage::with_store(config.clone(), store.clone());
    let part = uploader.open_partition(id.clone()).await.expect("open");
    // The sole replica leads: only a leader that claimed the manifest uploads.
    uploader.take_leadership(&part, 0).await.expect("claim");
    let started = Instant::now();
    let mut uploaded = 0u64;
    for seg in local::sealed_segments(dir).expect("segments") {
        uploaded += uploader
            .upload_segment(&part, &seg, 0)
            .await
            .expect("upload")
            .size_bytes;
    }
    let upload_time = started.elapsed();
    let remote_end = part.next_offset().expect("uploaded");
    let reader = TieredStorage::with_store(config, store);
    let (cold_bytes, cold) = read_remote(&reader, &id, remote_end).await;
    let (warm_bytes, warm) = read_remote(&reader, &id, remote_end).await;
    let s = reader.stats();
    let (cold_r, warm_r) = (mb_s(cold_bytes, cold), mb_s(warm_bytes, warm));
    println!(
        "{name:<6} upload {:>8.1} MB/s | remote cold {cold_r:>8.1} MB/s ({:.2}x local) | remote warm {warm_r:>8.1} MB/s ({:.2}x local) | GETs {} cache hit ratio {:.3}",
        mb_s(uploaded as usize, upload_time),
        cold_r / local_mb_s,
        warm_r / local_mb_s,
        s.get_requests,
        s.cache_hit_ratio,
    );
}

fn moto_store() -> Option<(std::process::Child, Arc<dyn ObjectStore>)> {
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.venv/bin/moto_server");
    let bin = std::env::var("MOTO_SERVER").unwrap_or_else(|_| {
        if Path::new(venv).exists() {
            venv.into()
        } else {
            "moto_server".into()
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let mut child = std::process::Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !up {
        let _ = child.kill();
        return None;
    }
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(s, "PUT /bench HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").ok()?;
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
    }
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("bench")
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_region("us-east-1")
        .with_access_key_id("bench")
        .with_secret_access_key("bench")
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()
        .ok()?;
    Some((child, Arc::new(store)))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bench-0");
    let end = write_log(&dir);
    let sealed_end = local::sealed_segments(&dir)
        .expect("segments")
        .last()
        .expect("sealed")
        .next_base_offset;
    println!(
        "partition: {} MiB in {} segments of {} MiB, batches of {RECORDS_PER_BATCH} x {VALUE_BYTES}-byte records, fetches of {} KiB; {end} records",
        TOTAL_BYTES >> 20,
        local::list_segments(&dir).expect("segments").len(),
        SEGMENT_BYTES >> 20,
        FETCH_BYTES >> 10,
    );
    let (local_bytes, local_time) = read_local(&dir, sealed_end);
    let local_r = mb_s(local_bytes, local_time);
    println!("local  read {local_r:>8.1} MB/s (page-cached segments, Log::read)");
    let remote_dir = tmp.path().join("remote");
    std::fs::create_dir_all(&remote_dir).expect("remote dir");
    let fs: Arc<dyn ObjectStore> = Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(&remote_dir).expect("local store"),
    );
    rt.block_on(run_store("dir", fs, &dir, local_r));
    match moto_store() {
        Some((mut child, s3)) => {
            rt.block_on(run_store("s3", s3, &dir, local_r));
            let _ = child.kill();
            let _ = child.wait();
        }
        None => println!("s3     skipped: moto_server not installed"),
    }
}

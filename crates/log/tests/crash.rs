//! Crash test: a child process appends to a log and reports each append that returned (and
//! whether it was flushed); the parent SIGKILLs it at a random moment, reopens the log and checks
//! that every reported append is intact, the contents are exactly what was written, offsets are
//! dense and every batch's CRC is valid. Many iterations on the same log, so recovery also runs
//! on logs that were themselves recovered.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::Rng;
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::batch::{BatchIter, RecordBatch};

const CHILD_DIR_ENV: &str = "STREAMFORGE_LOG_CRASH_CHILD_DIR";
const ITERATIONS: usize = 25;
/// Bound on how long one child may run before we give up on it.
const CHILD_DEADLINE: Duration = Duration::from_secs(30);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 * 1024,
        index_interval_bytes: 4096,
        segment_index_bytes: 64 * 1024,
        ..LogConfig::default()
    }
}

/// The payload of the batch starting at `offset`: deterministic, so the parent can check it.
fn batch_for(offset: i64, records: usize) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..records)
        .map(|i| format!("offset-{}-{}", offset + i as i64, "x".repeat(100)).into_bytes())
        .collect();
    let kvs: Vec<_> = values.iter().map(|v| (None, Some(&v[..]))).collect();
    build_batch(
        BatchSpec {
            base_timestamp: 1_000 + offset,
            ..BatchSpec::default()
        },
        &kvs,
    )
}

/// Runs only inside the child process (the env var is set by the parent).
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let mut log = Log::open(Path::new(&dir), config(), 0).expect("child open");
    let mut rng = rand::rng();
    // Bounded: the parent kills us long before this runs out.
    for i in 0..1_000_000u64 {
        let next = log.log_end_offset();
        let records = rng.random_range(1..40);
        let mut bytes = batch_for(next, records);
        let info = log.append_as_leader(&mut bytes, 1, 0).expect("append");
        let flushed = i % 7 == 0;
        if flushed {
            log.flush().expect("flush");
        }
        println!(
            "ACK {} {} {}",
            info.first_offset,
            info.last_offset,
            u8::from(flushed)
        );
    }
}

fn check_log(dir: &Path, acked_end: i64) -> i64 {
    let log = Log::open(dir, config(), 0).expect("reopen after kill");
    let end = log.log_end_offset();
    assert!(
        end >= acked_end,
        "acked up to {acked_end}, log ends at {end}"
    );
    // One read covers a bounded number of segments: read on until the end.
    let mut expect = 0i64;
    while expect < end {
        let info = log.read(expect, usize::MAX, i64::MAX, true).unwrap();
        assert!(
            !info.slices.is_empty(),
            "read at {expect} returned nothing before {end}"
        );
        for slice in &info.slices {
            for item in BatchIter::new(slice) {
                let (_, b) = item.expect("whole batches only");
                b.verify_crc().expect("valid CRC");
                assert_eq!(b.base_offset(), expect, "offsets are dense");
                let records = (b.last_offset() - b.base_offset() + 1) as usize;
                let mut want = batch_for(b.base_offset(), records);
                // The log patched base offset and leader epoch in place; compare everything else.
                let got = RecordBatch::parse(b.as_bytes()).unwrap();
                want[0..8].copy_from_slice(&got.base_offset().to_be_bytes());
                want[12..16].copy_from_slice(&got.partition_leader_epoch().to_be_bytes());
                assert!(
                    b.as_bytes() == &want[..],
                    "batch at {expect} differs from what was written"
                );
                expect = b.last_offset() + 1;
            }
        }
    }
    assert_eq!(expect, end, "the reads cover the whole log");
    log.close().unwrap();
    // close + reopen cleanly must agree
    let log = Log::open(dir, config(), 0).unwrap();
    assert_eq!(log.log_end_offset(), end);
    drop(log);
    end
}

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rng();
    let mut acked_end = 0i64;
    for iteration in 0..ITERATIONS {
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let fields: Vec<i64> = rest.split(' ').map(|f| f.parse().unwrap()).collect();
                    if tx.send((fields[1], fields[2] == 1)).is_err() {
                        break;
                    }
                }
            }
        });
        // Wait for the first ack (the child has opened and recovered), then kill at a random point.
        let started = Instant::now();
        let first = rx
            .recv_timeout(CHILD_DEADLINE)
            .expect("child made progress");
        acked_end = acked_end.max(first.0 + 1);
        std::thread::sleep(Duration::from_micros(rng.random_range(0..30_000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        let mut flushed_end = 0;
        while let Ok((last, flushed)) = rx.try_recv() {
            acked_end = acked_end.max(last + 1);
            if flushed {
                flushed_end = last + 1;
            }
        }
        assert!(started.elapsed() < CHILD_DEADLINE);
        let end = check_log(dir.path(), acked_end);
        assert!(end >= flushed_end);
        acked_end = end;
        eprintln!("iteration {iteration}: log end {end}");
    }
    assert!(acked_end > 0);
}

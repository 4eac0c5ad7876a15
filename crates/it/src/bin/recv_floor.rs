//! The floor under the broker's produce CPU on this machine: the CPU time of a bare receiver
//! thread that does only what any broker must do with produced bytes — receive them from a
//! loopback TCP socket, CRC-32C them, and write them to a file — with no Kafka at all.
//!
//! A sender thread writes `--bytes` in requests of `--request-bytes` (librdkafka's Produce
//! requests in `crates/it/perf/broker_cpu.sh` average about 200 KB) and a third thread drains the
//! 8-byte acknowledgements, so the sender pipelines as a producer does. The receiver thread's CPU
//! time comes from `/proc/thread-self/schedstat` (nanoseconds on CPU).
//!
//!   recv-floor                       # 110,000,000 bytes (1M records of ~110 B) into $TMPDIR
//!   recv-floor --no-crc --dir /data  # the copies alone, onto another file system
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::thread;

use anyhow::{Context, Result, ensure};
use clap::Parser;

#[derive(Parser)]
#[command(about = "CPU floor of receiving, CRC-checking and writing produced bytes (no Kafka)")]
struct Args {
    /// Bytes to send (1M records of 100-byte values are about 110 MB as RecordBatches).
    #[arg(long, default_value_t = 110_000_000)]
    bytes: u64,
    /// Bytes per request.
    #[arg(long, default_value_t = 200_000)]
    request_bytes: usize,
    /// Skip the CRC-32C pass.
    #[arg(long)]
    no_crc: bool,
    /// Directory for the file written (default: the temp dir, as the broker's CPU script uses).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Records the bytes stand for, for the per-million figure.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
}

fn thread_cpu_ns() -> Result<u64> {
    let text = fs::read_to_string("/proc/thread-self/schedstat")?;
    let first = text.split_whitespace().next().context("empty schedstat")?;
    Ok(first.parse()?)
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.request_bytes > 0, "--request-bytes must be positive");
    let dir = tempfile::tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (total, req) = (args.bytes, args.request_bytes);

    let sender = thread::spawn(move || -> Result<()> {
        let mut out = TcpStream::connect(addr)?;
        out.set_nodelay(true)?;
        let mut acks = out.try_clone()?;
        let drain = thread::spawn(move || {
            let mut ack = [0u8; 8];
            while acks.read_exact(&mut ack).is_ok() {}
        });
        let payload: Vec<u8> = (0..req).map(|i| b'a' + (i % 26) as u8).collect();
        let mut sent = 0u64;
        while sent < total {
            let n = (total - sent).min(req as u64) as usize;
            out.write_all(&payload[..n])?;
            sent += n as u64;
        }
        out.shutdown(std::net::Shutdown::Write)?;
        let _ = drain.join();
        Ok(())
    });

    let (mut conn, _) = listener.accept()?;
    let path = dir.path().join("00000000000000000000.log");
    let file: File = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)?;
    let mut buf = vec![0u8; req];
    let (mut got, mut crc) = (0u64, 0u32);
    let cpu_before = thread_cpu_ns()?;
    while got < total {
        let n = (total - got).min(req as u64) as usize;
        conn.read_exact(&mut buf[..n])?;
        if !args.no_crc {
            crc = crc.wrapping_add(crc32c::crc32c(&buf[..n]));
        }
        file.write_all_at(&buf[..n], got)?;
        got += n as u64;
        conn.write_all(&got.to_be_bytes())?;
    }
    let cpu_s = (thread_cpu_ns()? - cpu_before) as f64 / 1e9;
    drop(conn);
    sender.join().expect("sender thread")?;
    println!(
        "receiver thread CPU (recv{} + pwrite): {cpu_s:.3} s for {got} bytes in {req}-byte requests = {:.3} s per million records (crc sum {crc:08x})",
        if args.no_crc { "" } else { " + crc32c" },
        cpu_s * 1e6 / args.records as f64
    );
    Ok(())
}

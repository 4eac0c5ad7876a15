//! Real-client integration tests for StreamForge, driven by the `rdkafka` crate (librdkafka).
//!
//! [`BrokerProcess`] starts the real `streamforge broker` binary on a free loopback port with a
//! temporary data dir, waits until it answers ApiVersions, and stops it by pid on drop. The
//! [`dataset`] module holds the compatibility-matrix messages and their checks; [`cluster`]
//! starts three brokers as one cluster and asks each for its view of a topic.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod dataset;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a broker may take to answer its first ApiVersions.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a broker may take to exit after SIGTERM before it is SIGKILLed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// The brokers' log filter unless RUST_LOG says otherwise: openraft logs every failed RPC to a
/// killed voter as an error, which would bury the broker's own lines in a cluster test's tail.
const DEFAULT_RUST_LOG: &str = "info,openraft=error";
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// `$STREAMFORGE_BIN`, else the `streamforge` binary next to the running test's target dir.
pub fn streamforge_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("STREAMFORGE_BIN") {
        return PathBuf::from(p);
    }
    // Test binaries live in <target>/<profile>/deps/; the CLI binary in <target>/<profile>/.
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("streamforge")
}

/// A loopback port that is free right now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// One `streamforge broker` child process with a data dir that survives restarts.
pub struct BrokerProcess {
    pub port: u16,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl BrokerProcess {
    /// Start a broker with default settings plus `extra_args`.
    pub fn start(extra_args: &[&str]) -> Result<Self> {
        let mut b = BrokerProcess {
            port: free_port()?,
            dir: tempfile::Builder::new().prefix("sf-it-").tempdir()?,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        b.spawn()?;
        Ok(b)
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// The last `lines` lines of the broker's log (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = streamforge_bin();
        if !bin.exists() {
            bail!(
                "streamforge binary not found at {} (run `cargo build -p streamforge` or set STREAMFORGE_BIN)",
                bin.display()
            );
        }
        let data_dir = self.dir.path().join("data");
        std::fs::create_dir_all(&data_dir)?;
        let addr = self.bootstrap();
        let mut args: Vec<String> = vec![
            "broker".into(),
            "--listen".into(),
            addr.clone(),
            "--advertised-listener".into(),
            addr,
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        if broker_has_flag(&bin, "--http-listen") {
            args.extend(["--http-listen".into(), "off".into()]);
        }
        args.extend(self.extra_args.iter().cloned());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = Command::new(&bin)
            .args(&args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_RUST_LOG.into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "broker exited with {status} during startup\n{}",
                    self.log_tail(100)
                );
            }
            if api_versions_ok(addr) {
                return Ok(());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        bail!(
            "broker not ready after {START_TIMEOUT:?}\n{}",
            self.log_tail(100)
        )
    }

    /// SIGTERM, wait up to [`STOP_TIMEOUT`], then SIGKILL. Returns the exit code if it exited.
    pub fn stop(&mut self) -> Result<Option<i32>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        // std has no SIGTERM; `kill -TERM <pid>` signals exactly our child.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Ok(status.code());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        child.kill()?;
        Ok(child.wait()?.code())
    }

    /// SIGKILL.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Start again (after [`BrokerProcess::kill`] or [`BrokerProcess::stop`]) on the same port
    /// and data dir, waiting until it answers ApiVersions.
    pub fn start_again(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("broker on port {} is still running", self.port);
        }
        self.spawn()
    }

    /// Start again on the same port and data dir.
    pub fn restart(&mut self, hard: bool) -> Result<()> {
        if hard {
            self.kill()?;
        } else {
            self.stop()?;
        }
        self.spawn()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn broker_has_flag(bin: &Path, flag: &str) -> bool {
    Command::new(bin)
        .args(["broker", "--help"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).contains(flag)
                || String::from_utf8_lossy(&o.stderr).contains(flag)
        })
        .unwrap_or(false)
}

/// One ApiVersions v0 round trip over a raw socket.
fn api_versions_ok(addr: SocketAddr) -> bool {
    const CORRELATION_ID: i32 = 42;
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let client_id = b"sf-it-probe";
    let mut req = Vec::new();
    req.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    req.extend_from_slice(&0i16.to_be_bytes()); // v0
    req.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    req.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    req.extend_from_slice(client_id);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    if s.write_all(&frame).is_err() {
        return false;
    }
    let mut head = [0u8; 10];
    if s.read_exact(&mut head).is_err() {
        return false;
    }
    let corr = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let err = i16::from_be_bytes([head[8], head[9]]);
    corr == CORRELATION_ID && err == 0
}

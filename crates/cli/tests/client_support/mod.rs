//! Starts the real `streamforge` binary on a free loopback port for client/CLI tests.
#![allow(dead_code)]
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Longest wait for the broker to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub fn binary() -> PathBuf {
    std::env::var_os("STREAMFORGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_streamforge")))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind port 0")
        .local_addr()
        .expect("addr")
        .port()
}

/// One broker child process; killed (by pid) on drop.
pub struct BrokerProcess {
    pub port: u16,
    pub data_dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
}

impl BrokerProcess {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        let mut b = BrokerProcess {
            port: free_port(),
            data_dir: data_dir.to_path_buf(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        b.spawn();
        b
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.data_dir.with_extension("log")).expect("log file");
        let child = Command::new(binary())
            .arg("broker")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--advertised-listener")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env("RUST_LOG", "info")
            .arg("--http-listen")
            .arg("off")
            .args(&self.extra)
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start streamforge broker");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "broker did not start within {START_TIMEOUT:?}; log: {}",
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default()
    }

    /// SIGKILL (by pid) and wait.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (bounded), then SIGKILL.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restart on the same port and data dir.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Bound on any poll loop in the client tests.
pub const POLL_DEADLINE: Duration = Duration::from_secs(30);

/// Client settings for `b`.
pub fn client(b: &BrokerProcess) -> streamforge_client::ClientConfig {
    streamforge_client::ClientConfig::new(&b.bootstrap())
}

/// Create `name` with `partitions` partitions (replication factor 1, no configs).
pub async fn create(admin: &streamforge_client::Admin, name: &str, partitions: i32) {
    admin
        .create_topics(
            &[streamforge_client::NewTopic {
                name: name.into(),
                partitions,
                replication_factor: 1,
                configs: vec![],
            }],
            false,
        )
        .await
        .unwrap();
}

/// Poll until `n` records arrived or [`POLL_DEADLINE`] passed.
pub async fn consume_n(
    c: &mut streamforge_client::Consumer,
    n: usize,
) -> Vec<streamforge_client::ConsumerRecord> {
    let mut out = Vec::new();
    let deadline = Instant::now() + POLL_DEADLINE;
    while out.len() < n && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(500)).await.unwrap());
    }
    out
}

/// Produce 100 records, restart the broker, produce 100 more with the same producer, and check
/// that all 200 are there exactly once.
pub async fn produce_across_broker_restart(enable_idempotence: bool) {
    use streamforge_client::{
        Admin, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig, ProducerRecord,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut b = BrokerProcess::start(&dir.path().join("data"), &[]);
    create(&Admin::new(client(&b)), "restart", 2).await;
    let mut cfg = client(&b);
    cfg.retry_backoff_ms = 50;
    let p = Producer::new(ProducerConfig {
        client: cfg.clone(),
        enable_idempotence,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..100 {
        p.send(ProducerRecord::new("restart", format!("{i}").as_bytes()))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
    b.restart();
    let mut futs = Vec::new();
    for i in 100..200 {
        futs.push(
            p.send(ProducerRecord::new("restart", format!("{i}").as_bytes()))
                .await
                .unwrap(),
        );
    }
    p.flush().await.unwrap();
    for f in futs {
        f.await.unwrap();
    }
    let mut c = Consumer::new(ConsumerConfig {
        client: cfg,
        auto_offset_reset: OffsetReset::Earliest,
        ..Default::default()
    });
    c.assign(&[("restart".into(), 0), ("restart".into(), 1)]);
    let recs = consume_n(&mut c, 200).await;
    let mut vals: Vec<i64> = recs
        .iter()
        .map(|r| {
            String::from_utf8_lossy(r.value.as_ref().unwrap())
                .parse()
                .unwrap()
        })
        .collect();
    vals.sort();
    assert_eq!(
        vals,
        (0..200).collect::<Vec<_>>(),
        "nothing lost or duplicated across the restart"
    );
}

//! Test support: start the real `streamforge` binary on a free loopback port and talk the Kafka
//! protocol to it over raw sockets (kafka-protocol codecs).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Bound on every wait in these tests.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

pub struct BrokerProc {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl BrokerProc {
    /// Start on a fresh port with `data_dir`, waiting until it accepts connections.
    pub fn start(data_dir: &Path, extra: &[&str]) -> BrokerProc {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log_path = data_dir.with_extension(format!("{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
            .args(["broker", "--listen", &addr.to_string(), "--data-dir"])
            .arg(data_dir)
            .args(["--http-listen", "off"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn streamforge");
        let b = BrokerProc {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log_path,
        };
        let deadline = Instant::now() + WAIT_MAX;
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "broker did not start:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "broker exited with {s}:\n{}", self.log());
                return;
            }
            assert!(Instant::now() < deadline, "broker ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A raw Kafka connection.
pub struct Conn {
    pub stream: TcpStream,
    next_correlation_id: i32,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(WAIT_MAX)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            next_correlation_id: 1,
        }
    }

    /// Encode a request frame.
    pub fn frame<T: Encodable>(&mut self, key: ApiKey, version: i16, body: &T) -> (i32, Bytes) {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_static_str("wire-test"));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        (correlation_id, buf.freeze())
    }

    pub fn send<T: Encodable>(&mut self, key: ApiKey, version: i16, body: &T) -> i32 {
        let (id, frame) = self.frame(key, version, body);
        self.stream.write_all(&frame).unwrap();
        id
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Read one response frame: (correlation id, body).
    pub fn recv_frame(&mut self, key: ApiKey, version: i16) -> std::io::Result<(i32, Bytes)> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body)?;
        let mut body = Bytes::from(body);
        let header_version = if key == ApiKey::ApiVersions {
            0
        } else {
            key.response_header_version(version)
        };
        let header = ResponseHeader::decode(&mut body, header_version).unwrap();
        Ok((header.correlation_id, body))
    }

    pub fn recv<R: Decodable>(&mut self, key: ApiKey, version: i16, correlation_id: i32) -> R {
        let (id, mut body) = self.recv_frame(key, version).expect("response");
        assert_eq!(id, correlation_id, "responses out of order");
        let r = R::decode(&mut body, version).unwrap();
        assert!(
            !body.has_remaining(),
            "trailing bytes in {key:?} v{version} response"
        );
        r
    }

    pub fn call<T: Encodable, R: Decodable>(&mut self, key: ApiKey, version: i16, body: &T) -> R {
        let id = self.send(key, version, body);
        self.recv(key, version, id)
    }

    /// True when the broker closed the connection (EOF or reset) within the read timeout.
    pub fn closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

/// A topic name as requests carry it.
pub fn name(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(s.to_string()))
}

/// A transactional id as requests carry it.
pub fn tid(s: &str) -> kafka_protocol::messages::TransactionalId {
    kafka_protocol::messages::TransactionalId(StrBytes::from_string(s.to_string()))
}

/// Creates `topic` (CreateTopics v7) with `partitions` partitions, replication factor 1, and
/// asserts it was created.
pub fn create_topic(c: &mut Conn, topic: &str, partitions: i32) {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0, "creating {topic}");
}

/// A RecordBatch v2 of `n` records from producer `pid`/`epoch` (transactional or idempotent),
/// the first at sequence `seq` (wrapping past `i32::MAX` as producers do), record `i`'s value
/// `value(i)`, stamped now.
pub fn producer_batch(
    pid: i64,
    epoch: i16,
    seq: i32,
    n: usize,
    transactional: bool,
    value: impl Fn(usize) -> Bytes,
) -> Bytes {
    let ts = now_ms();
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq.wrapping_add(i as i32) & i32::MAX,
            timestamp: ts,
            key: None,
            value: Some(value(i)),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.freeze()
}

/// Wall clock in ms (record timestamps must be recent, or retention deletes them).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A RecordBatch v2 with `(key, value)` records stamped now.
pub fn batch(records: &[(String, String)], compression: Compression) -> Bytes {
    batch_at(records, compression, now_ms())
}

/// A RecordBatch v2 with `(key, value)` records stamped `base_timestamp_ms + index`.
pub fn batch_at(
    records: &[(String, String)],
    compression: Compression,
    base_timestamp_ms: i64,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // offset - sequence constant keeps all records in one batch.
            sequence: i as i32,
            timestamp: base_timestamp_ms + i as i64,
            key: Some(Bytes::from(k.clone())),
            value: Some(Bytes::from(v.clone())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.freeze()
}

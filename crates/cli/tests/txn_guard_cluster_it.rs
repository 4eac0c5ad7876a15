//! Kafka's verification guard across brokers, with three real `streamforge` processes: a
//! transactional Produce (v11, transaction version 1) reaches the partition's leader, broker
//! 1; the producer's transaction coordinator is another broker, which the leader asks with
//! AddPartitionsToTxn (`verify_only`). The coordinator's answer (0: the partition is in the
//! transaction) is held back by a proxy in front of the coordinator (each broker advertises
//! its proxy, so broker-to-broker traffic goes through it) while the producer's own EndTxn
//! (abort) lands its marker on the leader. Released, the answer must not put the batch in the
//! log after the marker: the Produce is INVALID_TXN_STATE, nothing is appended and the last
//! stable offset is not held back by a transaction nobody will end.

mod support;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::{Conn, name, producer_batch, tid};

/// Bound on each wait (the cluster forming, a coordinator loading, a marker landing).
const WAIT_MAX: Duration = Duration::from_secs(60);
const TOPIC: &str = "guarded";
const LEADER: i32 = 1;
/// AddPartitionsToTxn's API key: the answers the proxies hold back.
const ADD_PARTITIONS_TO_TXN: i16 = 24;
const INVALID_TXN_STATE: i16 = 48;

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Whether AddPartitionsToTxn answers are held, and how many are waiting.
#[derive(Default)]
struct HoldState {
    armed: bool,
    held: usize,
}

#[derive(Default)]
struct Hold {
    state: Mutex<HoldState>,
    changed: Condvar,
}

impl Hold {
    fn arm(&self) {
        self.state.lock().unwrap().armed = true;
    }

    fn release(&self) {
        self.state.lock().unwrap().armed = false;
        self.changed.notify_all();
    }

    /// Waits until an answer is held; false after `WAIT_MAX`.
    fn wait_held(&self) -> bool {
        let guard = self.state.lock().unwrap();
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, WAIT_MAX, |s| s.held == 0)
            .unwrap();
        guard.held > 0
    }

    /// Called by a proxy with an AddPartitionsToTxn answer: blocks while armed.
    fn pass(&self) {
        let mut guard = self.state.lock().unwrap();
        if !guard.armed {
            return;
        }
        guard.held += 1;
        self.changed.notify_all();
        let _unused = self
            .changed
            .wait_timeout_while(guard, WAIT_MAX, |s| s.armed)
            .unwrap();
    }
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = usize::try_from(i32::from_be_bytes(len)).ok()?;
    let mut frame = len.to_vec();
    frame.resize(4 + n, 0);
    s.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

/// Forwards Kafka frames between `listen` and `target`, holding AddPartitionsToTxn answers
/// while `hold` is armed.
fn proxy(listen: TcpListener, target: SocketAddr, hold: Arc<Hold>) {
    std::thread::spawn(move || {
        for client in listen.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(target) else {
                continue;
            };
            let hold = hold.clone();
            let adds: Arc<Mutex<HashSet<i32>>> = Default::default();
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let requests = adds.clone();
            std::thread::spawn(move || {
                while let Some(frame) = read_frame(&mut c2) {
                    if frame.len() >= 12
                        && i16::from_be_bytes([frame[4], frame[5]]) == ADD_PARTITIONS_TO_TXN
                    {
                        let id = i32::from_be_bytes(frame[8..12].try_into().unwrap());
                        requests.lock().unwrap().insert(id);
                    }
                    if s2.write_all(&frame).is_err() {
                        break;
                    }
                }
                let _ = s2.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                while let Some(frame) = read_frame(&mut server) {
                    if frame.len() >= 8 {
                        let id = i32::from_be_bytes(frame[4..8].try_into().unwrap());
                        if adds.lock().unwrap().remove(&id) {
                            hold.pass();
                        }
                    }
                    if client.write_all(&frame).is_err() {
                        break;
                    }
                }
                let _ = client.shutdown(std::net::Shutdown::Both);
            });
        }
    });
}

struct Node {
    id: i32,
    kafka: SocketAddr,
    log: PathBuf,
    child: Child,
}

struct Cluster {
    nodes: Vec<Node>,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start(hold: &Arc<Hold>) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let voters: Vec<String> = (1..=3)
            .map(|id| format!("{id}@127.0.0.1:{}", free_port()))
            .collect();
        let voters = voters.join(",");
        let mut nodes = Vec::new();
        for id in 1..=3 {
            let kafka: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let proxied = TcpListener::bind("127.0.0.1:0").unwrap();
            let advertised = proxied.local_addr().unwrap();
            proxy(proxied, kafka, hold.clone());
            let dir = tmp.path().join(format!("broker-{id}"));
            let log = tmp.path().join(format!("broker-{id}.log"));
            let out = std::fs::File::create(&log).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
                .args(["broker", "--node-id", &id.to_string()])
                .args(["--listen", &kafka.to_string()])
                .args(["--advertised-listener", &advertised.to_string()])
                .arg("--data-dir")
                .arg(&dir)
                .args(["--http-listen", "off"])
                .args(["--controller-quorum-voters", &voters])
                .args(["--transaction-version", "0"])
                .env("RUST_LOG", "info,openraft=error")
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("spawn streamforge");
            nodes.push(Node {
                id,
                kafka,
                log,
                child,
            });
        }
        let cluster = Cluster { nodes, _tmp: tmp };
        for n in &cluster.nodes {
            cluster.wait("accepting", || TcpStream::connect(n.kafka).ok());
        }
        cluster
    }

    fn addr(&self, id: i32) -> SocketAddr {
        self.nodes.iter().find(|n| n.id == id).unwrap().kafka
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- broker {} ---\n{}", n.id, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

/// Codes a client retries while the cluster forms or a coordinator loads.
fn retriable(code: i16) -> bool {
    [5, 6, 7, 14, 15, 16, 51].contains(&code)
}

fn create_topic(c: &mut Conn) -> i16 {
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = vec![BrokerId(LEADER)];
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = -1;
    t.replication_factor = -1;
    t.assignments = vec![a];
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 15_000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    r.topics[0].error_code
}

fn leader_of(c: &mut Conn, topic: &str) -> Option<i32> {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &req);
    let p = r.topics.first()?.partitions.first()?;
    (p.error_code == 0 && p.leader_id.0 >= 0).then_some(p.leader_id.0)
}

fn txn_coordinator(c: &mut Conn, id: &str) -> Option<i32> {
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_string(id.to_string());
    req.key_type = 1;
    let r: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &req);
    (r.error_code == 0).then_some(r.node_id.0)
}

fn init(c: &mut Conn, id: &str) -> Option<(i64, i16)> {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(tid(id));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    assert!(r.error_code == 0 || retriable(r.error_code), "{r:?}");
    (r.error_code == 0).then_some((r.producer_id.0, r.producer_epoch))
}

fn add_partition(c: &mut Conn, id: &str, pid: i64, epoch: i16) -> i16 {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![0];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = tid(id);
    req.v3_and_below_producer_id = ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 3, &req);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end_txn(c: &mut Conn, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let mut req = EndTxnRequest::default();
    req.transactional_id = tid(id);
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.committed = commit;
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, 3, &req);
    r.error_code
}

fn txn_batch(pid: i64, epoch: i16) -> Bytes {
    producer_batch(pid, epoch, 0, 1, true, |_| Bytes::from_static(b"late"))
}

fn produce(c: &mut Conn, id: &str, records: Bytes) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(TOPIC);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(tid(id));
    req.acks = -1;
    req.timeout_ms = 30_000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, 11, &req);
    r.responses[0].partition_responses[0].error_code
}

/// The partition's latest offset: the high watermark (isolation 0) or the last stable
/// offset (1).
fn latest(c: &mut Conn, isolation_level: i8) -> i64 {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.isolation_level = isolation_level;
    req.topics = vec![t];
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{r:?}");
    p.offset
}

#[test]
fn a_marker_landing_between_the_remote_check_and_the_append_fails_the_produce() {
    let hold = Arc::new(Hold::default());
    let cluster = Cluster::start(&hold);
    let mut a = Conn::connect(cluster.addr(LEADER));
    cluster.wait("the topic", || {
        let code = create_topic(&mut a);
        (code == 0 || code == 36).then_some(())
    });
    cluster.wait("broker 1 leading the topic", || {
        (leader_of(&mut a, TOPIC) == Some(LEADER)).then_some(())
    });
    // The first transactional request creates __transaction_state.
    let _created = init(&mut a, "guard-bootstrap");
    // A transactional id coordinated by another broker than the leader.
    let mut candidates = (0..).map(|i| format!("guard-{i}"));
    let (id, coordinator) = cluster.wait("a transactional id coordinated elsewhere", || {
        let id = candidates.next().unwrap();
        let node = txn_coordinator(&mut a, &id)?;
        (node != LEADER).then_some((id, node))
    });
    let mut c = Conn::connect(cluster.addr(coordinator));
    let (pid, epoch) = cluster.wait("InitProducerId", || init(&mut c, &id));
    cluster.wait("AddPartitionsToTxn", || {
        let code = add_partition(&mut c, &id, pid, epoch);
        assert!(code == 0 || retriable(code), "AddPartitionsToTxn: {code}");
        (code == 0).then_some(())
    });

    // The Produce: the leader checks with the coordinator, whose answer the proxy holds.
    hold.arm();
    let leader_addr = cluster.addr(LEADER);
    let producing = {
        let id = id.clone();
        std::thread::spawn(move || {
            let mut conn = Conn::connect(leader_addr);
            produce(&mut conn, &id, txn_batch(pid, epoch))
        })
    };
    assert!(
        hold.wait_held(),
        "no check reached the coordinator\n{}",
        cluster.logs()
    );
    // The producer's EndTxn overtakes it: its ABORT marker lands on the leader.
    cluster.wait("EndTxn", || {
        let code = end_txn(&mut c, &id, pid, epoch, false);
        assert!(code == 0 || retriable(code), "EndTxn: {code}");
        (code == 0).then_some(())
    });
    cluster.wait("the marker on the leader", || {
        (latest(&mut a, 0) == 1).then_some(())
    });
    hold.release();

    let code = producing.join().unwrap();
    assert_eq!(
        code,
        INVALID_TXN_STATE,
        "the late batch\n{}",
        cluster.logs()
    );
    assert_eq!(latest(&mut a, 0), 1, "nothing appended after the marker");
    assert_eq!(latest(&mut a, 1), 1, "no transaction left open");
}

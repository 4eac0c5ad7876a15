//! WriteTxnMarkers against the real `streamforge broker` binary: the coordinator epoch of a
//! producer's last marker survives a restart (clean, from the producer snapshot, and after
//! SIGKILL with the snapshots gone, from the markers in the log), so a marker from an older
//! coordinator is TRANSACTION_COORDINATOR_FENCED afterwards, as on Kafka.

mod support;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use support::{BrokerProc, Conn, create_topic, name, producer_batch, tid};

const TOPIC: &str = "txn-marker-wire";
const TID: &str = "marker-fencing";

/// Retries `f` while it answers a retriable coordinator error (loading, first use).
fn retried(mut f: impl FnMut() -> i16) -> i16 {
    for _ in 0..100 {
        let code = f();
        let retriable = [
            ResponseError::CoordinatorLoadInProgress.code(),
            ResponseError::CoordinatorNotAvailable.code(),
            ResponseError::ConcurrentTransactions.code(),
            ResponseError::NotCoordinator.code(),
        ];
        if !retriable.contains(&code) {
            return code;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("kept failing retriably");
}

fn init(c: &mut Conn) -> (i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(tid(TID));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let mut answer = (0, 0);
    let code = retried(|| {
        let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
        answer = (r.producer_id.0, r.producer_epoch);
        r.error_code
    });
    assert_eq!(code, 0);
    answer
}

fn add_partition(c: &mut Conn, pid: i64, epoch: i16) -> i16 {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![0];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = tid(TID);
    req.v3_and_below_producer_id = ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    retried(|| {
        let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 3, &req);
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    })
}

/// Produce v11 of one transactional record (sequence `seq`).
fn produce(c: &mut Conn, pid: i64, epoch: i16, seq: i32) -> i16 {
    let batch = producer_batch(pid, epoch, seq, 1, true, |_| Bytes::from_static(b"v"));
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(batch);
    let mut t = TopicProduceData::default();
    t.name = name(TOPIC);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(tid(TID));
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, 11, &req);
    r.responses[0].partition_responses[0].error_code
}

/// WriteTxnMarkers v1: a COMMIT of `pid` on partition 0 from `coordinator_epoch`.
fn commit_marker(c: &mut Conn, pid: i64, epoch: i16, coordinator_epoch: i32) -> i16 {
    let mut t = WritableTxnMarkerTopic::default();
    t.name = name(TOPIC);
    t.partition_indexes = vec![0];
    let mut m = WritableTxnMarker::default();
    m.producer_id = ProducerId(pid);
    m.producer_epoch = epoch;
    m.transaction_result = true;
    m.topics = vec![t];
    m.coordinator_epoch = coordinator_epoch;
    let mut req = WriteTxnMarkersRequest::default();
    req.markers = vec![m];
    let r: WriteTxnMarkersResponse = c.call(ApiKey::WriteTxnMarkers, 1, &req);
    r.markers[0].topics[0].partitions[0].error_code
}

fn remove_snapshots(dir: &std::path::Path) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            removed += remove_snapshots(&path);
        } else if path.extension().is_some_and(|e| e == "snapshot")
            && path.to_string_lossy().contains(TOPIC)
        {
            std::fs::remove_file(path).unwrap();
            removed += 1;
        }
    }
    removed
}

#[test]
fn a_marker_from_an_older_coordinator_is_fenced_after_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 1);
    let (pid, epoch) = init(&mut c);
    assert_eq!(add_partition(&mut c, pid, epoch), 0);
    assert_eq!(produce(&mut c, pid, epoch, 0), 0);
    // A coordinator at epoch 7 (as after failovers) ends the transaction on this partition.
    assert_eq!(commit_marker(&mut c, pid, epoch, 7), 0);
    assert_eq!(produce(&mut c, pid, epoch, 1), 0);

    // Clean restart: the producer snapshot carries the coordinator epoch.
    drop(c);
    broker.terminate();
    let mut broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    let fenced = ResponseError::TransactionCoordinatorFenced.code();
    assert_eq!(
        commit_marker(&mut c, pid, epoch, 6),
        fenced,
        "{}",
        broker.log()
    );
    assert_eq!(commit_marker(&mut c, pid, epoch, 8), 0);
    assert_eq!(produce(&mut c, pid, epoch, 2), 0);

    // SIGKILL and no snapshot left: recovery takes the epoch from the markers in the log.
    drop(c);
    broker.kill();
    assert!(
        remove_snapshots(dir.path()) > 0,
        "the clean shutdown wrote one"
    );
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    assert_eq!(
        commit_marker(&mut c, pid, epoch, 7),
        fenced,
        "{}",
        broker.log()
    );
    assert_eq!(commit_marker(&mut c, pid, epoch, 8), 0);
}

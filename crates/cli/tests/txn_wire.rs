//! Transactions over raw sockets against the real `streamforge broker` binary: KIP-890 part 1
//! (a transactional Produce to a partition not in the transaction is INVALID_TXN_STATE) and
//! part 2 (`transaction.version` 2 in ApiVersions; Produce v12 adds the partition, EndTxn v5
//! bumps the epoch and answers it; the old epoch is fenced; `--transaction-version 0` keeps
//! the KIP-98 versions).

mod support;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::{BrokerProc, Conn, create_topic, name, producer_batch, tid};

const TOPIC: &str = "txn-wire";

fn init(c: &mut Conn, id: &str) -> (i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(tid(id));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    // The first call creates __transaction_state; CONCURRENT_TRANSACTIONS is retriable.
    for _ in 0..50 {
        let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
        if r.error_code == 0 {
            return (r.producer_id.0, r.producer_epoch);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("InitProducerId kept failing");
}

fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    producer_batch(pid, epoch, seq, n, true, |i| Bytes::from(format!("v{i}")))
}

fn produce(c: &mut Conn, version: i16, id: &str, partition: i32, records: Bytes) -> i16 {
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = name(TOPIC);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(tid(id));
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![t];
    let r: ProduceResponse = c.call(ApiKey::Produce, version, &req);
    r.responses[0].partition_responses[0].error_code
}

fn add_partition(c: &mut Conn, id: &str, pid: i64, epoch: i16, partition: i32) -> i16 {
    add_partition_v(c, 3, id, pid, epoch, partition)
}

fn add_partition_v(
    c: &mut Conn,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    partition: i32,
) -> i16 {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![partition];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = tid(id);
    req.v3_and_below_producer_id = ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, version, &req);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end_txn(
    c: &mut Conn,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> EndTxnResponse {
    let mut req = EndTxnRequest::default();
    req.transactional_id = tid(id);
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.committed = commit;
    c.call(ApiKey::EndTxn, version, &req)
}

/// The open transaction's partitions, as DescribeTransactions reports them.
fn txn_partitions(c: &mut Conn, id: &str) -> (String, Vec<i32>) {
    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = vec![tid(id)];
    let r: DescribeTransactionsResponse = c.call(ApiKey::DescribeTransactions, 0, &req);
    let s = &r.transaction_states[0];
    let parts = s.topics.iter().flat_map(|t| t.partitions.clone()).collect();
    (s.transaction_state.to_string(), parts)
}

fn api_versions(c: &mut Conn) -> ApiVersionsResponse {
    let mut req = ApiVersionsRequest::default();
    req.client_software_name = StrBytes::from_static_str("txn-wire");
    req.client_software_version = StrBytes::from_static_str("1");
    c.call(ApiKey::ApiVersions, 3, &req)
}

fn max_version(r: &ApiVersionsResponse, key: ApiKey) -> i16 {
    r.api_keys
        .iter()
        .find(|k| k.api_key == key as i16)
        .map(|k| k.max_version)
        .unwrap()
}

fn transaction_version(r: &ApiVersionsResponse) -> Option<i16> {
    r.finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map(|f| f.max_version_level)
}

#[test]
fn a_transactional_produce_to_a_partition_not_in_the_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 2);
    let (pid, epoch) = init(&mut c, "verify");
    let code = produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 0, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
    assert_eq!(add_partition(&mut c, "verify", pid, epoch, 0), 0);
    assert_eq!(
        produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 0, 3)),
        0
    );
    // Partition 1 is still not in the transaction.
    let code = produce(&mut c, 11, "verify", 1, txn_batch(pid, epoch, 0, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
    // After the commit the transaction is closed: the next batch needs adding again.
    assert_eq!(end_txn(&mut c, 4, "verify", pid, epoch, true).error_code, 0);
    let code = produce(&mut c, 11, "verify", 0, txn_batch(pid, epoch, 3, 3));
    assert_eq!(code, ResponseError::InvalidTxnState.code());
}

#[test]
fn transaction_version_2_bumps_the_epoch_at_every_end_txn() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    let versions = api_versions(&mut c);
    assert_eq!(transaction_version(&versions), Some(2));
    assert!(versions.finalized_features_epoch >= 0);
    assert_eq!(max_version(&versions, ApiKey::EndTxn), 5);
    assert_eq!(max_version(&versions, ApiKey::Produce), 12);
    create_topic(&mut c, TOPIC, 2);
    let (pid, e0) = init(&mut c, "tv2");
    // Produce v12 adds the partition itself.
    assert_eq!(produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0, 0, 2)), 0);
    assert_eq!(
        txn_partitions(&mut c, "tv2"),
        ("Ongoing".to_string(), vec![1])
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0, true);
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, pid, e0 + 1)
    );
    // A retry under the old epoch gets the same answer.
    let r = end_txn(&mut c, 5, "tv2", pid, e0, true);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 1));
    // The old epoch is fenced (the coordinator's PRODUCER_FENCED is INVALID_PRODUCER_EPOCH on
    // a Produce, as Kafka's leader reports it); the new one starts at sequence 0.
    let code = produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0, 2, 2));
    assert_eq!(code, ResponseError::InvalidProducerEpoch.code());
    assert_eq!(
        produce(&mut c, 12, "tv2", 1, txn_batch(pid, e0 + 1, 0, 2)),
        0
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0 + 1, false);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 2));
    // The epoch survives a restart (the state records are Kafka's v1 value).
    drop(c);
    broker.terminate();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    assert_eq!(
        produce(&mut c, 12, "tv2", 0, txn_batch(pid, e0 + 2, 0, 2)),
        0
    );
    let r = end_txn(&mut c, 5, "tv2", pid, e0 + 2, true);
    assert_eq!((r.error_code, r.producer_epoch), (0, e0 + 3));
}

#[test]
fn transaction_version_0_advertises_the_kip_98_versions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &["--transaction-version", "0"]);
    let mut c = broker.connect();
    let versions = api_versions(&mut c);
    assert_eq!(transaction_version(&versions), None);
    assert_eq!(max_version(&versions, ApiKey::EndTxn), 4);
    assert_eq!(max_version(&versions, ApiKey::Produce), 11);
    assert_eq!(max_version(&versions, ApiKey::TxnOffsetCommit), 4);
}

#[test]
fn versions_before_kip_588_get_invalid_producer_epoch_for_a_fenced_producer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 2);
    let (pid, e0) = init(&mut c, "kip588");
    let (pid1, e1) = init(&mut c, "kip588");
    assert_eq!(
        (pid1, e1),
        (pid, e0 + 1),
        "the second producer fences the first"
    );
    let fenced = ResponseError::ProducerFenced.code();
    let old_code = ResponseError::InvalidProducerEpoch.code();
    // EndTxn and AddPartitionsToTxn: v0/v1 predate PRODUCER_FENCED, v2+ get it.
    assert_eq!(
        end_txn(&mut c, 1, "kip588", pid, e0, true).error_code,
        old_code
    );
    assert_eq!(
        end_txn(&mut c, 3, "kip588", pid, e0, true).error_code,
        fenced
    );
    assert_eq!(add_partition_v(&mut c, 1, "kip588", pid, e0, 0), old_code);
    assert_eq!(add_partition_v(&mut c, 2, "kip588", pid, e0, 0), fenced);
}

/// FindCoordinator for `group` until it is served (the first call creates __consumer_offsets).
fn group_coordinator_ready(c: &mut Conn, group: &str) {
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_string(group.to_string());
    for _ in 0..100 {
        let r: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &req);
        if r.error_code == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no coordinator for {group}");
}

fn add_offsets(c: &mut Conn, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
    let mut req = AddOffsetsToTxnRequest::default();
    req.transactional_id = tid(id);
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    let r: AddOffsetsToTxnResponse = c.call(ApiKey::AddOffsetsToTxn, 3, &req);
    r.error_code
}

/// TxnOffsetCommit v3 of `offset` for partition 0 with the consumer's generation and member.
fn txn_offset_commit(
    c: &mut Conn,
    producer: (&str, i64, i16),
    group: &str,
    (generation, member): (i32, &str),
    offset: i64,
) -> i16 {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let mut p = TxnOffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    p.committed_leader_epoch = -1;
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut req = TxnOffsetCommitRequest::default();
    req.transactional_id = tid(producer.0);
    req.producer_id = ProducerId(producer.1);
    req.producer_epoch = producer.2;
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.generation_id = generation;
    req.member_id = StrBytes::from_string(member.to_string());
    req.topics = vec![t];
    let r: TxnOffsetCommitResponse = c.call(ApiKey::TxnOffsetCommit, 3, &req);
    r.topics[0].partitions[0].error_code
}

/// OffsetFetch of partitions 0 and 1: (offset, error) of each, v7 (one group) or v8 (groups).
fn offset_fetch(c: &mut Conn, version: i16, group: &str, stable: bool) -> Vec<(i64, i16)> {
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    let mut req = OffsetFetchRequest::default();
    req.require_stable = stable;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    if version >= 8 {
        let mut t = OffsetFetchRequestTopics::default();
        t.name = name(TOPIC);
        t.partition_indexes = vec![0, 1];
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = group_id;
        g.topics = Some(vec![t]);
        req.groups = vec![g];
        let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, version, &req);
        assert_eq!(
            r.groups[0].error_code, 0,
            "answered per partition, not per group"
        );
        let parts = &r.groups[0].topics[0].partitions;
        parts
            .iter()
            .map(|p| (p.committed_offset, p.error_code))
            .collect()
    } else {
        let mut t = OffsetFetchRequestTopic::default();
        t.name = name(TOPIC);
        t.partition_indexes = vec![0, 1];
        req.group_id = group_id;
        req.topics = Some(vec![t]);
        let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, version, &req);
        assert_eq!(r.error_code, 0, "answered per partition, not at the top");
        let parts = &r.topics[0].partitions;
        parts
            .iter()
            .map(|p| (p.committed_offset, p.error_code))
            .collect()
    }
}

#[test]
fn kip_447_txn_offset_commit_fencing_and_require_stable() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 2);
    let group = "stable-app";
    group_coordinator_ready(&mut c, group);
    group_coordinator_ready(&mut c, "no-such-group");
    // An offset committed outside any transaction (a simple group).
    {
        use kafka_protocol::messages::offset_commit_request::{
            OffsetCommitRequestPartition, OffsetCommitRequestTopic,
        };
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = 0;
        p.committed_offset = 5;
        let mut t = OffsetCommitRequestTopic::default();
        t.name = name(TOPIC);
        t.partitions = vec![p];
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(StrBytes::from_static_str("stable-app"));
        req.generation_id_or_member_epoch = -1;
        req.topics = vec![t];
        let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &req);
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
    }
    let (pid, epoch) = init(&mut c, "offs");
    let producer = ("offs", pid, epoch);
    assert_eq!(add_offsets(&mut c, "offs", pid, epoch, group), 0);
    assert_eq!(add_offsets(&mut c, "offs", pid, epoch, "no-such-group"), 0);
    // KIP-447: a member the group does not have, a group that does not exist with a generation.
    assert_eq!(
        txn_offset_commit(&mut c, producer, group, (1, "zombie"), 9),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        txn_offset_commit(&mut c, producer, "no-such-group", (3, "m"), 9),
        ResponseError::IllegalGeneration.code()
    );
    // Without a member and generation the offsets are taken.
    assert_eq!(txn_offset_commit(&mut c, producer, group, (-1, ""), 12), 0);
    let unstable = ResponseError::UnstableOffsetCommit.code();
    for version in [7, 8] {
        assert_eq!(
            offset_fetch(&mut c, version, group, true),
            vec![(-1, unstable), (-1, 0)],
            "v{version} require_stable"
        );
        assert_eq!(
            offset_fetch(&mut c, version, group, false),
            vec![(5, 0), (-1, 0)],
            "v{version} without require_stable"
        );
    }
    assert_eq!(end_txn(&mut c, 4, "offs", pid, epoch, true).error_code, 0);
    // Once the marker reached the group's partition the transaction's offset is answered.
    let mut last = Vec::new();
    for _ in 0..100 {
        last = offset_fetch(&mut c, 7, group, true);
        if last[0] == (12, 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(last, vec![(12, 0), (-1, 0)]);
}

/// The transactional ids ListTransactions reports, with their states.
fn listed(c: &mut Conn) -> Vec<(String, String)> {
    let req = ListTransactionsRequest::default();
    let r: ListTransactionsResponse = c.call(ApiKey::ListTransactions, 0, &req);
    assert_eq!(r.error_code, 0);
    let mut ids: Vec<(String, String)> = r
        .transaction_states
        .iter()
        .map(|s| {
            (
                s.transactional_id.0.to_string(),
                s.transaction_state.to_string(),
            )
        })
        .collect();
    ids.sort();
    ids
}

fn describe_error(c: &mut Conn, id: &str) -> i16 {
    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = vec![tid(id)];
    let r: DescribeTransactionsResponse = c.call(ApiKey::DescribeTransactions, 0, &req);
    r.transaction_states[0].error_code
}

#[test]
fn an_idle_transactional_id_expires_and_stays_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let expiring = [
        "--transactional-id-expiration-ms",
        "1500",
        "--transaction-remove-expired-transaction-cleanup-interval-ms",
        "200",
    ];
    let mut broker = BrokerProc::start(dir.path(), &expiring);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 2);
    // "idle": one committed transaction, then nothing. "open": a transaction left open (its
    // 60 s timeout is far away), which never expires.
    let (idle_pid, idle_epoch) = init(&mut c, "idle");
    assert_eq!(add_partition(&mut c, "idle", idle_pid, idle_epoch, 0), 0);
    assert_eq!(
        produce(&mut c, 11, "idle", 0, txn_batch(idle_pid, idle_epoch, 0, 2)),
        0
    );
    let r = end_txn(&mut c, 4, "idle", idle_pid, idle_epoch, true);
    assert_eq!(r.error_code, 0);
    let (open_pid, open_epoch) = init(&mut c, "open");
    assert_eq!(add_partition(&mut c, "open", open_pid, open_epoch, 1), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let ids = listed(&mut c);
        if !ids.iter().any(|(id, _)| id == "idle") {
            assert_eq!(ids, vec![("open".to_string(), "Ongoing".to_string())]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "idle id not expired: {ids:?}\n{}",
            broker.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(
        describe_error(&mut c, "idle"),
        ResponseError::TransactionalIdNotFound.code()
    );
    // The tombstone is in __transaction_state: after a restart with the default expiration
    // (7 days, so nothing expires again) the id is still gone.
    drop(c);
    broker.terminate();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ids = loop {
        // Loading __transaction_state answers COORDINATOR_LOAD_IN_PROGRESS at first.
        let ids = listed(&mut c);
        if !ids.is_empty() || std::time::Instant::now() > deadline {
            break ids;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(ids, vec![("open".to_string(), "Ongoing".to_string())]);
    assert_eq!(
        describe_error(&mut c, "idle"),
        ResponseError::TransactionalIdNotFound.code()
    );
    // A new InitProducerId starts the id over under a fresh producer id at epoch 0.
    let (pid, epoch) = init(&mut c, "idle");
    assert_ne!(pid, idle_pid);
    assert_ne!(pid, open_pid);
    assert_eq!(epoch, 0);
}

#[test]
fn end_txn_v4_with_nothing_open_is_invalid_txn_state_and_retries_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProc::start(dir.path(), &[]);
    let mut c = broker.connect();
    create_topic(&mut c, TOPIC, 2);
    let (pid, epoch) = init(&mut c, "empty-end");
    // Nothing added: Kafka's EndTxn below v5 answers INVALID_TXN_STATE for either outcome
    // (the clients complete such a transaction without sending EndTxn).
    for commit in [false, true] {
        let r = end_txn(&mut c, 4, "empty-end", pid, epoch, commit);
        assert_eq!(r.error_code, ResponseError::InvalidTxnState.code());
    }
    // A completed abort and a completed commit: the retry of the same outcome is answered,
    // the other outcome is not.
    for commit in [false, true] {
        assert_eq!(add_partition(&mut c, "empty-end", pid, epoch, 0), 0);
        assert_eq!(
            end_txn(&mut c, 4, "empty-end", pid, epoch, commit).error_code,
            0
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // The markers may still be on their way (CONCURRENT_TRANSACTIONS).
            let r = end_txn(&mut c, 4, "empty-end", pid, epoch, commit);
            if r.error_code == 0 {
                break;
            }
            assert_eq!(r.error_code, ResponseError::ConcurrentTransactions.code());
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let r = end_txn(&mut c, 4, "empty-end", pid, epoch, !commit);
        assert_eq!(r.error_code, ResponseError::InvalidTxnState.code());
    }
}

use kafka_protocol::ResponseError;
use kafka_protocol::messages::AddPartitionsToTxnResponse;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};

use super::*;

fn check(q: &mut CheckQueue, tid: &str, epoch: i16, partitions: &[(&str, i32)]) -> Check {
    Check {
        ticket: q.ticket(),
        transactional_id: tid.to_string(),
        producer_id: 7,
        producer_epoch: epoch,
        verify_only: true,
        partitions: partitions
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect(),
    }
}

fn codes(answer: &Answer) -> Vec<i16> {
    answer.iter().map(|(_, c)| *c).collect()
}

#[test]
fn checks_are_batched_per_coordinator_one_request_in_flight() {
    let mut q = CheckQueue::default();
    let (a, b, c) = (
        check(&mut q, "a", 0, &[("t", 0)]),
        check(&mut q, "b", 0, &[("t", 1)]),
        check(&mut q, "c", 0, &[("t", 2)]),
    );
    assert!(q.submit(1, a).is_empty());
    assert!(q.submit(1, b).is_empty());
    assert!(q.submit(2, c).is_empty());
    assert_eq!(q.ready_brokers(), vec![1, 2]);
    let batch = q.take_batch(1);
    assert_eq!(batch.len(), 2, "both ids of broker 1 in one request");
    // Broker 1 has a request in flight: a new check waits for the next one.
    let d = check(&mut q, "d", 0, &[("t", 3)]);
    assert!(q.submit(1, d).is_empty());
    assert_eq!(q.ready_brokers(), vec![2]);
    assert!(q.take_batch(1).is_empty());
    q.done(1);
    assert_eq!(q.take_batch(1).len(), 1);
}

#[test]
fn a_request_carries_at_most_the_bound() {
    let mut q = CheckQueue::default();
    for i in 0..CHECKS_PER_REQUEST_MAX + 3 {
        let c = check(&mut q, &format!("id-{i}"), 0, &[("t", 0)]);
        assert!(q.submit(1, c).is_empty());
    }
    assert_eq!(q.take_batch(1).len(), CHECKS_PER_REQUEST_MAX);
    q.done(1);
    assert_eq!(q.take_batch(1).len(), 3);
}

#[test]
fn the_queue_is_bounded() {
    let mut q = CheckQueue::default();
    for i in 0..QUEUED_CHECKS_MAX {
        let c = check(&mut q, &format!("id-{i}"), 0, &[("t", 0)]);
        assert!(q.submit(i as i32 % 3, c).is_empty());
    }
    let over = check(&mut q, "over", 0, &[("t", 0)]);
    let answered = q.submit(0, over.clone());
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].0, over.ticket);
    assert_eq!(
        codes(&answered[0].1),
        vec![ResponseError::CoordinatorNotAvailable.code()]
    );
    assert_eq!(q.queued(), QUEUED_CHECKS_MAX);
}

#[test]
fn a_second_check_of_an_id_replaces_the_queued_one_as_kafka() {
    let mut q = CheckQueue::default();
    let first = check(&mut q, "a", 3, &[("t", 0)]);
    assert!(q.submit(1, first.clone()).is_empty());
    // Same epoch: the queued one is answered NETWORK_EXCEPTION (retriable), the new one waits.
    let retry = check(&mut q, "a", 3, &[("t", 1)]);
    let answered = q.submit(1, retry.clone());
    assert_eq!(answered[0].0, first.ticket);
    assert_eq!(
        codes(&answered[0].1),
        vec![ResponseError::NetworkException.code()]
    );
    // Newer epoch: the queued one is fenced.
    let newer = check(&mut q, "a", 4, &[("t", 2)]);
    let answered = q.submit(1, newer.clone());
    assert_eq!(answered[0].0, retry.ticket);
    assert_eq!(
        codes(&answered[0].1),
        vec![ResponseError::InvalidProducerEpoch.code()]
    );
    // Older epoch: the incoming one is fenced, the queued one stays.
    let older = check(&mut q, "a", 2, &[("t", 3)]);
    let answered = q.submit(1, older.clone());
    assert_eq!(answered[0].0, older.ticket);
    assert_eq!(
        codes(&answered[0].1),
        vec![ResponseError::InvalidProducerEpoch.code()]
    );
    let batch = q.take_batch(1);
    assert_eq!(batch, vec![newer]);
}

#[test]
fn the_request_groups_partitions_by_topic_and_says_verify_only() {
    let mut q = CheckQueue::default();
    let mut a = check(&mut q, "a", 1, &[("x", 0), ("x", 1), ("y", 0)]);
    let mut b = check(&mut q, "b", 2, &[("x", 2)]);
    b.verify_only = false;
    a.producer_id = 11;
    let request = request_of(&[a, b]);
    assert_eq!(request.transactions.len(), 2);
    let t = &request.transactions[0];
    assert_eq!(t.transactional_id.0.as_str(), "a");
    assert_eq!(
        (t.producer_id.0, t.producer_epoch, t.verify_only),
        (11, 1, true)
    );
    let topics: Vec<(&str, Vec<i32>)> = t
        .topics
        .iter()
        .map(|x| (x.name.0.as_str(), x.partitions.clone()))
        .collect();
    assert_eq!(topics, vec![("x", vec![0, 1]), ("y", vec![0])]);
    assert!(!request.transactions[1].verify_only);
}

fn response(results: &[(&str, &str, i32, i16)]) -> AddPartitionsToTxnResponse {
    let mut r = AddPartitionsToTxnResponse::default();
    for (tid, topic, p, code) in results {
        let mut tr = AddPartitionsToTxnResult::default();
        tr.transactional_id = TransactionalId(StrBytes::from_string(tid.to_string()));
        let mut t = AddPartitionsToTxnTopicResult::default();
        t.name = crate::handlers::topic_name(topic);
        let mut pr = AddPartitionsToTxnPartitionResult::default();
        pr.partition_index = *p;
        pr.partition_error_code = *code;
        t.results_by_partition.push(pr);
        tr.topic_results.push(t);
        r.results_by_transaction.push(tr);
    }
    r
}

#[test]
fn answers_translate_fencing_and_name_every_partition() {
    let mut q = CheckQueue::default();
    let a = check(&mut q, "a", 1, &[("x", 0), ("x", 1)]);
    let b = check(&mut q, "b", 1, &[("y", 0)]);
    let fenced = ResponseError::ProducerFenced.code();
    let r = response(&[("a", "x", 0, 0), ("b", "y", 0, fenced)]);
    let answers = answers_of(&[a.clone(), b.clone()], &r);
    assert_eq!(answers[0].0, a.ticket);
    assert_eq!(
        codes(&answers[0].1),
        vec![0, ResponseError::UnknownServerError.code()],
        "a partition the answer does not name is not taken as verified"
    );
    assert_eq!(
        codes(&answers[1].1),
        vec![ResponseError::InvalidProducerEpoch.code()]
    );
}

#[test]
fn a_refused_request_answers_every_check() {
    let mut q = CheckQueue::default();
    let a = check(&mut q, "a", 1, &[("x", 0)]);
    let mut r = AddPartitionsToTxnResponse::default();
    r.error_code = ResponseError::ClusterAuthorizationFailed.code();
    let answers = answers_of(std::slice::from_ref(&a), &r);
    assert_eq!(
        codes(&answers[0].1),
        vec![ResponseError::InvalidTxnState.code()]
    );
}

#[test]
fn produce_errors_are_reported_as_kafka_reports_them() {
    let ner = ResponseError::NotEnoughReplicas.code();
    for e in [
        ResponseError::NetworkException,
        ResponseError::CoordinatorLoadInProgress,
        ResponseError::CoordinatorNotAvailable,
        ResponseError::NotCoordinator,
    ] {
        assert_eq!(produce_error(e.code(), 11).0, ner, "{e:?} v11");
        assert_eq!(produce_error(e.code(), 12).0, ner, "{e:?} v12");
    }
    let concurrent = ResponseError::ConcurrentTransactions.code();
    assert_eq!(produce_error(concurrent, 11).0, ner);
    assert_eq!(
        produce_error(concurrent, 12).0,
        concurrent,
        "transaction version 2 clients retry CONCURRENT_TRANSACTIONS themselves"
    );
    let (code, message) = produce_error(ResponseError::InvalidTxnState.code(), 11);
    assert_eq!(code, ResponseError::InvalidTxnState.code());
    assert_eq!(
        message.as_deref(),
        Some("Partition was not added to the transaction")
    );
    assert_eq!(
        produce_error(ResponseError::ProducerFenced.code(), 12).0,
        ResponseError::InvalidProducerEpoch.code()
    );
    let abortable = ResponseError::TransactionAbortable.code();
    assert_eq!(
        produce_error(abortable, 10).0,
        ResponseError::InvalidTxnState.code()
    );
    assert_eq!(produce_error(abortable, 11).0, abortable);
    let mapping = ResponseError::InvalidProducerIdMapping.code();
    assert_eq!(produce_error(mapping, 12), (mapping, None));
}

#[test]
fn offset_commit_errors_send_the_client_back_to_its_coordinator_lookup() {
    let cna = ResponseError::CoordinatorNotAvailable.code();
    assert_eq!(
        offset_commit_error(ResponseError::NetworkException.code()),
        cna
    );
    assert_eq!(
        offset_commit_error(ResponseError::ProducerFenced.code()),
        ResponseError::InvalidProducerEpoch.code()
    );
    let concurrent = ResponseError::ConcurrentTransactions.code();
    assert_eq!(offset_commit_error(concurrent), concurrent);
    assert_eq!(offset_commit_error(0), 0);
}

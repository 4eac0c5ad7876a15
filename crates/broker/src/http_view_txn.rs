//! Transactions for the dashboard: the transaction coordinator's ids (the data
//! DescribeTransactions and ListTransactions answer from), and an operator's abort of an open
//! one, run through the coordinator like any transaction event (state record appended, then
//! ABORT markers, then the Complete record).

use streamforge_coordinator::txn::{TxnCoordinator, TxnMetadata};
use streamforge_http::{TopicPartitions, TransactionInfo, ViewError};

use crate::BrokerState;
use crate::http_view_console::kafka;

/// Every transactional id the coordinator holds here, ordered by id.
pub fn all_transactions(state: &BrokerState) -> Vec<TransactionInfo> {
    state.txns.read(transactions_of)
}

/// The view's data of a coordinator (split out so it is testable without a broker).
pub(crate) fn transactions_of(c: &TxnCoordinator) -> Vec<TransactionInfo> {
    c.all().map(|(tid, m)| info(tid, m)).collect()
}

fn info(tid: &str, m: &TxnMetadata) -> TransactionInfo {
    // `partitions` is ordered by (topic, partition), so each topic's partitions are adjacent.
    let mut partitions: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in &m.partitions {
        match partitions.last_mut() {
            Some(last) if last.topic == *topic => last.partitions.push(*p),
            _ => partitions.push(TopicPartitions {
                topic: topic.clone(),
                partitions: vec![*p],
            }),
        }
    }
    TransactionInfo {
        transactional_id: tid.to_string(),
        state: m.state.name().to_string(),
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        timeout_ms: m.timeout_ms,
        start_ms: m.start_ms,
        last_update_ms: m.last_update_ms,
        partitions,
    }
}

/// Aborts the open transaction of `tid` as its timeout would (epoch bumped, producer fenced,
/// ABORT markers written) and answers the id's state afterwards. Kafka's error when it
/// cannot: TRANSACTIONAL_ID_NOT_FOUND, INVALID_TXN_STATE (nothing open), NOT_COORDINATOR.
pub fn abort(state: &BrokerState, tid: &str) -> Result<TransactionInfo, ViewError> {
    state
        .txns
        .run(state, tid, |c, now, out| c.abort_open(tid, now, out))
        .map_err(|e| {
            let message = match e {
                kafka_protocol::ResponseError::InvalidTxnState => {
                    format!("'{tid}' has no open transaction to abort")
                }
                kafka_protocol::ResponseError::TransactionalIdNotFound => {
                    format!("transactional id '{tid}' does not exist")
                }
                other => format!("aborting the transaction of '{tid}': {other:?}"),
            };
            kafka(e.code(), message)
        })?;
    state
        .txns
        .read(|c| c.get(tid).map(|m| info(tid, m)))
        .ok_or_else(|| ViewError::NotFound(format!("transactional id '{tid}' does not exist")))
}

#[cfg(test)]
mod tests {
    use streamforge_coordinator::txn::{TxnConfig, TxnEffects};

    use super::*;

    #[test]
    fn view_lists_each_id_with_its_transaction_partitions_grouped_by_topic() {
        let mut c = TxnCoordinator::new(TxnConfig::default());
        let mut next_id = 500;
        let mut alloc = || {
            next_id += 1;
            Some(next_id)
        };
        let mut out = TxnEffects::default();
        let (pid, epoch) = c
            .init_producer_id(1_000, "orders-tx", 30_000, None, &mut alloc, &mut out)
            .unwrap();
        c.init_producer_id(1_000, "idle-tx", 60_000, None, &mut alloc, &mut out)
            .unwrap();
        let parts = [
            ("orders".to_string(), 2),
            ("audit".to_string(), 0),
            ("orders".to_string(), 0),
            ("__consumer_offsets".to_string(), 7),
        ];
        c.add_partitions(2_000, "orders-tx", pid, epoch, &parts, &mut out)
            .unwrap();

        let view = transactions_of(&c);
        assert_eq!(view.len(), 2);
        let idle = &view[0];
        assert_eq!(idle.transactional_id, "idle-tx");
        assert_eq!(idle.state, "Empty");
        assert_eq!(idle.start_ms, -1);
        assert!(idle.partitions.is_empty());
        assert!(!idle.is_open());

        let open = &view[1];
        assert_eq!(open.transactional_id, "orders-tx");
        assert_eq!(open.state, "Ongoing");
        assert!(open.is_open());
        assert_eq!((open.producer_id, open.producer_epoch), (pid, epoch));
        assert_eq!(open.timeout_ms, 30_000);
        assert_eq!(open.start_ms, 2_000);
        let grouped: Vec<(&str, &[i32])> = open
            .partitions
            .iter()
            .map(|tp| (tp.topic.as_str(), tp.partitions.as_slice()))
            .collect();
        assert_eq!(
            grouped,
            vec![
                ("__consumer_offsets", &[7][..]),
                ("audit", &[0][..]),
                ("orders", &[0, 2][..]),
            ]
        );

        // The operator's abort: PrepareAbort under a bumped epoch, then CompleteAbort with
        // no partitions once the markers are written.
        c.abort_open("orders-tx", 3_000, &mut out).unwrap();
        let aborting = &transactions_of(&c)[1];
        assert_eq!(aborting.state, "PrepareAbort");
        assert_eq!(aborting.producer_epoch, epoch + 1);
        assert!(aborting.is_open());
        c.markers_written("orders-tx", 3_001, &mut out);
        let done = &transactions_of(&c)[1];
        assert_eq!(done.state, "CompleteAbort");
        assert!(!done.is_open());
    }
}

//! The routing table: one entry per API we serve, wired in one place. ApiVersions is derived
//! from it, so what we advertise is exactly what we handle. To serve a new API add one line
//! to `ROUTES` (and a handler module under `handlers/`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use streamforge_protocol::api_versions::ApiRange;
use streamforge_protocol::{ProtocolError, RequestFrame, ResponseFrame};

use crate::BrokerState;
use crate::handlers::{
    acls, admin, api_versions, client_quotas, cluster, configs, describe_quorum,
    describe_topic_partitions, elect_leaders, fetch, group_protocol, groups, groups_admin,
    log_dirs, metadata, offsets, produce, producer, reassign, scram_users, txn, txn_admin,
};

/// What a handler produces: a response, or `None` when Kafka sends none (Produce acks=0).
pub type HandlerResult = Result<Option<ResponseFrame>, HandlerError>;
pub type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;
pub type HandlerFn = fn(Arc<BrokerState>, RequestFrame) -> HandlerFuture;

/// A handler failure that closes the connection (as Kafka does for unparseable requests).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("closing connection: {0}")]
    Close(String),
}

/// One served API: its version range and handler.
pub struct Route {
    pub api_key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
    pub handler: HandlerFn,
}

impl Route {
    pub fn range(&self) -> ApiRange {
        ApiRange {
            api_key: self.api_key,
            min_version: self.min_version,
            max_version: self.max_version,
        }
    }
}

macro_rules! route {
    ($key:ident, $min:expr, $max:expr, $handler:path) => {
        Route {
            api_key: ApiKey::$key,
            min_version: $min,
            max_version: $max,
            handler: |state, req| {
                let api = req.api_key;
                Box::pin(async move {
                    let result = $handler(state, req).await;
                    crate::request_metrics::count_response(api, &result);
                    result
                })
            },
        }
    };
}

/// Every API this broker serves, with the versions we really implement (Kafka 4.x ranges,
/// capped where topic ids or transactions v2 would be needed; see docs/ARCHITECTURE.md).
pub static ROUTES: &[Route] = &[
    // Produce is advertised from v0 (librdkafka disables compression otherwise); the codec
    // decodes v3+, the only versions that carry RecordBatch v2.
    route!(Produce, 0, 12, produce::handle),
    route!(Fetch, 4, 15, fetch::handle),
    route!(ListOffsets, 1, 10, offsets::handle_list_offsets),
    route!(Metadata, 0, 13, metadata::handle),
    route!(ApiVersions, 0, 4, api_versions::handle),
    route!(CreateTopics, 2, 7, admin::handle_create_topics),
    route!(DeleteTopics, 1, 6, admin::handle_delete_topics),
    route!(DeleteRecords, 0, 2, offsets::handle_delete_records),
    route!(
        OffsetForLeaderEpoch,
        2,
        4,
        offsets::handle_offset_for_leader_epoch
    ),
    route!(DescribeConfigs, 1, 4, configs::handle_describe_configs),
    route!(AlterConfigs, 0, 2, configs::handle_alter_configs),
    route!(CreatePartitions, 0, 3, admin::handle_create_partitions),
    // KIP-455 through the controller; v1 carries KIP-860's AllowReplicationFactorChange.
    route!(
        AlterPartitionReassignments,
        0,
        1,
        reassign::handle_alter_partition_reassignments
    ),
    route!(
        ListPartitionReassignments,
        0,
        0,
        reassign::handle_list_partition_reassignments
    ),
    route!(ElectLeaders, 0, 2, elect_leaders::handle_elect_leaders),
    route!(
        IncrementalAlterConfigs,
        0,
        1,
        configs::handle_incremental_alter_configs
    ),
    route!(DescribeCluster, 0, 2, cluster::handle_describe_cluster),
    route!(
        DescribeQuorum,
        0,
        2,
        describe_quorum::handle_describe_quorum
    ),
    route!(DescribeLogDirs, 1, 4, log_dirs::handle_describe_log_dirs),
    // KIP-966: partitions with their ELR, paged (what Kafka 4's kafka-topics --describe uses).
    route!(
        DescribeTopicPartitions,
        0,
        0,
        describe_topic_partitions::handle
    ),
    // Consumer groups (classic protocol). OffsetCommit/OffsetFetch v10 need topic ids.
    route!(OffsetCommit, 2, 9, groups::handle_offset_commit),
    route!(OffsetFetch, 1, 9, groups::handle_offset_fetch),
    route!(FindCoordinator, 0, 6, groups::handle_find_coordinator),
    route!(JoinGroup, 0, 9, groups::handle_join_group),
    route!(Heartbeat, 0, 4, groups::handle_heartbeat),
    route!(LeaveGroup, 0, 5, groups::handle_leave_group),
    route!(SyncGroup, 0, 5, groups::handle_sync_group),
    route!(DescribeGroups, 0, 6, groups_admin::handle_describe_groups),
    route!(ListGroups, 0, 5, groups_admin::handle_list_groups),
    route!(DeleteGroups, 0, 2, groups_admin::handle_delete_groups),
    route!(OffsetDelete, 0, 0, groups::handle_offset_delete),
    // KIP-848 consumer groups: answered, always with UNSUPPORTED_VERSION (see the handler).
    route!(
        ConsumerGroupHeartbeat,
        0,
        1,
        group_protocol::handle_consumer_group_heartbeat
    ),
    // Idempotent producers.
    route!(InitProducerId, 0, 5, producer::handle_init_producer_id),
    route!(DescribeProducers, 0, 0, producer::handle_describe_producers),
    // Security: on SASL listeners `security::gate` answers these two first; advertised only
    // when a SASL listener exists (`api_ranges_for`).
    route!(SaslHandshake, 0, 1, scram_users::handle_sasl_handshake),
    route!(
        SaslAuthenticate,
        0,
        2,
        scram_users::handle_sasl_authenticate
    ),
    route!(
        DescribeUserScramCredentials,
        0,
        0,
        scram_users::handle_describe
    ),
    route!(AlterUserScramCredentials, 0, 0, scram_users::handle_alter),
    // Transactions (KIP-98, transaction protocol v1): AddPartitionsToTxn v4+ carries the
    // brokers' verify-only batches (KIP-890 part 1); EndTxn v5 / TxnOffsetCommit v5 are v2.
    route!(AddPartitionsToTxn, 0, 5, txn::handle_add_partitions),
    route!(AddOffsetsToTxn, 0, 4, txn::handle_add_offsets),
    route!(EndTxn, 0, 5, txn::handle_end_txn),
    route!(TxnOffsetCommit, 0, 5, txn::handle_txn_offset_commit),
    route!(DescribeTransactions, 0, 0, txn_admin::handle_describe),
    // v2's transactional-id pattern is not applied yet.
    route!(ListTransactions, 0, 1, txn_admin::handle_list),
    route!(WriteTxnMarkers, 0, 1, txn_admin::handle_write_markers),
    // Client quotas (KIP-546); enforcement in `crate::quota`.
    route!(DescribeClientQuotas, 0, 1, client_quotas::handle_describe),
    route!(AlterClientQuotas, 0, 1, client_quotas::handle_alter),
    // ACLs (docs/SECURITY.md); v0 is gone since Kafka 4.0 (KIP-896).
    route!(DescribeAcls, 1, 3, acls::handle_describe),
    route!(CreateAcls, 1, 3, acls::handle_create),
    route!(DeleteAcls, 1, 3, acls::handle_delete),
];

/// The route serving `api_key`, if any.
pub fn find(api_key: ApiKey) -> Option<&'static Route> {
    ROUTES.iter().find(|r| r.api_key == api_key)
}

/// Every route's range, sorted by api key.
pub fn api_ranges() -> Vec<ApiRange> {
    api_ranges_for(true)
}

/// What ApiVersions advertises: SaslHandshake and SaslAuthenticate only when `sasl` (a SASL
/// listener exists), sorted by api key.
pub fn api_ranges_for(sasl: bool) -> Vec<ApiRange> {
    let mut ranges: Vec<ApiRange> = ROUTES
        .iter()
        .filter(|r| sasl || !matches!(r.api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate))
        .map(Route::range)
        .collect();
    ranges.sort_by_key(|r| r.api_key as i16);
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_unique_and_within_the_codec_range() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(
                ROUTES[i + 1..].iter().all(|o| o.api_key != r.api_key),
                "{:?} routed twice",
                r.api_key
            );
            // The `api` label of the error metrics is one name per routed API.
            assert_ne!(streamforge_protocol::frame::api_name(r.api_key), "Other");
            let codec = r.api_key.valid_versions();
            assert!(r.max_version <= codec.max, "{:?} beyond codec", r.api_key);
            assert!(r.min_version <= r.max_version);
        }
    }
}

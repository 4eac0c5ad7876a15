//! The APIs the broker serves and their version ranges: a copy of `ROUTES` in
//! `crates/broker/src/router.rs` (without the handlers). `scripts/fuzz` compares the two before
//! building and fails if they drift apart, so a newly routed API cannot go unfuzzed.

use kafka_protocol::messages::ApiKey;
use streamforge_protocol::api_versions::ApiRange;

macro_rules! served {
    ($($key:ident, $min:expr, $max:expr;)*) => {
        /// `(api key, min version, max version)` of every served API, in routing-table order.
        pub static SERVED: &[ApiRange] = &[
            $(ApiRange { api_key: ApiKey::$key, min_version: $min, max_version: $max },)*
        ];
    };
}

// Keep in the order of router.rs, one line per route (scripts/fuzz parses both).
served! {
    Produce, 0, 12;
    Fetch, 4, 15;
    ListOffsets, 1, 10;
    Metadata, 0, 13;
    ApiVersions, 0, 4;
    CreateTopics, 2, 7;
    DeleteTopics, 1, 6;
    DeleteRecords, 0, 2;
    OffsetForLeaderEpoch, 2, 4;
    DescribeConfigs, 1, 4;
    AlterConfigs, 0, 2;
    CreatePartitions, 0, 3;
    AlterPartitionReassignments, 0, 1;
    ListPartitionReassignments, 0, 0;
    ElectLeaders, 0, 2;
    IncrementalAlterConfigs, 0, 1;
    DescribeCluster, 0, 2;
    DescribeQuorum, 0, 2;
    DescribeLogDirs, 1, 4;
    DescribeTopicPartitions, 0, 0;
    OffsetCommit, 2, 9;
    OffsetFetch, 1, 9;
    FindCoordinator, 0, 6;
    JoinGroup, 0, 9;
    Heartbeat, 0, 4;
    LeaveGroup, 0, 5;
    SyncGroup, 0, 5;
    DescribeGroups, 0, 6;
    ListGroups, 0, 5;
    DeleteGroups, 0, 2;
    OffsetDelete, 0, 0;
    ConsumerGroupHeartbeat, 0, 1;
    InitProducerId, 0, 5;
    DescribeProducers, 0, 0;
    SaslHandshake, 0, 1;
    SaslAuthenticate, 0, 2;
    DescribeUserScramCredentials, 0, 0;
    AlterUserScramCredentials, 0, 0;
    AddPartitionsToTxn, 0, 5;
    AddOffsetsToTxn, 0, 4;
    EndTxn, 0, 5;
    TxnOffsetCommit, 0, 5;
    DescribeTransactions, 0, 0;
    ListTransactions, 0, 1;
    WriteTxnMarkers, 0, 1;
    DescribeClientQuotas, 0, 1;
    AlterClientQuotas, 0, 1;
    DescribeAcls, 1, 3;
    CreateAcls, 1, 3;
    DeleteAcls, 1, 3;
}

/// The served range for `api_key`, if the broker serves it.
pub fn find(api_key: ApiKey) -> Option<ApiRange> {
    SERVED.iter().copied().find(|r| r.api_key == api_key)
}

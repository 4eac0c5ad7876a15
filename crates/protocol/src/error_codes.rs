//! Every error code a response carries (top level, per resource and per partition), so the
//! broker can count the errors it answers in one place (`/metrics`) whatever the API.
//! `encode_response` requires it: a response type without an impl does not compile.

use kafka_protocol::messages::*;

/// Calls `f` with every error code field of a response (zero codes included).
pub trait ErrorCodes {
    fn error_codes(&self, f: &mut dyn FnMut(i16));
}

/// `codes!(Type, r => expr_yielding_an_iterator_of_i16)`.
macro_rules! codes {
    ($ty:ty, $r:ident => $codes:expr) => {
        impl ErrorCodes for $ty {
            fn error_codes(&self, f: &mut dyn FnMut(i16)) {
                let $r = self;
                $codes.into_iter().for_each(|c: i16| f(c));
            }
        }
    };
}

/// The single top-level `error_code` of a response.
macro_rules! top_level {
    ($($ty:ty),* $(,)?) => {
        $(codes!($ty, r => [r.error_code]);)*
    };
}

top_level!(
    ApiVersionsResponse,
    DescribeClusterResponse,
    HeartbeatResponse,
    SyncGroupResponse,
    ListGroupsResponse,
    InitProducerIdResponse,
    ConsumerGroupHeartbeatResponse,
    SaslHandshakeResponse,
    SaslAuthenticateResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
);

codes!(ProduceResponse, r => r.responses.iter().flat_map(|t| {
    t.partition_responses.iter().map(|p| p.error_code)
}));
codes!(ListOffsetsResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));
codes!(MetadataResponse, r => std::iter::once(r.error_code).chain(r.topics.iter().flat_map(|t| {
    std::iter::once(t.error_code).chain(t.partitions.iter().map(|p| p.error_code))
})));
codes!(CreateTopicsResponse, r => r.topics.iter().flat_map(|t| {
    [t.error_code, t.topic_config_error_code]
}));
codes!(DeleteTopicsResponse, r => r.responses.iter().map(|t| t.error_code));
codes!(DeleteRecordsResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));
codes!(OffsetForLeaderEpochResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));
codes!(DescribeConfigsResponse, r => r.results.iter().map(|c| c.error_code));
codes!(AlterConfigsResponse, r => r.responses.iter().map(|c| c.error_code));
codes!(IncrementalAlterConfigsResponse, r => r.responses.iter().map(|c| c.error_code));
codes!(CreatePartitionsResponse, r => r.results.iter().map(|t| t.error_code));
codes!(AlterPartitionReassignmentsResponse, r => std::iter::once(r.error_code).chain(r.responses.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
})));
codes!(ListPartitionReassignmentsResponse, r => [r.error_code]);
codes!(ElectLeadersResponse, r => std::iter::once(r.error_code).chain(
    r.replica_election_results.iter().flat_map(|t| t.partition_result.iter().map(|p| p.error_code))
));
codes!(DescribeQuorumResponse, r => std::iter::once(r.error_code).chain(r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
})));
codes!(DescribeLogDirsResponse, r => std::iter::once(r.error_code).chain(r.results.iter().map(|d| d.error_code)));
codes!(DescribeTopicPartitionsResponse, r => r.topics.iter().flat_map(|t| {
    std::iter::once(t.error_code).chain(t.partitions.iter().map(|p| p.error_code))
}));
codes!(OffsetCommitResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));
// v0-7 answer one group (top level and per partition), v8+ a list of groups.
codes!(OffsetFetchResponse, r => std::iter::once(r.error_code)
.chain(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
.chain(r.groups.iter().flat_map(|g| {
    std::iter::once(g.error_code)
        .chain(g.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
})));
// v0-3 answer one coordinator at the top level, v4+ a list.
codes!(FindCoordinatorResponse, r => std::iter::once(r.error_code)
    .chain(r.coordinators.iter().map(|c| c.error_code)));
codes!(JoinGroupResponse, r => [r.error_code]);
codes!(LeaveGroupResponse, r => std::iter::once(r.error_code).chain(r.members.iter().map(|m| m.error_code)));
codes!(DescribeGroupsResponse, r => r.groups.iter().map(|g| g.error_code));
codes!(DeleteGroupsResponse, r => r.results.iter().map(|g| g.error_code));
codes!(OffsetDeleteResponse, r => std::iter::once(r.error_code).chain(r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
})));
codes!(DescribeProducersResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));

codes!(CreateAclsResponse, r => r.results.iter().map(|c| c.error_code));
codes!(DescribeAclsResponse, r => [r.error_code]);
codes!(DeleteAclsResponse, r => r.filter_results.iter().flat_map(|f| {
    std::iter::once(f.error_code).chain(f.matching_acls.iter().map(|m| m.error_code))
}));

/// The non-zero codes of `body`, in field order.
pub fn nonzero_error_codes(body: &impl ErrorCodes) -> Vec<i16> {
    let mut out = Vec::new();
    body.error_codes(&mut |c| {
        if c != 0 {
            out.push(c);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
    };

    #[test]
    fn nested_codes_are_all_reported() {
        let mut p = OffsetFetchResponsePartitions::default();
        p.error_code = 3;
        let mut t = OffsetFetchResponseTopics::default();
        t.partitions = vec![p.clone(), OffsetFetchResponsePartitions::default()];
        let mut g = OffsetFetchResponseGroup::default();
        g.error_code = 69;
        g.topics = vec![t];
        let mut r = OffsetFetchResponse::default();
        r.groups = vec![g];
        assert_eq!(nonzero_error_codes(&r), [69, 3]);
        assert!(nonzero_error_codes(&HeartbeatResponse::default()).is_empty());
    }
}
codes!(DescribeUserScramCredentialsResponse, r => std::iter::once(r.error_code)
    .chain(r.results.iter().map(|u| u.error_code)));
codes!(AlterUserScramCredentialsResponse, r => r.results.iter().map(|u| u.error_code));
top_level!(DescribeClientQuotasResponse);
codes!(AlterClientQuotasResponse, r => r.entries.iter().map(|e| e.error_code));
// v0-3 answer per topic and partition, v4+ per transaction (and a top-level code).
codes!(AddPartitionsToTxnResponse, r => std::iter::once(r.error_code)
.chain(r.results_by_topic_v3_and_below.iter().flat_map(|t| {
    t.results_by_partition.iter().map(|p| p.partition_error_code)
}))
.chain(r.results_by_transaction.iter().flat_map(|x| {
    x.topic_results.iter().flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
})));
codes!(TxnOffsetCommitResponse, r => r.topics.iter().flat_map(|t| {
    t.partitions.iter().map(|p| p.error_code)
}));
codes!(DescribeTransactionsResponse, r => r.transaction_states.iter().map(|t| t.error_code));
codes!(ListTransactionsResponse, r => [r.error_code]);
codes!(WriteTxnMarkersResponse, r => r.markers.iter().flat_map(|m| {
    m.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code))
}));

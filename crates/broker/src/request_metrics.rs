//! Error and build metrics for `/metrics`: errors answered per API and Kafka error name,
//! failed produce / fetch / offset-commit requests, and `streamforge_build_info`; plus the
//! `# HELP` text of every family the broker records.
//!
//! Cardinality is bounded by construction: `api` is one of the routed API names and `error` one
//! of Kafka's error names (an unknown code is `UNKNOWN`); no label carries a topic or a client.

use kafka_protocol::messages::ApiKey;
use streamforge_protocol::frame::api_name;

use crate::router::HandlerResult;

/// Errors in responses, by `api` and Kafka `error` name (one per partition or resource).
pub const REQUEST_ERRORS: &str = "streamforge_request_errors_total";
/// Produce requests with at least one partition error.
pub const FAILED_PRODUCE: &str = "streamforge_failed_produce_requests_total";
/// Fetch requests with at least one partition error.
pub const FAILED_FETCH: &str = "streamforge_failed_fetch_requests_total";
/// OffsetCommit requests with at least one partition error.
pub const FAILED_OFFSET_COMMIT: &str = "streamforge_failed_offset_commit_requests_total";
/// Always 1, labelled with the version and build profile.
pub const BUILD_INFO: &str = "streamforge_build_info";

/// Kafka's name of an error code, as its tools print it: `UNKNOWN_TOPIC_OR_PARTITION`.
pub fn error_name(code: i16) -> String {
    let known = kafka_protocol::ResponseError::try_from_code(code)
        .map(|e| format!("{e:?}"))
        // A code kafka-protocol does not name comes back as `Unknown(n)`: one label for all
        // of them keeps the cardinality bounded.
        .filter(|name| !name.contains('('));
    match known {
        Some(name) => screaming_snake(&name),
        None => "UNKNOWN".to_string(),
    }
}

/// `UnknownTopicOrPartition` -> `UNKNOWN_TOPIC_OR_PARTITION`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Count every error code of a handler's response under its API: the one place
/// `streamforge_request_errors_total` is counted, for every routed API (the router calls it).
/// A response that is not sent (Produce acks=0) is not counted.
pub fn count_response(api: ApiKey, result: &HandlerResult) {
    if let Ok(Some(frame)) = result {
        for code in &frame.error_codes {
            metrics::counter!(REQUEST_ERRORS, "api" => api_name(api), "error" => error_name(*code))
                .increment(1);
        }
    }
}

/// Count `failed` once when one response has any non-zero code (the per-code counts are
/// the router's, `count_response`). Returns whether there was an error.
pub fn count(
    _api: &'static str,
    codes: impl IntoIterator<Item = i16>,
    failed: Option<&'static str>,
) -> bool {
    let any = codes.into_iter().any(|c| c != 0);
    if any && let Some(name) = failed {
        metrics::counter!(name).increment(1);
    }
    any
}

/// `# HELP` for the broker's own families, zeroed counters so a scrape shows them before the
/// first error, and the build-info gauge. Call once the recorder is installed.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        REQUEST_ERRORS,
        "Errors answered, by API and Kafka error name (one per partition or resource)"
    );
    describe_counter!(
        FAILED_PRODUCE,
        "Produce requests with at least one partition error"
    );
    describe_counter!(
        FAILED_FETCH,
        "Fetch requests with at least one partition error"
    );
    describe_counter!(
        FAILED_OFFSET_COMMIT,
        "OffsetCommit requests with at least one partition error"
    );
    for name in [FAILED_PRODUCE, FAILED_FETCH, FAILED_OFFSET_COMMIT] {
        metrics::counter!(name).absolute(0);
    }
    describe_gauge!(BUILD_INFO, "Always 1; the labels say which build runs");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "profile" => profile)
        .set(1.0);
    describe_counter!(
        "streamforge_storage_errors_total",
        "Log reads or writes that failed with a storage error, by topic"
    );
    describe_counter!(
        crate::scrubber::SCRUB_ERRORS_METRIC,
        "Damaged batches found by the background scrub"
    );
    describe_gauge!(
        "streamforge_log_recovery_checked_bytes",
        "Bytes whose CRC the logs re-checked at start-up (0 after a clean shutdown)"
    );
    describe_gauge!(
        "streamforge_offline_partitions",
        "Partitions whose log could not be opened"
    );
    describe_gauge!(
        "streamforge_txn_markers_waiting",
        "Transaction markers waiting for their partition's leader or queued to it (not in flight)"
    );
    metrics::describe_histogram!(
        crate::txn_service_markers::MARKERS_METRIC,
        metrics::Unit::Seconds,
        "From a transaction's Prepare record to its last marker written, when its markers go to other brokers or wait for followers"
    );
    describe_counter!(
        crate::handlers::fetch::CONSUMER_FETCH_RECORDS,
        "Records sent to consumers, by this broker's role for the partition (leader or follower, KIP-392)"
    );
    describe_counter!(
        crate::handlers::fetch::PREFERRED_READ_REPLICA_ANSWERS,
        "Consumer fetches of a partition answered with a preferred read replica (KIP-392), one per partition"
    );
    crate::quota::describe_metrics();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(
            error_name(kafka_protocol::ResponseError::UnknownTopicOrPartition.code()),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(
            error_name(kafka_protocol::ResponseError::InvalidRequest.code()),
            "INVALID_REQUEST"
        );
        assert_eq!(error_name(i16::MAX), "UNKNOWN");
    }
}

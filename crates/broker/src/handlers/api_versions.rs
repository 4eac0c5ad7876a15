//! ApiVersions (18): advertise exactly what `router::ROUTES` serves.

use std::sync::Arc;

use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::api_versions::api_versions_body;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::router::{HandlerResult, api_ranges_for};

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    if req.api_version >= 3 {
        // v3+ carries client software name/version; an undecodable body closes the connection
        // like any other bad request, an illegal name or version is INVALID_REQUEST.
        let body: ApiVersionsRequest = req.decode()?;
        if !is_valid_software_field(&body.client_software_name)
            || !is_valid_software_field(&body.client_software_version)
        {
            // Kafka's `getErrorResponse`: the error code and no api keys.
            let mut resp = api_versions_body(&[]);
            resp.error_code = ResponseError::InvalidRequest.code();
            return Ok(Some(req.respond(&resp)?));
        }
    }
    let mut ranges = api_ranges_for(state.config.security.serves_sasl());
    let transaction_version = state.config.txn.transaction_version;
    if transaction_version < streamforge_coordinator::txn::TRANSACTION_VERSION_EPOCH_BUMP {
        cap_to_transaction_version_1(&mut ranges);
    }
    let mut resp = api_versions_body(&ranges);
    add_features(&mut resp, transaction_version);
    Ok(Some(req.respond(&resp)?))
}

/// Below `transaction.version` 2 Kafka advertises the last versions before KIP-890 part 2
/// (Produce v11, EndTxn v4, TxnOffsetCommit v4): v12 / v5 / v5 mean "transaction version 2".
fn cap_to_transaction_version_1(ranges: &mut [streamforge_protocol::api_versions::ApiRange]) {
    use kafka_protocol::messages::ApiKey;
    for r in ranges {
        let last_v1 = match r.api_key {
            ApiKey::Produce => 11,
            ApiKey::EndTxn | ApiKey::TxnOffsetCommit => 4,
            _ => continue,
        };
        r.max_version = r.max_version.min(last_v1);
    }
}

/// The features a Kafka 4.x broker reports (ApiVersions v3+): `transaction.version` supported
/// at levels 0-2 and finalized at the configured level. Clients enable KIP-890 part 2 when the
/// finalized level is 2 (and the feature epoch is newer than the one they saw).
fn add_features(
    resp: &mut kafka_protocol::messages::ApiVersionsResponse,
    transaction_version: i16,
) {
    const NAME: &str = "transaction.version";
    let mut supported = SupportedFeatureKey::default();
    supported.name = StrBytes::from_static_str(NAME);
    supported.min_version = 0;
    supported.max_version = streamforge_coordinator::txn::TRANSACTION_VERSION_EPOCH_BUMP;
    resp.supported_features.push(supported);
    // One broker, features fixed at start-up: the feature epoch never changes.
    resp.finalized_features_epoch = FINALIZED_FEATURES_EPOCH;
    if transaction_version > 0 {
        let mut finalized = FinalizedFeatureKey::default();
        finalized.name = StrBytes::from_static_str(NAME);
        finalized.min_version_level = transaction_version;
        finalized.max_version_level = transaction_version;
        resp.finalized_features.push(finalized);
    }
}

/// The epoch of the finalized features (Kafka: the metadata offset that set them).
const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// Kafka's `SOFTWARE_NAME_VERSION_PATTERN`: `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn is_valid_software_field(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
}

#[cfg(test)]
mod tests {
    use super::is_valid_software_field as ok;

    #[test]
    fn follows_kafkas_software_name_pattern() {
        for good in [
            "a",
            "librdkafka",
            "apache-kafka-java",
            "2.3.0",
            "1.0-SNAPSHOT.x",
            "Z9",
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            ".a",
            "a.",
            "a b",
            "a_b",
            "caf\u{e9}",
            "a/b",
            "\n",
        ] {
            assert!(!ok(bad), "{bad:?}");
        }
    }
}

//! ApiVersions (18): advertise exactly what `router::ROUTES` serves.

use std::sync::Arc;

use kafka_protocol::messages::ApiVersionsRequest;
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
    let ranges = api_ranges_for(state.config.security.serves_sasl());
    Ok(Some(req.respond(&api_versions_body(&ranges))?))
}

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

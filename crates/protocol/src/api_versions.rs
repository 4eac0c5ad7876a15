//! The ApiVersions answer: built from the broker's routing table (one entry per served api),
//! including Kafka's quirk for clients that ask with a newer ApiVersions version than ours.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

use crate::ResponseError;
use crate::error::ProtocolError;
use crate::frame::{ResponseFrame, encode_response};

/// One served api and its version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub api_key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
}

impl ApiRange {
    pub fn contains(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

/// The ApiVersions response body for a supported request version. Only the fields real Kafka
/// sends to every client: older librdkafka mis-parses unexpected tagged fields.
pub fn api_versions_body(ranges: &[ApiRange]) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.error_code = 0;
    resp.throttle_time_ms = 0;
    resp.finalized_features_epoch = -1;
    resp.api_keys = ranges
        .iter()
        .map(|r| {
            let mut v = ApiVersion::default();
            v.api_key = r.api_key as i16;
            v.min_version = r.min_version;
            v.max_version = r.max_version;
            v
        })
        .collect();
    resp
}

/// The answer to an ApiVersions request at a version we do not serve: a **v0** body with
/// UNSUPPORTED_VERSION and our ApiVersions range, so the client retries at a version we know.
pub fn unsupported_api_versions_response(
    correlation_id: i32,
    api_versions_range: ApiRange,
) -> Result<ResponseFrame, ProtocolError> {
    let mut resp = api_versions_body(&[api_versions_range]);
    resp.error_code = ResponseError::UnsupportedVersion.code();
    encode_response(ApiKey::ApiVersions, 0, correlation_id, &resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn unsupported_version_answer_is_v0_with_our_range() {
        let range = ApiRange {
            api_key: ApiKey::ApiVersions,
            min_version: 0,
            max_version: 4,
        };
        let frame = unsupported_api_versions_response(7, range).unwrap();
        let mut b = frame.chunks[0].clone();
        assert_eq!(b.get_i32() as usize, b.len());
        assert_eq!(b.get_i32(), 7); // header v0: correlation id only
        let resp = ApiVersionsResponse::decode(&mut b, 0).unwrap();
        assert_eq!(resp.error_code, ResponseError::UnsupportedVersion.code());
        assert_eq!(resp.api_keys.len(), 1);
        assert_eq!(resp.api_keys[0].max_version, 4);
        assert!(!b.has_remaining());
    }

    #[test]
    fn v3_answer_has_no_extra_tagged_fields() {
        let ranges = [ApiRange {
            api_key: ApiKey::Metadata,
            min_version: 0,
            max_version: 12,
        }];
        let frame =
            encode_response(ApiKey::ApiVersions, 3, 1, &api_versions_body(&ranges)).unwrap();
        let b = &frame.chunks[0];
        // prefix(4) + corr(4) + error(2) + compact array len(1) + entry(2+2+2+1) + throttle(4) + tags(1)
        assert_eq!(b.len(), 4 + 4 + 2 + 1 + 7 + 4 + 1);
    }
}

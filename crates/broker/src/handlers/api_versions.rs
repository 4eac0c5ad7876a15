//! ApiVersions (18): advertise exactly what `router::ROUTES` serves.

use std::sync::Arc;

use kafka_protocol::messages::ApiVersionsRequest;
use streamforge_protocol::RequestFrame;
use streamforge_protocol::api_versions::api_versions_body;

use crate::BrokerState;
use crate::router::{HandlerResult, api_ranges};

pub async fn handle(_state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    if req.api_version >= 3 {
        // v3+ carries client software name/version; a malformed body is INVALID_REQUEST in
        // Kafka, but decoding failures close the connection like any other bad request.
        let _body: ApiVersionsRequest = req.decode()?;
    }
    Ok(Some(req.respond(&api_versions_body(&api_ranges()))?))
}

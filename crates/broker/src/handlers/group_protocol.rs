//! ConsumerGroupHeartbeat (68): the KIP-848 "consumer" group protocol, which this broker does
//! not run (groups use the classic protocol: JoinGroup/SyncGroup/Heartbeat).
//!
//! Not advertising the API is not enough: librdkafka with `group.protocol=consumer` then marks
//! the coordinator dead and retries forever without telling the application anything. So the
//! API is advertised and every request is answered UNSUPPORTED_VERSION with a message, exactly
//! as Kafka does when `group.coordinator.rebalance.protocols` does not enable `consumer`;
//! librdkafka and the Java client treat that answer as fatal and say so.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::handlers::message;
use crate::router::HandlerResult;

/// What the client is told (and logs).
pub const CONSUMER_PROTOCOL_UNSUPPORTED: &str = "The new consumer group protocol (KIP-848, \
     group.protocol=consumer) is not supported by this broker; use group.protocol=classic.";

pub async fn handle_consumer_group_heartbeat(
    _state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let request: ConsumerGroupHeartbeatRequest = req.decode()?;
    tracing::warn!(
        group = %request.group_id.0,
        client_id = req.client_id.as_deref().unwrap_or(""),
        "refusing a group.protocol=consumer (KIP-848) client: only the classic protocol is served"
    );
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.error_code = ResponseError::UnsupportedVersion.code();
    resp.error_message = message(CONSUMER_PROTOCOL_UNSUPPORTED);
    resp.member_epoch = -1;
    Ok(Some(req.respond(&resp)?))
}

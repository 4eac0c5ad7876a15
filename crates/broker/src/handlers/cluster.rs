//! DescribeCluster (60): the brokers of the metadata image (fenced ones too from v2, when
//! asked: KIP-1073) and the active controller. DescribeQuorum is in `describe_quorum`.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, Resource};

/// DescribeCluster endpoint types (KIP-919): brokers = 1, controllers = 2.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

pub async fn handle_describe_cluster(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeClusterRequest = req.decode()?;
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = StrBytes::from_string(state.cluster_id.clone());
    resp.controller_id = BrokerId(crate::handlers::metadata::controller_id(&state));
    // Kafka: the bit field when asked for, and 0 without DESCRIBE on the cluster.
    let access = Access::of(&state, &req);
    resp.cluster_authorized_operations = if !request.include_cluster_authorized_operations {
        i32::MIN
    } else if access.quiet().cluster(Operation::Describe) {
        access.operations(&Resource::cluster())
    } else {
        0
    };
    resp.endpoint_type = ENDPOINT_TYPE_BROKERS;
    if req.api_version >= 1 && request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        // Kafka (`AuthHelper.computeDescribeClusterResponse`): asking a broker listener for
        // controllers is MISMATCHED_ENDPOINT_TYPE, any other type UNSUPPORTED_ENDPOINT_TYPE.
        resp.error_code = if request.endpoint_type == ENDPOINT_TYPE_CONTROLLER {
            ResponseError::MismatchedEndpointType.code()
        } else {
            ResponseError::UnsupportedEndpointType.code()
        };
        resp.error_message = message("only broker endpoints are served");
        resp.endpoint_type = request.endpoint_type;
        return Ok(Some(req.respond(&resp)?));
    }
    let image = state.replicas.image();
    let mut brokers: Vec<DescribeClusterBroker> =
        crate::handlers::metadata::live_brokers(&state, &image, req.listener)
            .into_iter()
            .map(|m| {
                let mut b = DescribeClusterBroker::default();
                b.broker_id = m.node_id;
                b.host = m.host;
                b.port = m.port;
                b.rack = m.rack;
                b
            })
            .collect();
    if request.include_fenced_brokers {
        brokers.extend(fenced_brokers(&state, &image, req.listener));
        brokers.sort_by_key(|b| b.broker_id.0);
    }
    resp.brokers = brokers;
    resp.error_code = 0;
    Ok(Some(req.respond(&resp)?))
}

/// Fenced brokers (registered, not heartbeating or shut down) on the request's listener, with
/// `is_fenced` set (DescribeCluster v2).
fn fenced_brokers(
    state: &BrokerState,
    image: &streamforge_metadata::MetadataImage,
    listener: usize,
) -> Vec<DescribeClusterBroker> {
    let name = state.security.endpoint(listener).protocol.name();
    image
        .brokers()
        .values()
        .filter(|b| b.fenced && b.id != state.node_id())
        .filter_map(|b| {
            let e = b.endpoints.iter().find(|e| e.name == name)?;
            let mut d = DescribeClusterBroker::default();
            d.broker_id = BrokerId(b.id);
            d.host = StrBytes::from_string(e.host.clone());
            d.port = i32::from(e.port);
            d.rack = b.rack.clone().map(StrBytes::from_string);
            d.is_fenced = true;
            Some(d)
        })
        .collect()
}

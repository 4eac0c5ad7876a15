//! CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) over `security::acl`. Without an
//! authorizer Kafka answers SECURITY_DISABLED; with one, changing ACLs needs ALTER on the
//! cluster and listing them DESCRIBE (else CLUSTER_AUTHORIZATION_FAILED).

use std::sync::Arc;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::router::HandlerResult;
use crate::security::acl::{
    Access, AccessControlEntry, AclBinding, AclFilter, Operation, PatternType, Permission,
    ResourcePattern, ResourceType,
};

const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// The error of a whole request, if there is one: no authorizer, or not allowed `op` on the
/// cluster.
fn refused(access: &Access<'_>, op: Operation) -> Option<(ResponseError, Option<StrBytes>)> {
    if !access.enabled() {
        Some((ResponseError::SecurityDisabled, message(NO_AUTHORIZER)))
    } else if !access.cluster(op) {
        Some((ResponseError::ClusterAuthorizationFailed, None))
    } else {
        None
    }
}

pub async fn handle_create(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: CreateAclsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = CreateAclsResponse::default();
    if let Some((code, msg)) = refused(&access, Operation::Alter) {
        resp.results = request
            .creations
            .iter()
            .map(|_| creation_result(code.code(), msg.clone()))
            .collect();
        return Ok(Some(req.respond(&resp)?));
    }
    let authorizer = state.security.authorizer.clone().expect("enabled above");
    let decoded: Vec<Option<AclBinding>> = request.creations.iter().map(binding).collect();
    let valid: Vec<AclBinding> = decoded.iter().flatten().cloned().collect();
    let mut stored = tokio::task::spawn_blocking(move || authorizer.create(valid))
        .await
        .map_err(|e| crate::router::HandlerError::Close(e.to_string()))?
        .into_iter();
    resp.results = decoded
        .iter()
        .map(|d| match d {
            None => creation_result(
                ResponseError::InvalidRequest.code(),
                message("Invalid ACL creation: unknown resource type, pattern type, operation or permission"),
            ),
            Some(_) => match stored.next() {
                Some(Ok(())) => creation_result(0, None),
                Some(Err(e)) => creation_result(e.response_error().code(), message(e.to_string())),
                None => creation_result(ResponseError::UnknownServerError.code(), None),
            },
        })
        .collect();
    Ok(Some(req.respond(&resp)?))
}

fn creation_result(code: i16, msg: Option<StrBytes>) -> AclCreationResult {
    let mut r = AclCreationResult::default();
    r.error_code = code;
    r.error_message = msg;
    r
}

/// A creation as a binding; `None` when a code is UNKNOWN or not Kafka's.
fn binding(c: &AclCreation) -> Option<AclBinding> {
    Some(AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(c.resource_type)?,
            name: c.resource_name.to_string(),
            pattern_type: PatternType::from_code(c.resource_pattern_type)?,
        },
        entry: AccessControlEntry {
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: Operation::from_code(c.operation)?,
            permission: Permission::from_code(c.permission_type)?,
        },
    })
}

/// The fields of a DescribeAcls or DeleteAcls filter.
struct FilterFields<'a> {
    resource_type: i8,
    name: Option<&'a StrBytes>,
    pattern_type: i8,
    principal: Option<&'a StrBytes>,
    host: Option<&'a StrBytes>,
    operation: i8,
    permission: i8,
}

/// A filter; `None` when a code is UNKNOWN or not Kafka's (Kafka refuses such filters).
fn filter(f: FilterFields<'_>) -> Option<AclFilter> {
    Some(AclFilter {
        resource_type: ResourceType::from_code(f.resource_type)?,
        name: f.name.map(|n| n.to_string()),
        pattern_type: PatternType::from_code(f.pattern_type)?,
        principal: f.principal.map(|p| p.to_string()),
        host: f.host.map(|h| h.to_string()),
        operation: Operation::from_code(f.operation)?,
        permission: Permission::from_code(f.permission)?,
    })
}

pub async fn handle_describe(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let r: DescribeAclsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DescribeAclsResponse::default();
    if let Some((code, msg)) = refused(&access, Operation::Describe) {
        resp.error_code = code.code();
        resp.error_message = msg;
        return Ok(Some(req.respond(&resp)?));
    }
    let fields = FilterFields {
        resource_type: r.resource_type_filter,
        name: r.resource_name_filter.as_ref(),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref(),
        host: r.host_filter.as_ref(),
        operation: r.operation,
        permission: r.permission_type,
    };
    let Some(f) = filter(fields) else {
        resp.error_code = ResponseError::InvalidRequest.code();
        resp.error_message = message("The filter has unknown elements");
        return Ok(Some(req.respond(&resp)?));
    };
    let authorizer = state.security.authorizer.as_ref().expect("enabled above");
    for b in authorizer.describe(&f) {
        let same = resp.resources.last().is_some_and(|last| {
            last.resource_type == b.pattern.resource_type.code()
                && last.pattern_type == b.pattern.pattern_type.code()
                && last.resource_name.as_str() == b.pattern.name
        });
        if !same {
            let mut res = DescribeAclsResource::default();
            res.resource_type = b.pattern.resource_type.code();
            res.resource_name = StrBytes::from_string(b.pattern.name.clone());
            res.pattern_type = b.pattern.pattern_type.code();
            resp.resources.push(res);
        }
        let mut d = AclDescription::default();
        d.principal = StrBytes::from_string(b.entry.principal);
        d.host = StrBytes::from_string(b.entry.host);
        d.operation = b.entry.operation.code();
        d.permission_type = b.entry.permission.code();
        resp.resources.last_mut().expect("pushed").acls.push(d);
    }
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_delete(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DeleteAclsRequest = req.decode()?;
    let access = Access::of(&state, &req);
    let mut resp = DeleteAclsResponse::default();
    if let Some((code, msg)) = refused(&access, Operation::Alter) {
        resp.filter_results = request
            .filters
            .iter()
            .map(|_| filter_result(code.code(), msg.clone()))
            .collect();
        return Ok(Some(req.respond(&resp)?));
    }
    let decoded: Vec<Option<AclFilter>> = request.filters.iter().map(delete_filter).collect();
    let valid: Vec<AclFilter> = decoded.iter().flatten().cloned().collect();
    let authorizer = state.security.authorizer.clone().expect("enabled above");
    let mut deleted = tokio::task::spawn_blocking(move || authorizer.delete(&valid))
        .await
        .map_err(|e| crate::router::HandlerError::Close(e.to_string()))?
        .into_iter();
    for d in &decoded {
        let result = match d.as_ref().map(|_| deleted.next()) {
            None => filter_result(
                ResponseError::InvalidRequest.code(),
                message("The filter has unknown elements"),
            ),
            Some(Some(Ok(bindings))) => {
                let mut r = filter_result(0, None);
                r.matching_acls = bindings.into_iter().map(matching_acl).collect();
                r
            }
            Some(Some(Err(e))) => filter_result(e.response_error().code(), message(e.to_string())),
            Some(None) => filter_result(ResponseError::UnknownServerError.code(), None),
        };
        resp.filter_results.push(result);
    }
    Ok(Some(req.respond(&resp)?))
}

fn delete_filter(f: &DeleteAclsFilter) -> Option<AclFilter> {
    filter(FilterFields {
        resource_type: f.resource_type_filter,
        name: f.resource_name_filter.as_ref(),
        pattern_type: f.pattern_type_filter,
        principal: f.principal_filter.as_ref(),
        host: f.host_filter.as_ref(),
        operation: f.operation,
        permission: f.permission_type,
    })
}

fn filter_result(code: i16, msg: Option<StrBytes>) -> DeleteAclsFilterResult {
    let mut r = DeleteAclsFilterResult::default();
    r.error_code = code;
    r.error_message = msg;
    r
}

fn matching_acl(b: AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.resource_type = b.pattern.resource_type.code();
    m.resource_name = StrBytes::from_string(b.pattern.name);
    m.pattern_type = b.pattern.pattern_type.code();
    m.principal = StrBytes::from_string(b.entry.principal);
    m.host = StrBytes::from_string(b.entry.host);
    m.operation = b.entry.operation.code();
    m.permission_type = b.entry.permission.code();
    m
}

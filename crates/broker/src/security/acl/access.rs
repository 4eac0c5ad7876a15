//! What the handlers ask: may this request's principal, from its host, do an operation on a
//! resource? One `Access` per request; with no authorizer every answer is yes (and the
//! authorized-operations fields carry every supported operation, as Kafka answers without
//! `authorizer.class.name`).

use streamforge_protocol::RequestFrame;

use super::authorizer::authorized_operations_with;
use super::{Authorizer, Operation, Resource, ResourceType};
use crate::BrokerState;
use crate::security::principal::Principal;

/// Kafka's value of an authorized-operations field the request did not ask for.
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

#[derive(Clone)]
pub struct Access<'a> {
    authorizer: Option<&'a Authorizer>,
    principal: Principal,
    host: String,
    /// Log denials at INFO (Kafka's `logIfDenied`): off for filters and optional checks.
    log_denials: bool,
}

impl<'a> Access<'a> {
    pub fn of(state: &'a BrokerState, req: &RequestFrame) -> Access<'a> {
        let authorizer = state.security.authorizer.as_deref();
        if authorizer.is_none() {
            // Every answer is yes: nothing to allocate on the request path.
            return Access {
                authorizer,
                principal: Principal::user(String::new()),
                host: String::new(),
                log_denials: false,
            };
        }
        Access {
            authorizer,
            principal: match &req.principal {
                Some(name) => Principal::user(name.as_ref()),
                None => Principal::anonymous(),
            },
            host: req
                .client_addr
                .map(|a| a.to_canonical().to_string())
                .unwrap_or_else(|| "*".to_string()),
            log_denials: true,
        }
    }

    /// The same checks without the INFO line per denial: for filtering what is listed
    /// (Metadata, ListGroups, ...) and for checks with a fallback, as Kafka logs them at TRACE.
    pub fn quiet(&self) -> Access<'a> {
        Access {
            log_denials: false,
            ..self.clone()
        }
    }

    /// Whether an authorizer runs (the ACL APIs answer SECURITY_DISABLED without one).
    pub fn enabled(&self) -> bool {
        self.authorizer.is_some()
    }

    pub fn allowed(&self, op: Operation, resource: &Resource<'_>) -> bool {
        let Some(a) = self.authorizer else {
            return true;
        };
        let ok = a.authorize(&self.principal, &self.host, op, resource);
        if !ok && self.log_denials {
            tracing::info!(
                principal = %self.principal,
                host = %self.host,
                operation = %op,
                resource_type = %resource.resource_type,
                resource = resource.name,
                "denied"
            );
        } else if !ok {
            tracing::trace!(principal = %self.principal, operation = %op, resource = resource.name, "not allowed");
        }
        ok
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, &Resource::topic(name))
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, &Resource::group(name))
    }

    pub fn cluster(&self, op: Operation) -> bool {
        self.allowed(op, &Resource::cluster())
    }

    pub fn transactional_id(&self, op: Operation, id: &str) -> bool {
        self.allowed(op, &Resource::transactional_id(id))
    }

    /// Kafka's `authorizeByResourceType`: `op` on at least one resource of the type.
    pub fn any_of_type(&self, op: Operation, resource_type: ResourceType) -> bool {
        self.authorizer.is_none_or(|a| {
            a.authorize_by_resource_type(&self.principal, &self.host, op, resource_type)
        })
    }

    /// The authorized-operations bit field of `resource` (every supported operation without an
    /// authorizer).
    pub fn operations(&self, resource: &Resource<'_>) -> i32 {
        match self.authorizer {
            Some(a) => a.authorized_operations(&self.principal, &self.host, resource),
            None => authorized_operations_with(resource.resource_type, |_| true),
        }
    }

    /// `operations`, or Kafka's "not asked" value when `include` is false.
    pub fn operations_if(&self, include: bool, resource: &Resource<'_>) -> i32 {
        if include {
            self.operations(resource)
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        }
    }
}

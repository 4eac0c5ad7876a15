//! What each API request does, in Kafka's ACL words (operation on a resource), so the
//! authorization hook can be asked before the handler runs. One line per route: a route
//! missing here is refused (403), never silently open.

use axum::http::Method;
use kafka_protocol::ResponseError;

/// Kafka's ACL operations the dashboard's actions map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    DescribeConfigs,
    AlterConfigs,
}

/// Kafka's ACL resources (the cluster, a topic or a group by name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resource {
    Cluster,
    Topic(String),
    Group(String),
    TransactionalId(String),
}

/// One action of one request: the hook's question.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Action {
    pub operation: Operation,
    pub resource: Resource,
}

impl Action {
    pub fn new(operation: Operation, resource: Resource) -> Action {
        Action {
            operation,
            resource,
        }
    }

    /// Kafka's error for a refused action on this resource.
    pub fn denied_error(&self) -> ResponseError {
        match self.resource {
            Resource::Cluster => ResponseError::ClusterAuthorizationFailed,
            Resource::Topic(_) => ResponseError::TopicAuthorizationFailed,
            Resource::Group(_) => ResponseError::GroupAuthorizationFailed,
            Resource::TransactionalId(_) => ResponseError::TransactionalIdAuthorizationFailed,
        }
    }
}

/// Where a route's resource comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Cluster,
    /// The `{topic}` path parameter.
    Topic,
    /// The `{group}` path parameter.
    Group,
    /// The `{transactional_id}` path parameter.
    TransactionalId,
    /// The handler asks (the resource is in the body, or a list is filtered per item).
    Handler,
}

use Operation as O;

/// (method, route under /api, operation, resource). Handler-checked routes: `GET /topics` and
/// `GET /groups` list only what the caller may Describe; `POST /topics` asks Create on the new
/// topic; reset-offsets and delete-offsets also ask Read on the body's topic (as OffsetCommit
/// and OffsetDelete do in Kafka). `GET /transactions` lists only the ids the caller may
/// Describe (ListTransactions); aborting one asks Write on it (as EndTxn does).
const ROUTES: &[(Method, &str, Operation, From)] = &[
    (Method::GET, "/whoami", O::Describe, From::Handler),
    (Method::GET, "/cluster", O::Describe, From::Cluster),
    (Method::GET, "/topics", O::Describe, From::Handler),
    (Method::POST, "/topics", O::Create, From::Handler),
    (Method::GET, "/topics/{topic}", O::Describe, From::Topic),
    (Method::DELETE, "/topics/{topic}", O::Delete, From::Topic),
    (
        Method::GET,
        "/topics/{topic}/partitions/{partition}",
        O::Describe,
        From::Topic,
    ),
    (
        Method::GET,
        "/topics/{topic}/partitions/{partition}/messages",
        O::Read,
        From::Topic,
    ),
    (
        Method::PATCH,
        "/topics/{topic}/configs",
        O::AlterConfigs,
        From::Topic,
    ),
    (
        Method::POST,
        "/topics/{topic}/partitions",
        O::Alter,
        From::Topic,
    ),
    (
        Method::POST,
        "/topics/{topic}/partitions/{partition}/delete-records",
        O::Delete,
        From::Topic,
    ),
    (
        Method::GET,
        "/topics/{topic}/messages",
        O::Read,
        From::Topic,
    ),
    (
        Method::POST,
        "/topics/{topic}/messages",
        O::Write,
        From::Topic,
    ),
    (
        Method::GET,
        "/topics/{topic}/consumers",
        O::Describe,
        From::Topic,
    ),
    (Method::GET, "/broker", O::DescribeConfigs, From::Cluster),
    (Method::GET, "/groups", O::Describe, From::Handler),
    (Method::GET, "/groups/{group}", O::Describe, From::Group),
    (Method::DELETE, "/groups/{group}", O::Delete, From::Group),
    (
        Method::POST,
        "/groups/{group}/reset-offsets",
        O::Read,
        From::Group,
    ),
    (
        Method::DELETE,
        "/groups/{group}/offsets",
        O::Delete,
        From::Group,
    ),
    (
        Method::GET,
        "/groups/{group}/lag-history",
        O::Describe,
        From::Group,
    ),
    (Method::GET, "/transactions", O::Describe, From::Handler),
    (
        Method::GET,
        "/transactions/{transactional_id}",
        O::Describe,
        From::TransactionalId,
    ),
    (
        Method::POST,
        "/transactions/{transactional_id}/abort",
        O::Write,
        From::TransactionalId,
    ),
    (Method::GET, "/live", O::Describe, From::Cluster),
    (Method::GET, "/live/stream", O::Describe, From::Cluster),
    (Method::GET, "/bench", O::Describe, From::Cluster),
    (Method::POST, "/bench", O::Create, From::Cluster),
    (Method::GET, "/bench/{id}", O::Describe, From::Cluster),
];

/// A route [`route_action`] has no line for (refused with 403), or one whose path parameter is
/// missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownRoute;

/// The action of an API request: `Ok(None)` when the handler asks itself, `Err` for a route
/// the table does not know (refused). `route` is the matched route under `/api`;
/// `param` reads a path parameter.
pub fn route_action<'a>(
    method: &Method,
    route: &str,
    param: impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<Action>, UnknownRoute> {
    let route = route.strip_prefix("/api").unwrap_or(route);
    let (_, _, operation, from) = ROUTES
        .iter()
        .find(|(m, r, _, _)| {
            *r == route && (m == method || (*method == Method::HEAD && *m == Method::GET))
        })
        .ok_or(UnknownRoute)?;
    let name = |key: &str| param(key).map(str::to_string).ok_or(UnknownRoute);
    let resource = match from {
        From::Handler => return Ok(None),
        From::Cluster => Resource::Cluster,
        From::Topic => Resource::Topic(name("topic")?),
        From::Group => Resource::Group(name("group")?),
        From::TransactionalId => Resource::TransactionalId(name("transactional_id")?),
    };
    Ok(Some(Action::new(*operation, resource)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_kafka_operations() {
        let topic = |k: &str| (k == "topic").then_some("orders");
        assert_eq!(
            route_action(&Method::DELETE, "/api/topics/{topic}", topic),
            Ok(Some(Action::new(
                O::Delete,
                Resource::Topic("orders".into())
            )))
        );
        assert_eq!(
            route_action(&Method::POST, "/api/topics/{topic}/messages", topic),
            Ok(Some(Action::new(
                O::Write,
                Resource::Topic("orders".into())
            )))
        );
        assert_eq!(route_action(&Method::GET, "/api/topics", topic), Ok(None));
        assert_eq!(
            route_action(&Method::PUT, "/api/topics", topic),
            Err(UnknownRoute)
        );
        assert_eq!(
            route_action(&Method::GET, "/api/nowhere", topic),
            Err(UnknownRoute)
        );
        let action = Action::new(O::Read, Resource::Group("g".into()));
        assert_eq!(
            action.denied_error(),
            ResponseError::GroupAuthorizationFailed
        );
    }
}

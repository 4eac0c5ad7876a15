//! The dashboard's login as the broker sets it up: on whenever the Kafka side has security
//! (any SASL listener) or `--http-auth required`, checked against the same SCRAM credential
//! store as SASL PLAIN and SCRAM (so the dashboard has the broker's users, and no password
//! file). The authorization hook is the broker's ACL authorizer with `--authorizer acl`
//! (`dashboard_authorizer`), else `streamforge_http::auth::allow_all`.

use std::net::SocketAddr;
use std::sync::Arc;

use streamforge_http::auth::{HttpAuth, SESSION_TIMEOUT_MS_DEFAULT};

use crate::BrokerState;

/// `--http-auth`: when the dashboard asks for a login.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpAuthMode {
    /// When any listener speaks SASL (the broker has users and wants them).
    #[default]
    Auto,
    /// Always.
    Required,
}

impl std::str::FromStr for HttpAuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(HttpAuthMode::Auto),
            "required" => Ok(HttpAuthMode::Required),
            _ => Err(format!("http auth '{s}': want auto or required")),
        }
    }
}

impl std::fmt::Display for HttpAuthMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HttpAuthMode::Auto => "auto",
            HttpAuthMode::Required => "required",
        })
    }
}

/// The dashboard's login settings.
#[derive(Debug, Clone)]
pub struct HttpAuthConfig {
    /// `--http-auth auto|required`.
    pub mode: HttpAuthMode,
    /// `--http-session-timeout-ms`: a login session unused this long ends.
    pub session_timeout_ms: u64,
    /// `--http-metrics-auth required`: `/metrics` takes Basic auth too (default: open).
    pub metrics_auth_required: bool,
}

impl Default for HttpAuthConfig {
    fn default() -> Self {
        HttpAuthConfig {
            mode: HttpAuthMode::Auto,
            session_timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            metrics_auth_required: false,
        }
    }
}

/// The login for this broker's dashboard, or `None` when it has none.
pub fn dashboard_auth(state: &BrokerState) -> Option<HttpAuth> {
    let config = &state.config.http_auth;
    let required = config.mode == HttpAuthMode::Required || state.config.security.serves_sasl();
    if !required {
        return None;
    }
    let store = Arc::clone(&state.security.credentials);
    if store.describe().is_empty() {
        tracing::warn!(
            "the dashboard asks for a login but the broker has no users yet: create one with \
             `streamforge users create NAME --password ...`"
        );
    }
    Some(HttpAuth {
        session_timeout_ms: config.session_timeout_ms,
        metrics_auth_required: config.metrics_auth_required,
        ..HttpAuth::new(Arc::new(move |user: &str, password: &str| {
            store.verify_password(user, password)
        }))
    })
}

/// Start-up lines about who can reach the dashboard.
pub fn log_exposure(addr: SocketAddr, auth: Option<&HttpAuth>) {
    match auth {
        None if !addr.ip().is_loopback() => tracing::warn!(
            addr = %addr,
            "the dashboard is reachable from the network and has no authentication: anyone who \
             can connect can create and delete topics and read every message (use --http-auth \
             required, --http-listen 127.0.0.1:PORT, or off)"
        ),
        None => {}
        Some(auth) => {
            tracing::info!(
                addr = %addr,
                session_timeout_ms = auth.session_timeout_ms,
                metrics_auth_required = auth.metrics_auth_required,
                "the dashboard asks for a login (the broker's SASL users)"
            );
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    addr = %addr,
                    "the dashboard login is plain HTTP on a non-loopback address: passwords and \
                     session cookies cross the network unencrypted (put a TLS proxy in front)"
                );
            }
        }
    }
}

/// The dashboard's authorization hook over the broker's ACL authorizer (`--authorizer acl`),
/// or `None` (every action allowed) without one. The dashboard does not pass the browser's
/// address, so ACLs naming a specific host do not apply to it; `*`-host ACLs do.
pub fn dashboard_authorizer(state: &BrokerState) -> Option<streamforge_http::auth::AuthorizeFn> {
    use crate::security::acl::{Operation, Resource};
    use streamforge_http::auth::{Operation as HttpOp, Resource as HttpResource};
    let authorizer = state.security.authorizer.clone()?;
    Some(Arc::new(move |principal, action| {
        let op = match action.operation {
            HttpOp::Read => Operation::Read,
            HttpOp::Write => Operation::Write,
            HttpOp::Create => Operation::Create,
            HttpOp::Delete => Operation::Delete,
            HttpOp::Alter => Operation::Alter,
            HttpOp::Describe => Operation::Describe,
            HttpOp::DescribeConfigs => Operation::DescribeConfigs,
            HttpOp::AlterConfigs => Operation::AlterConfigs,
        };
        let resource = match &action.resource {
            HttpResource::Cluster => Resource::cluster(),
            HttpResource::Topic(t) => Resource::topic(t),
            HttpResource::Group(g) => Resource::group(g),
            HttpResource::TransactionalId(t) => Resource::transactional_id(t),
        };
        let who = crate::security::principal::Principal::user(principal.name.clone());
        authorizer.authorize(&who, "*", op, &resource)
    }))
}

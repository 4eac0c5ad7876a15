//! ACLs (KIP-11, KIP-290 prefixed patterns): Kafka's `StandardAuthorizer` / `AclAuthorizer`
//! rules, sans-io. `Authorizer::authorize(principal, host, operation, resource)` answers one
//! question; the handlers and the dashboard ask it. The ACLs themselves sit in an `AclStore`
//! (a JSON file in the data dir today). See docs/SECURITY.md.
//!
//! The rules, in Kafka's order:
//! 1. A super user (`super.users`) may do everything.
//! 2. The ACLs that apply to a resource are those on its exact name (LITERAL), on `*`
//!    (LITERAL), and on every prefix of its name (PREFIXED), whoever they name.
//! 3. None apply: `allow.everyone.if.no.acl.found` decides (default: deny).
//! 4. A DENY entry for the principal (or `User:*`), the host (or `*`) and the operation (or ALL)
//!    denies: DENY wins.
//! 5. Else an ALLOW entry for the principal, host and the operation or one that implies it
//!    (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS, ALL
//!    implies all) allows; nothing else does.

pub mod access;
mod authorizer;
pub mod store;
#[cfg(test)]
mod tests;
pub mod types;

pub use access::Access;
pub use authorizer::{ACLS_MAX, AclError, Authorizer, AuthorizerConfig};
pub use types::{
    AccessControlEntry, AclBinding, AclFilter, Operation, PatternType, Permission, Resource,
    ResourcePattern, ResourceType,
};

/// `authorizer.class.name`: which authorizer the broker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizerKind {
    /// No authorizer: every request is allowed, the ACL APIs answer SECURITY_DISABLED.
    #[default]
    None,
    /// ACLs (`acl`; Kafka's `org.apache.kafka.metadata.authorizer.StandardAuthorizer` and
    /// `kafka.security.authorizer.AclAuthorizer` are accepted as names for it).
    Acl,
}

impl std::str::FromStr for AuthorizerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "none" => Ok(AuthorizerKind::None),
            "acl"
            | "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            | "kafka.security.authorizer.AclAuthorizer" => Ok(AuthorizerKind::Acl),
            other => Err(format!("authorizer '{other}': want acl or none")),
        }
    }
}

/// `super.users`: `User:a;User:b` as Kafka writes it (commas accepted too).
pub fn parse_super_users(s: &str) -> Result<Vec<String>, String> {
    s.split([';', ','])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            if types::valid_principal(p) {
                Ok(p.to_string())
            } else {
                Err(format!("super user '{p}': want Type:name, e.g. User:admin"))
            }
        })
        .collect()
}

/// The authorizer `config` asks for, over `<data_dir>/acls.json`.
pub fn open(
    config: &super::SecurityConfig,
    data_dir: &std::path::Path,
) -> Result<Option<std::sync::Arc<Authorizer>>, store::AclStoreError> {
    match config.authorizer {
        AuthorizerKind::None => Ok(None),
        AuthorizerKind::Acl => {
            let store = Box::new(store::JsonFileStore::new(data_dir));
            let authorizer = Authorizer::open(config.acl.clone(), store)?;
            tracing::info!(
                acls = authorizer.all().len(),
                super_users = ?config.acl.super_users,
                allow_everyone_if_no_acl_found = config.acl.allow_everyone_if_no_acl_found,
                "ACL authorizer on"
            );
            Ok(Some(std::sync::Arc::new(authorizer)))
        }
    }
}

//! The authorizer: ACLs indexed by resource pattern (as Kafka's cache), checked per request,
//! changed only through `create` / `delete`, which write the store before the change is
//! visible.

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::{Mutex, RwLock};

use super::store::{AclStore, AclStoreError};
use super::types::*;
use crate::security::principal::Principal;

/// Most ACLs the broker holds (a bound on the store and on DescribeAcls responses).
pub const ACLS_MAX: usize = 100_000;

/// `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default)]
pub struct AuthorizerConfig {
    /// `User:name` principals.
    pub super_users: Vec<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

/// Why one ACL creation or deletion failed, with Kafka's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// INVALID_REQUEST (42), as Kafka answers a binding it cannot store or a filter with
    /// unknown fields.
    #[error("{0}")]
    Invalid(String),
    /// UNKNOWN_SERVER_ERROR (-1): the store could not be written; nothing changed.
    #[error("cannot store ACLs: {0}")]
    Storage(String),
}

impl AclError {
    pub fn response_error(&self) -> streamforge_protocol::ResponseError {
        use streamforge_protocol::ResponseError;
        match self {
            AclError::Invalid(_) => ResponseError::InvalidRequest,
            AclError::Storage(_) => ResponseError::UnknownServerError,
        }
    }
}

type Index = BTreeMap<ResourcePattern, BTreeSet<AccessControlEntry>>;

pub struct Authorizer {
    super_users: BTreeSet<String>,
    allow_everyone_if_no_acl_found: bool,
    acls: RwLock<Index>,
    /// Held across a change and its write, so changes reach the store in order.
    writer: Mutex<Box<dyn AclStore>>,
}

impl Authorizer {
    /// Load the stored ACLs.
    pub fn open(
        config: AuthorizerConfig,
        store: Box<dyn AclStore>,
    ) -> Result<Authorizer, AclStoreError> {
        let mut index = Index::new();
        for b in store.load()? {
            index.entry(b.pattern).or_default().insert(b.entry);
        }
        Ok(Authorizer {
            super_users: config.super_users.into_iter().collect(),
            allow_everyone_if_no_acl_found: config.allow_everyone_if_no_acl_found,
            acls: RwLock::new(index),
            writer: Mutex::new(store),
        })
    }

    pub fn is_super_user(&self, principal: &Principal) -> bool {
        !self.super_users.is_empty() && self.super_users.contains(&principal.to_string())
    }

    /// May `principal`, connected from `host`, do `op` on `resource`? (The rules are in the
    /// module documentation.)
    pub fn authorize(
        &self,
        principal: &Principal,
        host: &str,
        op: Operation,
        resource: &Resource<'_>,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let index = self.acls.read();
        let (mut found, mut denied, mut allowed) = (false, false, false);
        for_each_matching(&index, resource, |e| {
            found = true;
            if !principal_matches(&e.principal, principal) || !host_matches(&e.host, host) {
                return;
            }
            match e.permission {
                Permission::Deny => {
                    denied |= e.operation == op || e.operation == Operation::All;
                }
                Permission::Allow => allowed |= op.granted_by().contains(&e.operation),
                Permission::Any => {}
            }
        });
        if !found {
            return self.allow_everyone_if_no_acl_found;
        }
        !denied && allowed
    }

    /// The authorized-operations bit field of Metadata, DescribeCluster and DescribeGroups:
    /// bit `op.code()` set for every operation of the resource type that `authorize` allows.
    pub fn authorized_operations(
        &self,
        principal: &Principal,
        host: &str,
        resource: &Resource<'_>,
    ) -> i32 {
        authorized_operations_with(resource.resource_type, |op| {
            self.authorize(principal, host, op, resource)
        })
    }

    /// Kafka's `authorizeByResourceType`: may `principal` do `op` on at least one resource of
    /// the type (InitProducerId without a transactional id asks this of topics: WRITE
    /// anywhere). A DENY on `*` denies; else an ALLOW that no DENY on the same name or on a
    /// prefix of it cancels allows.
    pub fn authorize_by_resource_type(
        &self,
        principal: &Principal,
        host: &str,
        op: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let principal = principal.to_string();
        let index = self.acls.read();
        let mut names = BTreeMap::<(Permission, PatternType), BTreeSet<&str>>::new();
        for (p, entries) in index.range(type_range(resource_type)) {
            for e in entries {
                let applies = (e.principal == principal || e.principal == WILDCARD_PRINCIPAL)
                    && host_matches(&e.host, host)
                    && (e.operation == op || e.operation == Operation::All);
                if applies {
                    names
                        .entry((e.permission, p.pattern_type))
                        .or_default()
                        .insert(p.name.as_str());
                }
            }
        }
        let empty = BTreeSet::new();
        let get = |perm, pt| names.get(&(perm, pt)).unwrap_or(&empty);
        let deny_literal = get(Permission::Deny, PatternType::Literal);
        let deny_prefixed = get(Permission::Deny, PatternType::Prefixed);
        if deny_literal.contains(WILDCARD_RESOURCE) {
            return false;
        }
        if self.allow_everyone_if_no_acl_found {
            return true;
        }
        let dominated = |name: &str| {
            (0..=name.len())
                .filter(|i| name.is_char_boundary(*i))
                .any(|i| deny_prefixed.contains(&name[..i]))
        };
        get(Permission::Allow, PatternType::Prefixed)
            .iter()
            .any(|p| !dominated(p))
            || get(Permission::Allow, PatternType::Literal)
                .iter()
                .any(|l| *l == WILDCARD_RESOURCE || (!deny_literal.contains(l) && !dominated(l)))
    }

    /// CreateAcls: each binding is checked (Kafka's rules), the valid ones stored together.
    pub fn create(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), AclError>> {
        let mut results: Vec<Result<(), AclError>> =
            bindings.iter().map(validate_binding).collect();
        let store = self.writer.lock();
        let mut next = self.acls.read().clone();
        for (b, r) in bindings.into_iter().zip(&results) {
            if r.is_ok() {
                next.entry(b.pattern).or_default().insert(b.entry);
            }
        }
        let outcome = if count(&next) > ACLS_MAX {
            Err(AclError::Invalid(format!(
                "the broker holds at most {ACLS_MAX} ACLs"
            )))
        } else {
            self.persist(&**store, next)
        };
        if let Err(e) = outcome {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e.clone());
            }
        }
        results
    }

    /// DeleteAcls: per filter, the bindings it removed (a binding two filters match is
    /// reported under the first, as Kafka does), or why the filter was refused.
    pub fn delete(&self, filters: &[AclFilter]) -> Vec<Result<Vec<AclBinding>, AclError>> {
        let store = self.writer.lock();
        let current = self.acls.read().clone();
        let mut results: Vec<Result<Vec<AclBinding>, AclError>> =
            filters.iter().map(|_| Ok(Vec::new())).collect();
        let mut next = Index::new();
        for (pattern, entries) in current {
            for entry in entries {
                let binding = AclBinding {
                    pattern: pattern.clone(),
                    entry,
                };
                let hit = filters
                    .iter()
                    .zip(results.iter_mut())
                    .find(|(f, r)| r.is_ok() && f.matches(&binding));
                match hit {
                    Some((_, Ok(deleted))) => deleted.push(binding),
                    _ => {
                        next.entry(binding.pattern)
                            .or_default()
                            .insert(binding.entry);
                    }
                }
            }
        }
        let removed_any = results
            .iter()
            .any(|r| r.as_ref().is_ok_and(|d| !d.is_empty()));
        if removed_any && let Err(e) = self.persist(&**store, next) {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e.clone());
            }
        }
        results
    }

    /// DescribeAcls: the bindings `filter` matches, in resource order.
    pub fn describe(&self, filter: &AclFilter) -> Vec<AclBinding> {
        let index = self.acls.read();
        index
            .iter()
            .filter(|(p, _)| filter.matches_pattern(p))
            .flat_map(|(p, entries)| {
                entries
                    .iter()
                    .filter(|e| filter.matches_entry(e))
                    .map(|e| AclBinding {
                        pattern: p.clone(),
                        entry: e.clone(),
                    })
            })
            .collect()
    }

    /// Every ACL (the dashboard and tests).
    pub fn all(&self) -> Vec<AclBinding> {
        self.describe(&AclFilter::any())
    }

    fn persist(&self, store: &dyn AclStore, next: Index) -> Result<(), AclError> {
        let flat: Vec<AclBinding> = next
            .iter()
            .flat_map(|(p, es)| {
                es.iter().map(|e| AclBinding {
                    pattern: p.clone(),
                    entry: e.clone(),
                })
            })
            .collect();
        store
            .save(&flat)
            .map_err(|e| AclError::Storage(e.to_string()))?;
        *self.acls.write() = next;
        Ok(())
    }
}

/// The bit field for `resource_type`'s supported operations that `allowed` grants.
pub fn authorized_operations_with(
    resource_type: ResourceType,
    mut allowed: impl FnMut(Operation) -> bool,
) -> i32 {
    resource_type
        .supported_operations()
        .iter()
        .filter(|op| allowed(**op))
        .fold(0, |bits, op| bits | (1 << op.code()))
}

fn count(index: &Index) -> usize {
    index.values().map(BTreeSet::len).sum()
}

/// Every index key of `resource_type`.
fn type_range(
    resource_type: ResourceType,
) -> (
    std::ops::Bound<ResourcePattern>,
    std::ops::Bound<ResourcePattern>,
) {
    let key = |pattern_type| ResourcePattern {
        resource_type,
        name: String::new(),
        pattern_type,
    };
    // `ResourcePattern` orders by type, then name, then pattern type: every key of this type
    // is at least (type, "", ANY) and below the next type.
    let start = std::ops::Bound::Included(key(PatternType::Any));
    let end = match ResourceType::from_code(resource_type.code() + 1) {
        Some(next) => std::ops::Bound::Excluded(ResourcePattern {
            resource_type: next,
            name: String::new(),
            pattern_type: PatternType::Any,
        }),
        None => std::ops::Bound::Unbounded,
    };
    (start, end)
}

/// An ACL host (`*` or an address) matching the client's address. Addresses compare as
/// addresses, so Kafka's spelling of IPv6 (`0:0:0:0:0:0:0:1`, Java's `getHostAddress`) matches
/// a client on `::1`, and an IPv4-mapped client matches its IPv4 address.
fn host_matches(acl_host: &str, host: &str) -> bool {
    if acl_host == WILDCARD_HOST || acl_host == host {
        return true;
    }
    match (
        acl_host.parse::<std::net::IpAddr>(),
        host.parse::<std::net::IpAddr>(),
    ) {
        (Ok(a), Ok(h)) => a.to_canonical() == h.to_canonical(),
        _ => false,
    }
}

/// An ACL principal (`User:name` or `User:*`) naming `principal`.
fn principal_matches(acl_principal: &str, principal: &Principal) -> bool {
    acl_principal == WILDCARD_PRINCIPAL
        || acl_principal.strip_prefix("User:") == Some(principal.name.as_str())
}

/// Calls `f` with the entries of every pattern that applies to `resource`: its LITERAL name,
/// the LITERAL wildcard, and PREFIXED patterns on each prefix of the name. One key buffer for
/// every lookup (this runs per topic of every Produce and Fetch).
fn for_each_matching<'a>(
    index: &'a Index,
    resource: &Resource<'_>,
    mut f: impl FnMut(&'a AccessControlEntry),
) {
    let name = resource.name;
    let mut key = ResourcePattern {
        resource_type: resource.resource_type,
        name: String::with_capacity(name.len().max(WILDCARD_RESOURCE.len())),
        pattern_type: PatternType::Literal,
    };
    let mut visit = |key: &ResourcePattern| {
        if let Some(entries) = index.get(key) {
            entries.iter().for_each(&mut f);
        }
    };
    key.name.push_str(WILDCARD_RESOURCE);
    visit(&key);
    if name != WILDCARD_RESOURCE {
        key.name.clear();
        key.name.push_str(name);
        visit(&key);
    }
    key.pattern_type = PatternType::Prefixed;
    for i in (1..=name.len()).filter(|i| name.is_char_boundary(*i)) {
        key.name.clear();
        key.name.push_str(&name[..i]);
        visit(&key);
    }
}

/// Kafka's checks of a new ACL (`AclControlManager.validateNewAcl` and the CreateAcls
/// handler): a stored pattern is LITERAL or PREFIXED of a concrete type with a name (CLUSTER's
/// is `kafka-cluster`); the entry names a concrete operation and permission and a principal.
fn validate_binding(b: &AclBinding) -> Result<(), AclError> {
    let p = &b.pattern;
    let e = &b.entry;
    let invalid = |m: String| Err(AclError::Invalid(m));
    if !matches!(p.pattern_type, PatternType::Literal | PatternType::Prefixed) {
        return invalid(format!("Invalid patternType {}", p.pattern_type));
    }
    if p.resource_type == ResourceType::Any {
        return invalid("Invalid resourceType ANY".into());
    }
    if e.operation == Operation::Any {
        return invalid("Invalid operation ANY".into());
    }
    if e.permission == Permission::Any {
        return invalid("Invalid permissionType ANY".into());
    }
    if p.name.is_empty() {
        return invalid("Resource name should not be empty".into());
    }
    if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
        return invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        ));
    }
    if !valid_principal(&e.principal) {
        return invalid(format!("Could not parse principal from `{}`", e.principal));
    }
    if e.host.is_empty() {
        return invalid("Host should not be empty".into());
    }
    Ok(())
}

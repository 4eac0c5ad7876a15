//! ACL check cost: `Authorizer::authorize` for a topic with N ACLs held (half literal, half
//! prefixed, over other names), the per-topic check every Produce and Fetch makes. The lookup
//! is by pattern key (the literal name, `*`, each prefix of the name), so the cost should grow
//! with the name's length and the log of N, not with N.
//!
//! `cargo bench -p streamforge-broker --bench acl_authorize -- [acls] [checks]`

use std::time::Instant;

use streamforge_broker::security::acl::store::MemoryStore;
use streamforge_broker::security::acl::{
    AccessControlEntry, AclBinding, Authorizer, AuthorizerConfig, Operation, PatternType,
    Permission, Resource, ResourcePattern, ResourceType,
};
use streamforge_broker::security::principal::Principal;

fn binding(name: String, pattern_type: PatternType, principal: &str) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::Topic,
            name,
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: principal.to_string(),
            host: "*".to_string(),
            operation: Operation::Write,
            permission: Permission::Allow,
        },
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let acls = args.first().copied().unwrap_or(10_000);
    let checks = args.get(1).copied().unwrap_or(1_000_000);
    let authorizer =
        Authorizer::open(AuthorizerConfig::default(), Box::<MemoryStore>::default()).unwrap();
    let mut bindings: Vec<AclBinding> = (0..acls / 2)
        .map(|i| binding(format!("topic-{i}"), PatternType::Literal, "User:other"))
        .collect();
    bindings.extend(
        (0..acls / 2).map(|i| binding(format!("app-{i}-"), PatternType::Prefixed, "User:other")),
    );
    bindings.push(binding(
        "orders-".into(),
        PatternType::Prefixed,
        "User:alice",
    ));
    for r in authorizer.create(bindings) {
        r.unwrap();
    }
    let alice = Principal::user("alice");
    let topic = Resource::topic("orders-eu-west-1");
    let started = Instant::now();
    let mut allowed = 0usize;
    for _ in 0..checks {
        allowed += usize::from(authorizer.authorize(&alice, "127.0.0.1", Operation::Write, &topic));
    }
    let elapsed = started.elapsed();
    assert_eq!(allowed, checks);
    println!(
        "acls={} checks={checks} total_ms={} ns_per_check={:.0}",
        acls + 1,
        elapsed.as_millis(),
        elapsed.as_nanos() as f64 / checks as f64
    );
}

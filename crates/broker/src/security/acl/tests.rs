//! One test per rule of the module documentation, plus the store and the filters.

use super::store::{JsonFileStore, MemoryStore};
use super::*;
use crate::security::principal::Principal;

const HOST: &str = "127.0.0.1";

fn authorizer(super_users: &[&str], allow_everyone: bool) -> Authorizer {
    let config = AuthorizerConfig {
        super_users: super_users.iter().map(|s| s.to_string()).collect(),
        allow_everyone_if_no_acl_found: allow_everyone,
    };
    Authorizer::open(config, Box::<MemoryStore>::default()).unwrap()
}

fn acl(
    rt: ResourceType,
    name: &str,
    pt: PatternType,
    principal: &str,
    host: &str,
    op: Operation,
    perm: Permission,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: rt,
            name: name.into(),
            pattern_type: pt,
        },
        entry: AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission: perm,
        },
    }
}

fn allow_topic(name: &str, pt: PatternType, principal: &str, op: Operation) -> AclBinding {
    acl(
        ResourceType::Topic,
        name,
        pt,
        principal,
        "*",
        op,
        Permission::Allow,
    )
}

fn add(a: &Authorizer, bindings: Vec<AclBinding>) {
    for r in a.create(bindings) {
        r.unwrap();
    }
}

fn alice() -> Principal {
    Principal::user("alice")
}

fn can(a: &Authorizer, p: &Principal, op: Operation, topic: &str) -> bool {
    a.authorize(p, HOST, op, &Resource::topic(topic))
}

#[test]
fn no_acl_denies_unless_allow_everyone_if_no_acl_found() {
    assert!(!can(
        &authorizer(&[], false),
        &alice(),
        Operation::Read,
        "t"
    ));
    let open = authorizer(&[], true);
    assert!(can(&open, &alice(), Operation::Read, "t"));
    // Once any ACL applies to the resource, the flag no longer matters.
    add(
        &open,
        vec![allow_topic(
            "t",
            PatternType::Literal,
            "User:bob",
            Operation::Read,
        )],
    );
    assert!(!can(&open, &alice(), Operation::Read, "t"));
    assert!(can(&open, &alice(), Operation::Read, "other"));
}

#[test]
fn super_users_may_do_everything() {
    let a = authorizer(&["User:admin"], false);
    add(
        &a,
        vec![acl(
            ResourceType::Topic,
            "*",
            PatternType::Literal,
            "User:*",
            "*",
            Operation::All,
            Permission::Deny,
        )],
    );
    assert!(can(&a, &Principal::user("admin"), Operation::Delete, "t"));
    assert!(!can(&a, &alice(), Operation::Read, "t"));
    assert!(a.authorize_by_resource_type(
        &Principal::user("admin"),
        HOST,
        Operation::Write,
        ResourceType::Topic
    ));
}

#[test]
fn literal_wildcard_and_prefixed_patterns_apply() {
    let a = authorizer(&[], false);
    add(
        &a,
        vec![
            allow_topic(
                "orders",
                PatternType::Literal,
                "User:alice",
                Operation::Read,
            ),
            allow_topic(
                "logs-",
                PatternType::Prefixed,
                "User:alice",
                Operation::Write,
            ),
            allow_topic("*", PatternType::Literal, "User:alice", Operation::Describe),
        ],
    );
    let p = alice();
    assert!(can(&a, &p, Operation::Read, "orders"));
    assert!(!can(&a, &p, Operation::Read, "orders2"), "literal is exact");
    assert!(can(&a, &p, Operation::Write, "logs-app"));
    assert!(can(&a, &p, Operation::Write, "logs-"));
    assert!(
        !can(&a, &p, Operation::Write, "logs"),
        "shorter than the prefix"
    );
    assert!(can(&a, &p, Operation::Describe, "anything"));
    // A literal ACL named `*` is the wildcard, a prefixed `*` is not.
    assert!(!can(&a, &p, Operation::Write, "*x"));
}

#[test]
fn wildcard_principal_and_hosts_match() {
    let a = authorizer(&[], false);
    add(
        &a,
        vec![
            allow_topic("t", PatternType::Literal, "User:*", Operation::Read),
            acl(
                ResourceType::Topic,
                "h",
                PatternType::Literal,
                "User:alice",
                "10.0.0.1",
                Operation::Read,
                Permission::Allow,
            ),
        ],
    );
    assert!(can(&a, &Principal::user("anyone"), Operation::Read, "t"));
    assert!(!can(&a, &alice(), Operation::Read, "h"), "other host");
    assert!(a.authorize(&alice(), "10.0.0.1", Operation::Read, &Resource::topic("h")));
    assert!(a.authorize(
        &alice(),
        "::ffff:10.0.0.1",
        Operation::Read,
        &Resource::topic("h")
    ));
    add(
        &a,
        vec![acl(
            ResourceType::Topic,
            "v6",
            PatternType::Literal,
            "User:alice",
            "0:0:0:0:0:0:0:1",
            Operation::Read,
            Permission::Allow,
        )],
    );
    assert!(a.authorize(&alice(), "::1", Operation::Read, &Resource::topic("v6")));
}

#[test]
fn deny_wins_over_allow() {
    let a = authorizer(&[], false);
    add(
        &a,
        vec![
            allow_topic("t", PatternType::Literal, "User:alice", Operation::All),
            acl(
                ResourceType::Topic,
                "t",
                PatternType::Prefixed,
                "User:*",
                HOST,
                Operation::Write,
                Permission::Deny,
            ),
        ],
    );
    assert!(!can(&a, &alice(), Operation::Write, "t"));
    assert!(can(&a, &alice(), Operation::Read, "t"));
    // DENY READ does not deny DESCRIBE: implication is for ALLOW only.
    add(
        &a,
        vec![acl(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            "*",
            Operation::Read,
            Permission::Deny,
        )],
    );
    assert!(!can(&a, &alice(), Operation::Read, "t"));
    assert!(can(&a, &alice(), Operation::Describe, "t"));
}

#[test]
fn operations_imply_describe_and_describe_configs() {
    for op in [
        Operation::Read,
        Operation::Write,
        Operation::Delete,
        Operation::Alter,
    ] {
        let a = authorizer(&[], false);
        add(
            &a,
            vec![allow_topic("t", PatternType::Literal, "User:alice", op)],
        );
        assert!(
            can(&a, &alice(), Operation::Describe, "t"),
            "{op} implies DESCRIBE"
        );
        assert!(!can(&a, &alice(), Operation::DescribeConfigs, "t"));
    }
    let a = authorizer(&[], false);
    add(
        &a,
        vec![allow_topic(
            "t",
            PatternType::Literal,
            "User:alice",
            Operation::AlterConfigs,
        )],
    );
    assert!(can(&a, &alice(), Operation::DescribeConfigs, "t"));
    assert!(!can(&a, &alice(), Operation::Describe, "t"));
    let a = authorizer(&[], false);
    add(
        &a,
        vec![allow_topic(
            "t",
            PatternType::Literal,
            "User:alice",
            Operation::All,
        )],
    );
    for op in ResourceType::Topic.supported_operations() {
        assert!(can(&a, &alice(), *op, "t"), "ALL implies {op}");
    }
    let a = authorizer(&[], false);
    add(
        &a,
        vec![allow_topic(
            "t",
            PatternType::Literal,
            "User:alice",
            Operation::Describe,
        )],
    );
    assert!(
        !can(&a, &alice(), Operation::Read, "t"),
        "DESCRIBE implies nothing"
    );
}

#[test]
fn authorized_operations_is_the_bit_field_of_allowed_operations() {
    let a = authorizer(&[], false);
    add(
        &a,
        vec![allow_topic(
            "t",
            PatternType::Literal,
            "User:alice",
            Operation::Read,
        )],
    );
    let bits = a.authorized_operations(&alice(), HOST, &Resource::topic("t"));
    assert_eq!(
        bits,
        (1 << 3) | (1 << 8),
        "READ and the DESCRIBE it implies"
    );
}

#[test]
fn by_resource_type_needs_one_allowed_resource_not_cancelled_by_a_deny() {
    let a = authorizer(&[], false);
    let any_topic = |a: &Authorizer| {
        a.authorize_by_resource_type(&alice(), HOST, Operation::Write, ResourceType::Topic)
    };
    assert!(!any_topic(&a));
    add(
        &a,
        vec![allow_topic(
            "app-",
            PatternType::Prefixed,
            "User:alice",
            Operation::Write,
        )],
    );
    assert!(any_topic(&a));
    add(
        &a,
        vec![acl(
            ResourceType::Topic,
            "ap",
            PatternType::Prefixed,
            "User:alice",
            "*",
            Operation::Write,
            Permission::Deny,
        )],
    );
    assert!(!any_topic(&a), "a shorter DENY prefix cancels the ALLOW");
    add(
        &a,
        vec![allow_topic(
            "x",
            PatternType::Literal,
            "User:*",
            Operation::All,
        )],
    );
    assert!(any_topic(&a));
    add(
        &a,
        vec![acl(
            ResourceType::Topic,
            "*",
            PatternType::Literal,
            "User:alice",
            "*",
            Operation::All,
            Permission::Deny,
        )],
    );
    assert!(!any_topic(&a), "DENY on * denies every topic");
}

#[test]
fn create_validates_like_kafka() {
    let a = authorizer(&[], false);
    let bad = [
        allow_topic("t", PatternType::Match, "User:a", Operation::Read),
        allow_topic("t", PatternType::Literal, "User:a", Operation::Any),
        allow_topic("", PatternType::Literal, "User:a", Operation::Read),
        allow_topic("t", PatternType::Literal, "alice", Operation::Read),
        acl(
            ResourceType::Cluster,
            "other",
            PatternType::Literal,
            "User:a",
            "*",
            Operation::Alter,
            Permission::Allow,
        ),
        acl(
            ResourceType::Any,
            "t",
            PatternType::Literal,
            "User:a",
            "*",
            Operation::Read,
            Permission::Allow,
        ),
    ];
    let good = allow_topic("t", PatternType::Literal, "User:a", Operation::Read);
    let mut all = bad.to_vec();
    all.push(good.clone());
    let results = a.create(all);
    for r in &results[..bad.len()] {
        assert!(matches!(r, Err(AclError::Invalid(_))), "{r:?}");
    }
    assert_eq!(results[bad.len()], Ok(()));
    assert_eq!(a.all(), vec![good.clone()]);
    // Creating the same ACL again is not an error and keeps one copy.
    assert_eq!(a.create(vec![good.clone()]), vec![Ok(())]);
    assert_eq!(a.all().len(), 1);
}

#[test]
fn filters_match_like_kafka() {
    let a = authorizer(&[], false);
    add(
        &a,
        vec![
            allow_topic("foo", PatternType::Literal, "User:a", Operation::Read),
            allow_topic("*", PatternType::Literal, "User:a", Operation::Read),
            allow_topic("fo", PatternType::Prefixed, "User:b", Operation::Write),
            allow_topic("bar", PatternType::Prefixed, "User:b", Operation::Write),
        ],
    );
    let names = |f: &AclFilter| -> Vec<String> {
        a.describe(f).into_iter().map(|b| b.pattern.name).collect()
    };
    let mut f = AclFilter::any();
    f.name = Some("foo".into());
    f.pattern_type = PatternType::Match;
    assert_eq!(names(&f), vec!["*", "fo", "foo"]);
    f.pattern_type = PatternType::Any;
    assert_eq!(names(&f), vec!["foo"]);
    f.pattern_type = PatternType::Prefixed;
    assert!(names(&f).is_empty());
    let mut f = AclFilter::any();
    f.principal = Some("User:b".into());
    assert_eq!(names(&f), vec!["bar", "fo"]);
    let mut f = AclFilter::any();
    f.operation = Operation::Write;
    f.pattern_type = PatternType::Prefixed;
    let deleted = a.delete(&[f.clone(), AclFilter::any()]);
    assert_eq!(deleted[0].as_ref().unwrap().len(), 2);
    assert_eq!(deleted[1].as_ref().unwrap().len(), 2, "the rest");
    assert!(a.all().is_empty());
}

#[test]
fn a_failed_write_changes_nothing() {
    let store = MemoryStore::default();
    store
        .fail_saves
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let a = Authorizer::open(AuthorizerConfig::default(), Box::new(store)).unwrap();
    let r = a.create(vec![allow_topic(
        "t",
        PatternType::Literal,
        "User:a",
        Operation::Read,
    )]);
    assert!(matches!(r[0], Err(AclError::Storage(_))));
    assert!(a.all().is_empty());
}

#[test]
fn acls_survive_reopen_of_the_json_file() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Authorizer::open(
            AuthorizerConfig::default(),
            Box::new(JsonFileStore::new(dir.path())),
        )
        .unwrap()
    };
    let a = open();
    let b = allow_topic(
        "logs-",
        PatternType::Prefixed,
        "User:alice",
        Operation::Write,
    );
    add(&a, vec![b.clone()]);
    drop(a);
    let again = open();
    assert_eq!(again.all(), vec![b]);
    assert!(can(&again, &alice(), Operation::Write, "logs-x"));
    std::fs::write(dir.path().join(store::ACLS_FILE), b"[{").unwrap();
    assert!(
        Authorizer::open(
            AuthorizerConfig::default(),
            Box::new(JsonFileStore::new(dir.path()))
        )
        .is_err()
    );
}

#[test]
fn names_and_super_users_parse_as_kafka_writes_them() {
    assert_eq!("DescribeConfigs".parse(), Ok(Operation::DescribeConfigs));
    assert_eq!("describe_configs".parse(), Ok(Operation::DescribeConfigs));
    assert_eq!(
        "transactional-id".parse(),
        Ok(ResourceType::TransactionalId)
    );
    assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
    assert!("Bogus".parse::<Operation>().is_err());
    assert_eq!(
        parse_super_users("User:admin;User:ANONYMOUS, User:x").unwrap(),
        vec!["User:admin", "User:ANONYMOUS", "User:x"]
    );
    assert!(parse_super_users("admin").is_err());
    assert_eq!(
        "kafka.security.authorizer.AclAuthorizer".parse(),
        Ok(AuthorizerKind::Acl)
    );
    for op in Operation::ALL_VALUES {
        assert_eq!(Operation::from_code(op.code()), Some(*op));
    }
    assert_eq!(Operation::from_code(0), None);
}

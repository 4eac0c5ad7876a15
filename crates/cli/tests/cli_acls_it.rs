//! `streamforge acls` end to end against the real broker binary with `--authorizer acl`:
//! add, list (table and JSON, by resource and pattern type), remove, ACLs kept across a
//! restart, and the broker's refusals (CLUSTER_AUTHORIZATION_FAILED for a principal that is not
//! allowed, SECURITY_DISABLED without an authorizer).
mod client_support;

use std::process::Command;

use client_support::{BrokerProcess, binary};
use serde_json::Value;

fn sf(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(binary())
        .args(args)
        .output()
        .expect("run streamforge");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn acls(bs: &str, args: &[&str]) -> String {
    let mut all = vec!["acls", "-b", bs];
    all.extend_from_slice(args);
    let (success, out, err) = sf(&all);
    assert!(success, "streamforge {all:?} failed:\n{out}\n{err}");
    out
}

fn listed(bs: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--list", "--json"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_str(&acls(bs, &all)).expect("JSON");
    v.as_array().expect("array").clone()
}

#[test]
fn acls_are_added_listed_removed_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--authorizer", "acl", "--super-users", "User:ANONYMOUS"];
    let mut b = BrokerProcess::start(&dir.path().join("data"), &args);
    let bs = b.bootstrap();
    let bs = bs.as_str();
    let out = acls(
        bs,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Write",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    assert!(out.contains("added 2 ACL(s)"), "{out}");
    acls(
        bs,
        &[
            "--add",
            "--deny-principal",
            "User:mallory",
            "--deny-host",
            "10.0.0.9",
            "--group",
            "billing",
            "--cluster",
        ],
    );
    assert_eq!(listed(bs, &[]).len(), 4);
    // MATCH: every ACL that applies to the topic `orders-eu`.
    let matching = listed(
        bs,
        &["--topic", "orders-eu", "--resource-pattern-type", "match"],
    );
    assert_eq!(matching.len(), 2);
    assert!(
        matching
            .iter()
            .all(|r| r["pattern_type"] == "PREFIXED" && r["principal"] == "User:alice")
    );
    let deny = listed(bs, &["--principal", "User:mallory"]);
    assert_eq!(deny.len(), 2);
    assert!(
        deny.iter()
            .all(|r| r["permission"] == "DENY" && r["host"] == "10.0.0.9")
    );
    let table = acls(bs, &["--list"]);
    assert!(
        table.contains("RESOURCE_TYPE") && table.contains("CLUSTER"),
        "{table}"
    );

    b.restart();
    assert_eq!(
        listed(&b.bootstrap(), &[]).len(),
        4,
        "ACLs survive a restart"
    );
    let bs = b.bootstrap();
    let bs = bs.as_str();
    let out = acls(
        bs,
        &[
            "--remove",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    assert!(out.contains("removed 2 ACL(s)"), "{out}");
    assert_eq!(listed(bs, &[]).len(), 2);
    let (ok, _, err) = sf(&["acls", "-b", bs, "--add", "--topic", "x"]);
    assert!(!ok && err.contains("--allow-principal"), "{err}");
}

#[test]
fn the_broker_refuses_principals_without_rights_and_answers_security_disabled_without_an_authorizer()
 {
    let dir = tempfile::tempdir().unwrap();
    // No super user: PLAINTEXT's User:ANONYMOUS may not change ACLs.
    let b = BrokerProcess::start(&dir.path().join("acl"), &["--authorizer", "acl"]);
    let (ok, _, err) = sf(&["acls", "-b", &b.bootstrap(), "--list"]);
    assert!(!ok && err.contains("error 31"), "{err}");
    let (ok, _, err) = sf(&[
        "acls",
        "-b",
        &b.bootstrap(),
        "--add",
        "--allow-principal",
        "User:a",
        "--topic",
        "t",
    ]);
    assert!(!ok && err.contains("error 31"), "{err}");
    let plain = BrokerProcess::start(&dir.path().join("plain"), &[]);
    let (ok, _, err) = sf(&["acls", "-b", &plain.bootstrap(), "--list"]);
    assert!(
        !ok && err.contains("error 54") && err.contains("No Authorizer"),
        "{err}"
    );
}

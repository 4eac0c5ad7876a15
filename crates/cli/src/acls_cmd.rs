//! `streamforge acls --add|--remove|--list`: ACLs through CreateAcls, DeleteAcls and
//! DescribeAcls, with kafka-acls.sh's arguments (`--allow-principal User:alice --operation
//! Read --topic orders --resource-pattern-type prefixed`).

use anyhow::Context;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;
use streamforge_broker::security::acl::types::CLUSTER_NAME;
use streamforge_broker::security::acl::{Operation, PatternType, Permission, ResourceType};
use streamforge_client::Admin;

use crate::client_common::{ConnArgs, block_on, print_json, print_table};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["add", "remove", "list"])))]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    /// Add the ACLs the principals, hosts, operations and resources describe.
    #[arg(long)]
    add: bool,
    /// Remove the matching ACLs (every ACL of the resources when no principal is given).
    #[arg(long)]
    remove: bool,
    /// List ACLs (of the given resources, or all; --principal narrows by principal).
    #[arg(long)]
    list: bool,
    /// Principal to allow, `User:name` or `User:*` (repeatable).
    #[arg(long)]
    allow_principal: Vec<String>,
    /// Principal to deny (repeatable); DENY wins over ALLOW.
    #[arg(long)]
    deny_principal: Vec<String>,
    /// Hosts the allow principals may connect from [default: *].
    #[arg(long)]
    allow_host: Vec<String>,
    /// Hosts the deny principals are denied from [default: *].
    #[arg(long)]
    deny_host: Vec<String>,
    /// With --list: only ACLs of this principal.
    #[arg(long)]
    principal: Option<String>,
    /// Operation: Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable) [default: All].
    #[arg(long)]
    operation: Vec<String>,
    /// Topic resource (repeatable; `*` = every topic).
    #[arg(long)]
    topic: Vec<String>,
    /// Consumer group resource (repeatable; `*` = every group).
    #[arg(long)]
    group: Vec<String>,
    /// The cluster resource.
    #[arg(long)]
    cluster: bool,
    /// Transactional id resource (repeatable; `*` = every id).
    #[arg(long)]
    transactional_id: Vec<String>,
    /// literal or prefixed; with --list/--remove also any or match [default: literal].
    #[arg(long, default_value = "literal")]
    resource_pattern_type: String,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The (type, name) resources named on the command line.
fn resources(args: &Args) -> Vec<(ResourceType, String)> {
    let mut out = Vec::new();
    out.extend(args.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
    out.extend(args.group.iter().map(|g| (ResourceType::Group, g.clone())));
    out.extend(
        args.transactional_id
            .iter()
            .map(|t| (ResourceType::TransactionalId, t.clone())),
    );
    if args.cluster {
        out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
    }
    out
}

fn operations(args: &Args) -> anyhow::Result<Vec<Operation>> {
    if args.operation.is_empty() {
        return Ok(vec![Operation::All]);
    }
    args.operation
        .iter()
        .map(|o| o.parse::<Operation>().map_err(anyhow::Error::msg))
        .collect()
}

/// (principal, host, permission) of every entry --add or --remove names.
fn entries(args: &Args) -> Vec<(String, String, Permission)> {
    let hosts = |h: &Vec<String>| {
        if h.is_empty() {
            vec!["*".to_string()]
        } else {
            h.clone()
        }
    };
    let mut out = Vec::new();
    for (principals, host_args, perm) in [
        (&args.allow_principal, &args.allow_host, Permission::Allow),
        (&args.deny_principal, &args.deny_host, Permission::Deny),
    ] {
        for p in principals {
            for h in hosts(host_args) {
                out.push((p.clone(), h, perm));
            }
        }
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(async move {
        let admin = Admin::new(args.conn.client_config());
        let bootstrap = args.conn.bootstrap.split(',').next().unwrap_or_default();
        let conn = admin
            .cluster()
            .connection_to(bootstrap.trim())
            .await
            .with_context(|| format!("connecting to {bootstrap}"))?;
        let pattern: PatternType = args
            .resource_pattern_type
            .parse()
            .map_err(anyhow::Error::msg)?;
        if args.add {
            add(&conn, &args, pattern).await
        } else if args.remove {
            remove(&conn, &args, pattern).await
        } else {
            list(&conn, &args, pattern).await
        }
    })
}

async fn add(
    conn: &streamforge_client::conn::Connection,
    args: &Args,
    pattern: PatternType,
) -> anyhow::Result<()> {
    let resources = resources(args);
    let entries = entries(args);
    anyhow::ensure!(
        !resources.is_empty(),
        "--add needs a resource (--topic, --group, --cluster or --transactional-id)"
    );
    anyhow::ensure!(
        !entries.is_empty(),
        "--add needs --allow-principal or --deny-principal"
    );
    let mut req = CreateAclsRequest::default();
    for (rt, name) in &resources {
        for op in operations(args)? {
            for (principal, host, perm) in &entries {
                let mut c = AclCreation::default();
                c.resource_type = rt.code();
                c.resource_name = s(name);
                c.resource_pattern_type = pattern.code();
                c.principal = s(principal);
                c.host = s(host);
                c.operation = op.code();
                c.permission_type = perm.code();
                req.creations.push(c);
            }
        }
    }
    let resp = conn.send(&req, 3).await?;
    for r in &resp.results {
        if r.error_code != 0 {
            let msg = r
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            anyhow::bail!("creating ACLs: error {}: {msg}", r.error_code);
        }
    }
    println!("added {} ACL(s)", resp.results.len());
    Ok(())
}

/// One DeleteAcls filter per resource × operation × entry (× nothing: the whole resource).
async fn remove(
    conn: &streamforge_client::conn::Connection,
    args: &Args,
    pattern: PatternType,
) -> anyhow::Result<()> {
    let resources = resources(args);
    anyhow::ensure!(
        !resources.is_empty(),
        "--remove needs a resource (--topic, --group, --cluster or --transactional-id)"
    );
    let entries = entries(args);
    let mut req = DeleteAclsRequest::default();
    for (rt, name) in &resources {
        let base = || {
            let mut f = DeleteAclsFilter::default();
            f.resource_type_filter = rt.code();
            f.resource_name_filter = Some(s(name));
            f.pattern_type_filter = pattern.code();
            f.principal_filter = None;
            f.host_filter = None;
            f.operation = Operation::Any.code();
            f.permission_type = Permission::Any.code();
            f
        };
        if entries.is_empty() {
            req.filters.push(base());
            continue;
        }
        for op in operations(args)? {
            for (principal, host, perm) in &entries {
                let mut f = base();
                f.principal_filter = Some(s(principal));
                f.host_filter = Some(s(host));
                f.operation = op.code();
                f.permission_type = perm.code();
                req.filters.push(f);
            }
        }
    }
    let resp = conn.send(&req, 3).await?;
    let mut removed = 0;
    for r in &resp.filter_results {
        if r.error_code != 0 {
            let msg = r
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            anyhow::bail!("removing ACLs: error {}: {msg}", r.error_code);
        }
        removed += r.matching_acls.len();
    }
    println!("removed {removed} ACL(s)");
    Ok(())
}

async fn list(
    conn: &streamforge_client::conn::Connection,
    args: &Args,
    pattern: PatternType,
) -> anyhow::Result<()> {
    let mut filters: Vec<(ResourceType, Option<String>, PatternType)> = resources(args)
        .into_iter()
        .map(|(rt, n)| (rt, Some(n), pattern))
        .collect();
    if filters.is_empty() {
        filters.push((ResourceType::Any, None, PatternType::Any));
    }
    let mut rows: Vec<[String; 7]> = Vec::new();
    for (rt, name, pt) in filters {
        let mut req = DescribeAclsRequest::default();
        req.resource_type_filter = rt.code();
        req.resource_name_filter = name.as_deref().map(s);
        req.pattern_type_filter = pt.code();
        req.principal_filter = args.principal.as_deref().map(s);
        req.host_filter = None;
        req.operation = Operation::Any.code();
        req.permission_type = Permission::Any.code();
        let resp = conn.send(&req, 3).await?;
        if resp.error_code != 0 {
            let msg = resp
                .error_message
                .map(|m| m.to_string())
                .unwrap_or_default();
            anyhow::bail!("listing ACLs: error {}: {msg}", resp.error_code);
        }
        for r in resp.resources {
            for a in r.acls {
                let name = |code, f: fn(i8) -> Option<&'static str>| {
                    f(code).unwrap_or("UNKNOWN").to_string()
                };
                rows.push([
                    name(r.resource_type, |c| {
                        ResourceType::from_code(c).map(|v| v.name())
                    }),
                    r.resource_name.to_string(),
                    name(r.pattern_type, |c| {
                        PatternType::from_code(c).map(|v| v.name())
                    }),
                    a.principal.to_string(),
                    a.host.to_string(),
                    name(a.operation, |c| Operation::from_code(c).map(|v| v.name())),
                    name(a.permission_type, |c| {
                        Permission::from_code(c).map(|v| v.name())
                    }),
                ]);
            }
        }
    }
    if args.conn.json {
        let keys = [
            "resource_type",
            "name",
            "pattern_type",
            "principal",
            "host",
            "operation",
            "permission",
        ];
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let map: serde_json::Map<String, serde_json::Value> = keys
                    .iter()
                    .zip(r)
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                serde_json::Value::Object(map)
            })
            .collect();
        print_json(&json!(out));
        return Ok(());
    }
    let header = [
        "RESOURCE_TYPE",
        "NAME",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ];
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    print_table(&header, &rows);
    Ok(())
}

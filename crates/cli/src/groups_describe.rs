//! `streamforge groups describe`, with `kafka-consumer-groups.sh --describe`'s three views and
//! their columns: offsets (default), `--members`, `--state`; one group or `--all-groups`.
use serde_json::{Value, json};
use streamforge_client::Admin;
use streamforge_client::admin::{GroupDescription, PartitionLag};

use crate::client_common::{print_json, print_table};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Offsets,
    Members,
    State,
}

pub struct Request {
    pub group: Option<String>,
    pub all_groups: bool,
    pub mode: Mode,
}

/// One group, everything any view prints.
struct Described {
    desc: GroupDescription,
    lag: Vec<PartitionLag>,
    coordinator: String,
}

pub async fn run(admin: &Admin, req: Request, json_out: bool) -> anyhow::Result<()> {
    let names: Vec<String> = if req.all_groups {
        admin
            .list_groups()
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect()
    } else {
        vec![req.group.clone().expect("clap requires a group")]
    };
    let mut groups = Vec::with_capacity(names.len());
    for name in &names {
        groups.push(describe(admin, name).await?);
    }
    if json_out {
        let values: Vec<Value> = groups.iter().map(to_json).collect();
        if req.all_groups {
            print_json(&json!(values));
        } else if let Some(one) = values.into_iter().next() {
            print_json(&one);
        }
        return Ok(());
    }
    match req.mode {
        Mode::Offsets => groups.iter().for_each(print_offsets),
        Mode::Members => groups.iter().for_each(print_members),
        Mode::State => print_states(&groups),
    }
    Ok(())
}

async fn describe(admin: &Admin, group: &str) -> anyhow::Result<Described> {
    let desc = admin.describe_group(group).await?;
    let lag = admin.group_lag(group).await?;
    let (node, _) = streamforge_client::group::find_coordinator(admin.cluster(), group).await?;
    let meta = admin.describe_cluster().await?;
    let coordinator = match meta.brokers.get(&node) {
        Some(b) => format!("{}:{} ({node})", b.host, b.port),
        None => format!("({node})"),
    };
    Ok(Described {
        desc,
        lag,
        coordinator,
    })
}

fn to_json(g: &Described) -> Value {
    let total: i64 = g.lag.iter().filter_map(|l| l.lag).sum();
    json!({"group": g.desc, "offsets": g.lag, "total_lag": total, "coordinator": g.coordinator})
}

fn no_members_note(g: &Described) {
    if g.desc.members.is_empty() {
        println!(
            "\nConsumer group '{}' has no active members.",
            g.desc.group_id
        );
    }
}

fn print_offsets(g: &Described) {
    no_members_note(g);
    let owner = |topic: &str, p: i32| {
        g.desc
            .members
            .iter()
            .find(|m| m.assignment.get(topic).is_some_and(|ps| ps.contains(&p)))
    };
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = g
        .lag
        .iter()
        .map(|l| {
            let m = owner(&l.topic, l.partition);
            vec![
                g.desc.group_id.clone(),
                l.topic.clone(),
                l.partition.to_string(),
                l.committed_offset.map_or_else(dash, |o| o.to_string()),
                l.log_end_offset.to_string(),
                l.lag.map_or_else(dash, |o| o.to_string()),
                m.map_or_else(dash, |m| m.member_id.clone()),
                m.map_or_else(dash, |m| m.client_host.clone()),
                m.map_or_else(dash, |m| m.client_id.clone()),
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        &rows,
    );
    let total: i64 = g.lag.iter().filter_map(|l| l.lag).sum();
    println!("Total lag: {total}");
}

fn print_members(g: &Described) {
    no_members_note(g);
    let rows: Vec<Vec<String>> = g
        .desc
        .members
        .iter()
        .map(|m| {
            let partitions: usize = m.assignment.values().map(Vec::len).sum();
            vec![
                g.desc.group_id.clone(),
                m.member_id.clone(),
                m.client_host.clone(),
                m.client_id.clone(),
                partitions.to_string(),
            ]
        })
        .collect();
    println!();
    print_table(
        &["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        &rows,
    );
}

fn print_states(groups: &[Described]) {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.desc.group_id.clone(),
                g.coordinator.clone(),
                if g.desc.protocol.is_empty() {
                    String::new()
                } else {
                    g.desc.protocol.clone()
                },
                g.desc.state.clone(),
                g.desc.members.len().to_string(),
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "GROUP",
            "COORDINATOR (ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "#MEMBERS",
        ],
        &rows,
    );
}

//! `streamforge groups list|describe|reset-offsets|delete`.
use clap::Subcommand;
use serde_json::json;
use streamforge_client::{Admin, ResetTarget};

use crate::client_common::{ConnArgs, block_on, print_json, print_table};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// List consumer groups.
    List,
    /// Show a group's state, members, and per-partition committed offset, end offset and lag.
    Describe { group: String },
    /// Move a group's committed offsets on a topic (the group must have no active members).
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long, group = "target")]
        to_earliest: bool,
        #[arg(long, group = "target")]
        to_latest: bool,
        #[arg(long, group = "target")]
        to_offset: Option<i64>,
        /// First offset whose timestamp (ms) is at or after this.
        #[arg(long, group = "target")]
        to_timestamp: Option<i64>,
        /// Move by N records (negative goes back).
        #[arg(long, group = "target", allow_hyphen_values = true)]
        shift_by: Option<i64>,
    },
    /// Delete groups (they must be empty).
    Delete { groups: Vec<String> },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let admin = Admin::new(args.conn.client_config());
    let json_out = args.conn.json;
    match args.action {
        Action::List => {
            let groups = admin.list_groups().await?;
            if json_out {
                print_json(&json!(groups));
            } else {
                let rows: Vec<Vec<String>> = groups
                    .iter()
                    .map(|g| vec![g.group_id.clone(), g.state.clone(), g.protocol_type.clone()])
                    .collect();
                print_table(&["GROUP", "STATE", "PROTOCOL TYPE"], &rows);
            }
        }
        Action::Describe { group } => {
            let desc = admin.describe_group(&group).await?;
            let lag = admin.group_lag(&group).await?;
            let owner = |topic: &str, p: i32| {
                desc.members
                    .iter()
                    .find(|m| m.assignment.get(topic).is_some_and(|ps| ps.contains(&p)))
                    .map(|m| m.member_id.clone())
            };
            if json_out {
                let total: i64 = lag.iter().filter_map(|l| l.lag).sum();
                print_json(&json!({"group": desc, "offsets": lag, "total_lag": total}));
                return Ok(());
            }
            println!(
                "Group: {}  State: {}  Protocol: {}  Members: {}",
                desc.group_id,
                desc.state,
                if desc.protocol.is_empty() {
                    "-"
                } else {
                    &desc.protocol
                },
                desc.members.len()
            );
            let rows: Vec<Vec<String>> = lag
                .iter()
                .map(|l| {
                    vec![
                        l.topic.clone(),
                        l.partition.to_string(),
                        l.committed_offset.map_or("-".into(), |o| o.to_string()),
                        l.log_end_offset.to_string(),
                        l.lag.map_or("-".into(), |o| o.to_string()),
                        owner(&l.topic, l.partition).unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            print_table(
                &[
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                ],
                &rows,
            );
            let total: i64 = lag.iter().filter_map(|l| l.lag).sum();
            println!("Total lag: {total}");
        }
        Action::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
            to_timestamp,
            shift_by,
        } => {
            let target = match (to_earliest, to_latest, to_offset, to_timestamp, shift_by) {
                (true, ..) => ResetTarget::Earliest,
                (_, true, ..) => ResetTarget::Latest,
                (_, _, Some(o), ..) => ResetTarget::Offset(o),
                (_, _, _, Some(t), _) => ResetTarget::Timestamp(t),
                (_, _, _, _, Some(d)) => ResetTarget::ShiftBy(d),
                _ => anyhow::bail!(
                    "choose --to-earliest, --to-latest, --to-offset, --to-timestamp or --shift-by"
                ),
            };
            let new = admin.reset_offsets(&group, &topic, target).await?;
            if json_out {
                print_json(&json!({"group": group, "topic": topic, "offsets": new}));
            } else {
                let rows: Vec<Vec<String>> = new
                    .iter()
                    .map(|(p, o)| vec![topic.clone(), p.to_string(), o.to_string()])
                    .collect();
                print_table(&["TOPIC", "PARTITION", "NEW-OFFSET"], &rows);
            }
        }
        Action::Delete { groups } => {
            anyhow::ensure!(!groups.is_empty(), "name at least one group");
            admin.delete_groups(&groups).await?;
            if json_out {
                print_json(&json!({"deleted": groups}));
            } else {
                println!("Deleted {}", groups.join(", "));
            }
        }
    }
    Ok(())
}

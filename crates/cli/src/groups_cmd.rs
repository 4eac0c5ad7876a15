//! `streamforge groups list|describe|reset-offsets|delete`.
use clap::Subcommand;
use serde_json::json;
use streamforge_client::Admin;

use crate::client_common::{ConnArgs, block_on, print_json, print_table};
use crate::{groups_describe, groups_reset};

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
    /// Show groups' committed offsets and lag (default), members (--members) or state (--state),
    /// with kafka-consumer-groups.sh's columns.
    Describe(DescribeArgs),
    /// Move a group's committed offsets (a dry run unless --execute; the group must be inactive).
    ResetOffsets(groups_reset::ResetArgs),
    /// Delete groups (they must be empty).
    Delete {
        /// The groups to delete.
        groups: Vec<String>,
    },
}

#[derive(clap::Args)]
struct DescribeArgs {
    /// The group to describe (or `--group G`).
    #[arg(required_unless_present_any = ["group_flag", "all_groups"])]
    group: Option<String>,
    /// The group to describe (Kafka's spelling).
    #[arg(long = "group", value_name = "GROUP", conflicts_with = "group")]
    group_flag: Option<String>,
    /// Describe every group.
    #[arg(long, conflicts_with_all = ["group", "group_flag"])]
    all_groups: bool,
    /// Per partition: committed offset, log-end offset, lag and owner (the default).
    #[arg(long, conflicts_with_all = ["members", "state"])]
    offsets: bool,
    /// Per member: consumer id, host, client id and partition count.
    #[arg(long, conflicts_with = "state")]
    members: bool,
    /// Per group: coordinator, assignment strategy, state and member count.
    #[arg(long)]
    state: bool,
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
        Action::Describe(d) => groups_describe::run(&admin, d.into(), json_out).await?,
        Action::ResetOffsets(r) => groups_reset::run(&admin, r, json_out).await?,
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

impl From<DescribeArgs> for groups_describe::Request {
    fn from(d: DescribeArgs) -> Self {
        groups_describe::Request {
            group: d.group.or(d.group_flag),
            all_groups: d.all_groups,
            mode: if d.members {
                groups_describe::Mode::Members
            } else if d.state {
                groups_describe::Mode::State
            } else {
                groups_describe::Mode::Offsets
            },
        }
    }
}

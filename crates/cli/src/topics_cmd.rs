//! `streamforge topics create|list|describe|delete|alter`.
use clap::Subcommand;
use serde_json::json;
use streamforge_client::{Admin, NewTopic};

use crate::client_common::{ConnArgs, block_on, join_ids, parse_kv, print_json, print_table};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (-1 = broker default).
        #[arg(long, short = 'p', default_value_t = -1, allow_hyphen_values = true)]
        partitions: i32,
        /// Replication factor (-1 = broker default).
        #[arg(long, short = 'r', default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i16,
        /// Topic config KEY=VALUE (repeatable), e.g. retention.ms=60000.
        #[arg(long = "config", short = 'c', value_parser = parse_kv)]
        configs: Vec<(String, String)>,
        /// Only check that the topic could be created.
        #[arg(long)]
        validate_only: bool,
    },
    /// List topic names.
    List {
        /// Include internal topics such as __consumer_offsets.
        #[arg(long)]
        internal: bool,
    },
    /// Show partitions (leader, replicas, ISR) and configs of topics (all when none named).
    Describe {
        names: Vec<String>,
        /// Also list every config (not only overrides).
        #[arg(long)]
        all_configs: bool,
    },
    /// Delete topics.
    Delete { names: Vec<String> },
    /// Change configs or grow the partition count.
    Alter {
        name: String,
        /// Set config KEY=VALUE (repeatable).
        #[arg(long = "set", value_parser = parse_kv)]
        set: Vec<(String, String)>,
        /// Remove a config override (repeatable).
        #[arg(long = "delete")]
        delete: Vec<String>,
        /// New total partition count.
        #[arg(long)]
        partitions: Option<i32>,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let admin = Admin::new(args.conn.client_config());
    let json_out = args.conn.json;
    match args.action {
        Action::Create {
            name,
            partitions,
            replication_factor,
            configs,
            validate_only,
        } => {
            admin
                .create_topics(
                    &[NewTopic {
                        name: name.clone(),
                        partitions,
                        replication_factor,
                        configs,
                    }],
                    validate_only,
                )
                .await?;
            if json_out {
                print_json(&json!({"created": name, "validate_only": validate_only}));
            } else if validate_only {
                println!("Topic {name} would be created");
            } else {
                println!("Created topic {name}");
            }
        }
        Action::List { internal } => {
            let topics = admin.describe_topics(&[]).await?;
            let names: Vec<String> = topics
                .into_iter()
                .filter(|t| internal || !t.is_internal)
                .map(|t| t.name)
                .collect();
            if json_out {
                print_json(&json!(names));
            } else {
                for n in names {
                    println!("{n}");
                }
            }
        }
        Action::Describe { names, all_configs } => {
            let topics = admin.describe_topics(&names).await?;
            let mut out = Vec::new();
            for t in &topics {
                let configs = admin
                    .describe_topic_configs(&t.name)
                    .await
                    .unwrap_or_default();
                let shown: Vec<_> = configs
                    .into_iter()
                    .filter(|c| all_configs || !c.is_default)
                    .collect();
                if json_out {
                    out.push(json!({
                        "name": t.name, "topic_id": t.topic_id_string(), "internal": t.is_internal,
                        "partitions": t.partitions, "configs": shown,
                    }));
                    continue;
                }
                println!(
                    "Topic: {}  TopicId: {}  Partitions: {}  ReplicationFactor: {}",
                    t.name,
                    t.topic_id_string(),
                    t.partitions.len(),
                    t.partitions.first().map_or(0, |p| p.replicas.len())
                );
                if !shown.is_empty() {
                    let cfg: Vec<String> = shown
                        .iter()
                        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
                        .collect();
                    println!("  Configs: {}", cfg.join(", "));
                }
                let rows: Vec<Vec<String>> = t
                    .partitions
                    .iter()
                    .map(|p| {
                        vec![
                            format!("  {}", p.partition),
                            p.leader.to_string(),
                            join_ids(&p.replicas),
                            join_ids(&p.isr),
                        ]
                    })
                    .collect();
                print_table(&["  PARTITION", "LEADER", "REPLICAS", "ISR"], &rows);
            }
            if json_out {
                print_json(&json!(out));
            }
        }
        Action::Delete { names } => {
            anyhow::ensure!(!names.is_empty(), "name at least one topic");
            admin.delete_topics(&names).await?;
            if json_out {
                print_json(&json!({"deleted": names}));
            } else {
                println!("Deleted {}", names.join(", "));
            }
        }
        Action::Alter {
            name,
            set,
            delete,
            partitions,
        } => {
            anyhow::ensure!(
                !set.is_empty() || !delete.is_empty() || partitions.is_some(),
                "nothing to alter: use --set, --delete or --partitions"
            );
            if !set.is_empty() || !delete.is_empty() {
                admin.alter_topic_configs(&name, &set, &delete).await?;
            }
            if let Some(n) = partitions {
                admin.create_partitions(&name, n).await?;
            }
            if json_out {
                print_json(&json!({"altered": name}));
            } else {
                println!("Altered topic {name}");
            }
        }
    }
    Ok(())
}

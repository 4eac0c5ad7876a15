//! `streamforge topics create|list|describe|delete|alter`.
use clap::Subcommand;
use serde_json::json;
use streamforge_client::{Admin, NewTopic};

use crate::client_common::{ConnArgs, block_on, parse_kv, print_json};
use crate::topics_describe;

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
        /// The topic's name.
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
    /// List topic names (internal ones such as __consumer_offsets too, as kafka-topics.sh).
    List {
        /// Leave out internal topics (kafka-topics.sh's flag).
        #[arg(long)]
        exclude_internal: bool,
        /// Accepted for older scripts: internal topics are listed by default now.
        #[arg(long, hide = true)]
        internal: bool,
    },
    /// Show topics (all when none named, internal ones too): configs, and per partition the
    /// leader, epoch, replicas, ISR, log start offset and high watermark.
    Describe {
        /// The topics to describe.
        names: Vec<String>,
        /// Also list every config (not only overrides).
        #[arg(long)]
        all_configs: bool,
        /// Leave out internal topics when describing all.
        #[arg(long)]
        exclude_internal: bool,
    },
    /// Delete topics.
    Delete {
        /// The topics to delete.
        names: Vec<String>,
    },
    /// Change configs or grow the partition count.
    Alter {
        /// The topic to alter.
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
        Action::List {
            exclude_internal,
            internal: _,
        } => {
            let topics = admin.describe_topics(&[]).await?;
            let names: Vec<String> = topics
                .into_iter()
                .filter(|t| !(exclude_internal && t.is_internal))
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
        Action::Describe {
            names,
            all_configs,
            exclude_internal,
        } => {
            let mut topics = admin.describe_topics(&names).await?;
            topics.retain(|t| !(exclude_internal && t.is_internal));
            topics_describe::print(&admin, &topics, all_configs, json_out).await?;
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

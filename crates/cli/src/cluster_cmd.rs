//! `streamforge cluster`: brokers and the controller.
use serde_json::json;
use streamforge_client::Admin;

use crate::client_common::{ConnArgs, block_on, print_json, print_table};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(async move {
        let admin = Admin::new(args.conn.client_config());
        let m = admin.describe_cluster().await?;
        let mut brokers: Vec<_> = m.brokers.values().cloned().collect();
        brokers.sort_by_key(|b| b.node_id);
        // As kafka-topics.sh lists them: internal topics counted too, and said apart.
        let topics = m.topics.len();
        let internal = m.topics.values().filter(|t| t.is_internal).count();
        let partitions: usize = m.topics.values().map(|t| t.partitions.len()).sum();
        if args.conn.json {
            print_json(&json!({
                "cluster_id": m.cluster_id, "controller_id": m.controller_id, "brokers": brokers,
                "topics": topics, "internal_topics": internal, "partitions": partitions,
            }));
            return Ok(());
        }
        println!("Cluster id: {}", m.cluster_id.as_deref().unwrap_or("-"));
        println!("Controller: {}", m.controller_id);
        println!("Topics: {topics} ({internal} internal)  Partitions: {partitions}");
        let rows: Vec<Vec<String>> = brokers
            .iter()
            .map(|b| {
                let role = if b.node_id == m.controller_id {
                    "controller"
                } else {
                    ""
                };
                vec![
                    b.node_id.to_string(),
                    b.host.clone(),
                    b.port.to_string(),
                    b.rack.clone().unwrap_or_default(),
                    role.to_string(),
                ]
            })
            .collect();
        print_table(&["ID", "HOST", "PORT", "RACK", "ROLE"], &rows);
        Ok(())
    })
}

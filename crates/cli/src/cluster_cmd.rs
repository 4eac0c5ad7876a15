//! `streamforge cluster`: the brokers (fenced or not), the controller, the metadata quorum
//! (voters, leader, lag) and the partitions that are under-replicated or offline.
use serde_json::json;
use streamforge_client::quorum::{ClusterBroker, QuorumInfo};
use streamforge_client::{Admin, Metadata};

use crate::client_common::{ConnArgs, block_on, print_json, print_table};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
}

/// Partitions whose ISR is smaller than their replica set, and those without a leader.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
struct PartitionHealth {
    under_replicated: Vec<String>,
    offline: Vec<String>,
}

fn partition_health(m: &Metadata) -> PartitionHealth {
    let mut h = PartitionHealth::default();
    let mut topics: Vec<_> = m.topics.values().collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    for t in topics {
        for p in &t.partitions {
            let name = format!("{}-{}", t.name, p.partition);
            if p.leader < 0 {
                h.offline.push(name);
            } else if p.isr.len() < p.replicas.len() {
                h.under_replicated.push(name);
            }
        }
    }
    h
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(async move {
        let admin = Admin::new(args.conn.client_config());
        let m = admin.describe_cluster().await?;
        let brokers = admin.describe_brokers().await?;
        let quorum = admin.describe_quorum().await?;
        // As kafka-topics.sh lists them: internal topics counted too, and said apart.
        let topics = m.topics.len();
        let internal = m.topics.values().filter(|t| t.is_internal).count();
        let partitions: usize = m.topics.values().map(|t| t.partitions.len()).sum();
        let health = partition_health(&m);
        if args.conn.json {
            print_json(&json!({
                "cluster_id": m.cluster_id, "controller_id": m.controller_id, "brokers": brokers,
                "quorum": quorum, "topics": topics, "internal_topics": internal,
                "partitions": partitions, "under_replicated_partitions": health.under_replicated,
                "offline_partitions": health.offline,
            }));
            return Ok(());
        }
        println!("Cluster id: {}", m.cluster_id.as_deref().unwrap_or("-"));
        println!("Controller: {}", m.controller_id);
        println!("Topics: {topics} ({internal} internal)  Partitions: {partitions}");
        print_brokers(&brokers, m.controller_id);
        println!();
        print_quorum(&quorum);
        println!();
        println!(
            "Under-replicated partitions: {}",
            list_or_none(&health.under_replicated)
        );
        println!("Offline partitions: {}", list_or_none(&health.offline));
        Ok(())
    })
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        format!("{} ({})", names.len(), names.join(", "))
    }
}

fn print_brokers(brokers: &[ClusterBroker], controller_id: i32) {
    let rows: Vec<Vec<String>> = brokers
        .iter()
        .map(|b| {
            let role = if b.node_id == controller_id {
                "controller"
            } else {
                ""
            };
            vec![
                b.node_id.to_string(),
                b.host.clone(),
                b.port.to_string(),
                b.rack.clone().unwrap_or_default(),
                if b.fenced { "fenced" } else { "live" }.to_string(),
                role.to_string(),
            ]
        })
        .collect();
    print_table(&["ID", "HOST", "PORT", "RACK", "STATE", "ROLE"], &rows);
}

fn print_quorum(q: &QuorumInfo) {
    println!(
        "Metadata quorum: leader {}  epoch {}  high watermark {}",
        q.leader_id, q.leader_epoch, q.high_watermark
    );
    let rows: Vec<Vec<String>> = q
        .voters
        .iter()
        .map(|v| ("voter", v))
        .chain(q.observers.iter().map(|v| ("observer", v)))
        .map(|(kind, v)| {
            vec![
                v.replica_id.to_string(),
                kind.to_string(),
                if v.replica_id == q.leader_id {
                    "leader"
                } else {
                    "follower"
                }
                .to_string(),
                opt(v.log_end_offset),
                v.lag.map_or("-".to_string(), |l| l.to_string()),
            ]
        })
        .collect();
    print_table(&["NODE", "KIND", "STATUS", "LOG END", "LAG"], &rows);
}

fn opt(v: i64) -> String {
    if v < 0 {
        "-".to_string()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_client::{PartitionInfo, TopicInfo};

    fn partition(partition: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionInfo {
        PartitionInfo {
            partition,
            leader,
            leader_epoch: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            offline: vec![],
            error_code: 0,
        }
    }

    #[test]
    fn a_short_isr_is_under_replicated_and_no_leader_is_offline() {
        let mut m = Metadata::default();
        let t = TopicInfo {
            name: "t".into(),
            topic_id: [0; 16],
            is_internal: false,
            error_code: 0,
            partitions: vec![
                partition(0, 1, &[1, 2, 3], &[1, 2, 3]),
                partition(1, 2, &[1, 2, 3], &[2]),
                partition(2, -1, &[1], &[]),
            ],
        };
        m.topics.insert("t".into(), t);
        let h = partition_health(&m);
        assert_eq!(h.under_replicated, vec!["t-1".to_string()]);
        assert_eq!(h.offline, vec!["t-2".to_string()]);
    }
}

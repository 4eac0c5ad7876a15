//! `streamforge topics describe`: each topic's configs and, per partition (as
//! `rpk topic describe -p`), leader, epoch, replicas, ISR, log start offset, high watermark and
//! size on disk (DescribeLogDirs of the leader).
use std::collections::HashMap;

use serde_json::json;
use streamforge_client::offsets::{self, OffsetAndTimestamp, TopicPartition};
use streamforge_client::{Admin, TopicInfo};

use crate::client_common::{join_ids, print_json, print_table};

/// ListOffsets timestamps: the log start offset and the high watermark.
const EARLIEST: i64 = -2;
const LATEST: i64 = -1;

pub async fn print(
    admin: &Admin,
    topics: &[TopicInfo],
    all_configs: bool,
    json_out: bool,
) -> anyhow::Result<()> {
    let starts = offsets_at(admin, topics, EARLIEST).await;
    let ends = offsets_at(admin, topics, LATEST).await;
    // A broker without DescribeLogDirs leaves the sizes out ("-") rather than failing.
    let sizes = admin.partition_sizes(topics).await.unwrap_or_default();
    let size = |t: &str, p: i32| sizes.get(&(t.to_string(), p)).copied();
    let offset = |m: &HashMap<TopicPartition, OffsetAndTimestamp>, t: &str, p: i32| {
        m.get(&(t.to_string(), p)).map(|o| o.offset)
    };
    let mut out = Vec::new();
    for t in topics {
        let configs = admin
            .describe_topic_configs(&t.name)
            .await
            .unwrap_or_default();
        let shown: Vec<_> = configs
            .into_iter()
            .filter(|c| all_configs || !c.is_default)
            .collect();
        if json_out {
            let partitions: Vec<_> = t
                .partitions
                .iter()
                .map(|p| {
                    json!({
                        "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                        "replicas": p.replicas, "isr": p.isr, "offline": p.offline,
                        "error_code": p.error_code,
                        "log_start_offset": offset(&starts, &t.name, p.partition),
                        "high_watermark": offset(&ends, &t.name, p.partition),
                        "size_bytes": size(&t.name, p.partition),
                    })
                })
                .collect();
            out.push(json!({
                "name": t.name, "topic_id": t.topic_id_string(), "internal": t.is_internal,
                "partitions": partitions, "configs": shown,
            }));
            continue;
        }
        println!(
            "Topic: {}  TopicId: {}  Partitions: {}  ReplicationFactor: {}{}",
            t.name,
            t.topic_id_string(),
            t.partitions.len(),
            t.partitions.first().map_or(0, |p| p.replicas.len()),
            if t.is_internal {
                "  Internal: true"
            } else {
                ""
            }
        );
        if !shown.is_empty() {
            let cfg: Vec<String> = shown
                .iter()
                .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
                .collect();
            println!("  Configs: {}", cfg.join(", "));
        }
        let dash = |o: Option<i64>| o.map_or_else(|| "-".to_string(), |o| o.to_string());
        let rows: Vec<Vec<String>> = t
            .partitions
            .iter()
            .map(|p| {
                vec![
                    format!("  {}", p.partition),
                    p.leader.to_string(),
                    p.leader_epoch.to_string(),
                    join_ids(&p.replicas),
                    join_ids(&p.isr),
                    dash(offset(&starts, &t.name, p.partition)),
                    dash(offset(&ends, &t.name, p.partition)),
                    dash(size(&t.name, p.partition)),
                ]
            })
            .collect();
        print_table(
            &[
                "  PARTITION",
                "LEADER",
                "EPOCH",
                "REPLICAS",
                "ISR",
                "LOG-START-OFFSET",
                "HIGH-WATERMARK",
                "SIZE",
            ],
            &rows,
        );
    }
    if json_out {
        print_json(&json!(out));
    }
    Ok(())
}

/// One ListOffsets round for every online partition of `topics`; a failure leaves the
/// offsets out ("-") rather than failing the describe.
async fn offsets_at(
    admin: &Admin,
    topics: &[TopicInfo],
    timestamp: i64,
) -> HashMap<TopicPartition, OffsetAndTimestamp> {
    let query: Vec<(TopicPartition, i64)> = topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.leader >= 0)
                .map(|p| ((t.name.clone(), p.partition), timestamp))
        })
        .collect();
    if query.is_empty() {
        return HashMap::new();
    }
    offsets::list_offsets(admin.cluster(), &query)
        .await
        .unwrap_or_default()
}

//! `streamforge transactions list|describe|abort`, like `kafka-transactions.sh`.
use clap::Subcommand;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest,
    TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;
use streamforge_client::Admin;

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
    /// List transactional ids with their producer id and state.
    List,
    /// Show one transaction: state, producer, timeout, start time and partitions.
    Describe {
        /// The transactional id (or `--transactional-id`).
        #[arg(long = "transactional-id", visible_alias = "id")]
        transactional_id: String,
    },
    /// Abort the open (hanging) transaction on a partition by writing an ABORT marker for it.
    Abort {
        /// The topic of the partition holding the hanging transaction.
        #[arg(long)]
        topic: String,
        /// The partition holding the hanging transaction.
        #[arg(long)]
        partition: i32,
        /// Only the transaction that started at this offset (Kafka's `--start-offset`).
        #[arg(long)]
        start_offset: Option<i64>,
    },
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let admin = Admin::new(args.conn.client_config());
    admin.cluster().refresh_metadata(&[]).await?;
    let conn = admin.cluster().any_broker().await?;
    let json_out = args.conn.json;
    match args.action {
        Action::List => {
            let v = conn.version_for::<ListTransactionsRequest>(1)?;
            let mut req = ListTransactionsRequest::default();
            req.duration_filter = -1;
            let r = conn.send(&req, v).await?;
            anyhow::ensure!(
                r.error_code == 0,
                "ListTransactions: error {}",
                r.error_code
            );
            let rows: Vec<Vec<String>> = r
                .transaction_states
                .iter()
                .map(|t| {
                    vec![
                        t.transactional_id.0.to_string(),
                        t.producer_id.0.to_string(),
                        t.transaction_state.to_string(),
                    ]
                })
                .collect();
            if json_out {
                let v: Vec<_> = rows
                    .iter()
                    .map(|r| json!({"transactional_id": r[0], "producer_id": r[1].parse::<i64>().unwrap_or(-1), "state": r[2]}))
                    .collect();
                print_json(&json!(v));
            } else {
                print_table(&["TRANSACTIONAL ID", "PRODUCER ID", "STATE"], &rows);
            }
        }
        Action::Describe { transactional_id } => {
            let mut req = DescribeTransactionsRequest::default();
            req.transactional_ids = vec![TransactionalId(s(&transactional_id))];
            let v = conn.version_for::<DescribeTransactionsRequest>(0)?;
            let r = conn.send(&req, v).await?;
            let t = r
                .transaction_states
                .first()
                .ok_or_else(|| anyhow::anyhow!("no answer"))?;
            anyhow::ensure!(
                t.error_code == 0,
                "DescribeTransactions {transactional_id}: error {}",
                t.error_code
            );
            let parts: Vec<String> = t
                .topics
                .iter()
                .flat_map(|tp| {
                    tp.partitions
                        .iter()
                        .map(move |p| format!("{}-{p}", tp.topic.0))
                })
                .collect();
            if json_out {
                print_json(&json!({
                    "transactional_id": transactional_id, "state": t.transaction_state.to_string(),
                    "producer_id": t.producer_id.0, "producer_epoch": t.producer_epoch,
                    "timeout_ms": t.transaction_timeout_ms,
                    "start_time_ms": t.transaction_start_time_ms, "partitions": parts,
                }));
            } else {
                print_table(
                    &[
                        "TRANSACTIONAL ID",
                        "PRODUCER ID",
                        "EPOCH",
                        "STATE",
                        "TIMEOUT MS",
                        "START MS",
                        "PARTITIONS",
                    ],
                    &[vec![
                        transactional_id,
                        t.producer_id.0.to_string(),
                        t.producer_epoch.to_string(),
                        t.transaction_state.to_string(),
                        t.transaction_timeout_ms.to_string(),
                        t.transaction_start_time_ms.to_string(),
                        parts.join(","),
                    ]],
                );
            }
        }
        Action::Abort {
            topic,
            partition,
            start_offset,
        } => {
            let mut req = DescribeProducersRequest::default();
            let mut tr = TopicRequest::default();
            tr.name = kafka_protocol::messages::TopicName(s(&topic));
            tr.partition_indexes = vec![partition];
            req.topics = vec![tr];
            let v = conn.version_for::<DescribeProducersRequest>(0)?;
            let r = conn.send(&req, v).await?;
            let p = r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .ok_or_else(|| anyhow::anyhow!("no answer for {topic}-{partition}"))?;
            anyhow::ensure!(
                p.error_code == 0,
                "DescribeProducers: error {}",
                p.error_code
            );
            let open = p.active_producers.iter().find(|ps| {
                ps.current_txn_start_offset >= 0
                    && start_offset.is_none_or(|o| o == ps.current_txn_start_offset)
            });
            let Some(open) = open else {
                anyhow::bail!("no open transaction on {topic}-{partition}");
            };
            let mut marker = WritableTxnMarker::default();
            marker.producer_id = open.producer_id;
            marker.producer_epoch = open.producer_epoch as i16;
            marker.transaction_result = false;
            marker.coordinator_epoch = open.coordinator_epoch;
            let mut mt = WritableTxnMarkerTopic::default();
            mt.name = kafka_protocol::messages::TopicName(s(&topic));
            mt.partition_indexes = vec![partition];
            marker.topics = vec![mt];
            let mut req = WriteTxnMarkersRequest::default();
            req.markers = vec![marker];
            let v = conn.version_for::<WriteTxnMarkersRequest>(1)?;
            let r = conn.send(&req, v).await?;
            let code = r
                .markers
                .first()
                .and_then(|m| m.topics.first())
                .and_then(|t| t.partitions.first())
                .map_or(-1, |p| p.error_code);
            anyhow::ensure!(code == 0, "WriteTxnMarkers: error {code}");
            if json_out {
                print_json(
                    &json!({"aborted": {"producer_id": open.producer_id.0, "start_offset": open.current_txn_start_offset}}),
                );
            } else {
                println!(
                    "Aborted the transaction of producer {} that started at offset {} on {topic}-{partition}",
                    open.producer_id.0, open.current_txn_start_offset
                );
            }
        }
    }
    Ok(())
}

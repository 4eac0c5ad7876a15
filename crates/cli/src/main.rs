//! `streamforge`: the broker daemon and the command-line tools.
use clap::{Parser, Subcommand};

mod bench_cmd;
mod broker_cmd;
mod client_common;
mod cluster_cmd;
mod consume_cmd;
mod dashboard_bench;
mod dump_log_cmd;
mod groups_cmd;
mod produce_cmd;
mod topics_cmd;

#[derive(Parser)]
#[command(
    name = "streamforge",
    version,
    about = "A Kafka-compatible event-streaming broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start-up
enum Command {
    /// Run the broker (Kafka protocol on :9092, dashboard on :8080).
    Broker(broker_cmd::Args),
    /// Create, list, describe, alter and delete topics.
    Topics(topics_cmd::Args),
    /// Produce records from stdin or a file.
    Produce(produce_cmd::Args),
    /// Consume records.
    Consume(consume_cmd::Args),
    /// List, describe, reset offsets of and delete consumer groups.
    Groups(groups_cmd::Args),
    /// Show brokers and the controller.
    Cluster(cluster_cmd::Args),
    /// Print the batches, records and index entries of a segment file (offline).
    DumpLog(dump_log_cmd::Args),
    /// Benchmark a broker (an embedded one unless --bootstrap is given).
    Bench(bench_cmd::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Broker(a) => broker_cmd::run(a),
        Command::Topics(a) => topics_cmd::run(a),
        Command::Produce(a) => produce_cmd::run(a),
        Command::Consume(a) => consume_cmd::run(a),
        Command::Groups(a) => groups_cmd::run(a),
        Command::Cluster(a) => cluster_cmd::run(a),
        Command::DumpLog(a) => dump_log_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
    }
}

//! `streamforge`: the broker daemon and the command-line tools.
use clap::{Parser, Subcommand};

mod acls_cmd;
mod bench_cluster;
mod bench_cmd;
mod broker_cmd;
mod client_common;
mod cluster_args;
mod cluster_cmd;
mod consume_cmd;
mod dashboard_bench;
mod dump_log_cmd;
mod groups_cmd;
mod groups_describe;
mod groups_reset;
mod http_auth_args;
mod kafka_names;
mod oauth_args;
mod produce_cmd;
mod record_format;
mod topics_cmd;
mod topics_describe;
mod transactions_cmd;
mod users_cmd;

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
    /// List, describe and abort transactions (like kafka-transactions.sh).
    Transactions(transactions_cmd::Args),
    /// Show brokers and the controller.
    Cluster(cluster_cmd::Args),
    /// Print the batches, records and index entries of a segment file (offline).
    DumpLog(dump_log_cmd::Args),
    /// Create, delete and list SASL/SCRAM users.
    Users(users_cmd::Args),
    /// Add, remove and list ACLs (like kafka-acls.sh).
    Acls(acls_cmd::Args),
    /// Benchmark a broker (an embedded one unless --bootstrap is given).
    Bench(bench_cmd::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line an operator can act on: no `Debug` forms and no backtrace (even with
            // RUST_BACKTRACE set; those are for panics), each cause said once.
            eprintln!("streamforge: error: {}", error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `outer: cause: root cause`, skipping a cause whose text its parent already ends with
/// (errors that print their source in their own message, as `thiserror`'s `{source}` does).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Broker(a) => broker_cmd::run(a),
        Command::Topics(a) => topics_cmd::run(a),
        Command::Produce(a) => produce_cmd::run(a),
        Command::Consume(a) => consume_cmd::run(a),
        Command::Groups(a) => groups_cmd::run(a),
        Command::Transactions(a) => transactions_cmd::run(a),
        Command::Cluster(a) => cluster_cmd::run(a),
        Command::DumpLog(a) => dump_log_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Users(a) => users_cmd::run(a),
        Command::Acls(a) => acls_cmd::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// Every subcommand and every argument says what it is for in `--help`.
    #[test]
    fn every_command_and_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg
                    .get_help()
                    .is_none_or(|h| h.to_string().trim().is_empty())
                {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{sub_path} (no about)"));
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(
            &<super::Cli as clap::CommandFactory>::command(),
            "streamforge",
            &mut missing,
        );
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    #[test]
    fn a_cause_already_in_its_parents_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address in use");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot bind 127.0.0.1:9092: {source}")]
        struct Bind {
            source: std::io::Error,
        }
        let e = anyhow::Error::new(Bind { source: io }).context("starting the broker");
        assert_eq!(
            error_chain(&e),
            "starting the broker: cannot bind 127.0.0.1:9092: Address in use"
        );
    }
}

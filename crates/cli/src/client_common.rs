//! Shared pieces of the client subcommands: connection flags, the runtime, output helpers.
use std::future::Future;

use streamforge_client::ClientConfig;

/// Flags every client subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Broker(s) to bootstrap from, comma-separated HOST:PORT (also `--bootstrap-server`, `-b`).
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        global = true,
        default_value = "localhost:9092",
        env = "STREAMFORGE_BOOTSTRAP"
    )]
    pub bootstrap: String,
    /// Machine-readable JSON output instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ConnArgs {
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(&self.bootstrap)
    }
}

/// Runs an async command on a small runtime.
pub fn block_on<F: Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(f)
}

/// Prints rows as an aligned table with a header.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

/// Prints a JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    println!("{v}");
}

/// Parses `key=value`.
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got '{s}'"))
}

/// Formats a list of ids like `1,2,3`.
pub fn join_ids(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

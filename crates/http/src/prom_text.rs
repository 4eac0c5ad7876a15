//! Prometheus text for state that is read at scrape time rather than counted: partitions, log
//! sizes and offsets, group lag, and the process itself.
//!
//! These are rendered fresh from the cluster view on every scrape (instead of being kept as
//! gauges in the recorder) so a deleted topic or group disappears from `/metrics` at once.

use std::fmt::Write;

use crate::facade::{ClusterInfo, GroupInfo, TopicInfo};
use crate::lag::partition_lag;

/// Appends one metric family.
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    pub fn new(out: &'a mut String, name: &'static str, kind: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out, name }
    }

    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        }
    } else {
        value.to_string()
    }
}

/// Topic, partition and log families.
pub fn render_topics(out: &mut String, topics: &[TopicInfo]) {
    let mut f = Family::new(
        out,
        "streamforge_topics",
        "gauge",
        "Topics, internal ones included",
    );
    f.sample(&[], topics.len() as f64);
    let mut f = Family::new(
        out,
        "streamforge_partitions",
        "gauge",
        "Partitions by topic",
    );
    for t in topics {
        f.sample(&[("topic", &t.name)], t.partitions.len() as f64);
    }
    type Field = fn(&crate::facade::PartitionInfo) -> Option<f64>;
    let per_partition: [(&'static str, &str, Field); 5] = [
        (
            "streamforge_log_size_bytes",
            "Bytes of the local partition log on disk",
            |p| Some(p.size_bytes as f64),
        ),
        (
            "streamforge_remote_log_size_bytes",
            "Bytes of the partition held in the object store",
            |p| p.remote_size_bytes.map(|b| b as f64),
        ),
        ("streamforge_log_start_offset", "Log start offset", |p| {
            Some(p.log_start_offset as f64)
        }),
        ("streamforge_log_end_offset", "Log end offset", |p| {
            Some(p.log_end_offset as f64)
        }),
        ("streamforge_high_watermark", "High watermark", |p| {
            Some(p.high_watermark as f64)
        }),
    ];
    for (name, help, field) in per_partition {
        let mut f = Family::new(out, name, "gauge", help);
        for t in topics {
            if t.internal {
                // Bounded cardinality: __consumer_offsets has 50 partitions nobody graphs one
                // by one; an internal topic is one series, summed, with partition="all".
                let values: Vec<f64> = t.partitions.iter().filter_map(field).collect();
                if !values.is_empty() {
                    let sum = values.iter().sum();
                    f.sample(&[("topic", &t.name), ("partition", "all")], sum);
                }
                continue;
            }
            for p in &t.partitions {
                if let Some(value) = field(p) {
                    let partition = p.partition.to_string();
                    f.sample(&[("topic", &t.name), ("partition", &partition)], value);
                }
            }
        }
    }
}

/// Consumer group families.
/// Kafka's controller gauges (`ActiveControllerCount`, `OfflinePartitionsCount`,
/// `FencedBrokerCount`, `ActiveBrokerCount`). As in Kafka only the active controller reports the
/// cluster-wide counts (the others report 0), so a sum over every broker's `/metrics` is right.
pub fn render_cluster(out: &mut String, cluster: &ClusterInfo, topics: &[TopicInfo]) {
    let active = cluster.controller_id == cluster.node_id;
    let count = |n: usize| if active { n as f64 } else { 0.0 };
    let gauges: [(&'static str, &str, f64); 4] = [
        (
            "streamforge_active_controller_count",
            "1 on the broker that is the active controller, else 0",
            if active { 1.0 } else { 0.0 },
        ),
        (
            "streamforge_controller_offline_partitions",
            "Partitions without a leader (reported by the active controller)",
            count(
                topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .filter(|p| p.leader < 0)
                    .count(),
            ),
        ),
        (
            "streamforge_controller_fenced_brokers",
            "Registered brokers the controller has fenced (reported by the active controller)",
            count(cluster.brokers.iter().filter(|b| b.fenced).count()),
        ),
        (
            "streamforge_controller_active_brokers",
            "Registered, unfenced brokers (reported by the active controller)",
            count(cluster.brokers.iter().filter(|b| !b.fenced).count()),
        ),
    ];
    for (name, help, value) in gauges {
        Family::new(out, name, "gauge", help).sample(&[], value);
    }
}

pub fn render_groups(out: &mut String, groups: &[GroupInfo]) {
    let mut f = Family::new(
        out,
        "streamforge_groups",
        "gauge",
        "Consumer groups by state",
    );
    let mut by_state = std::collections::BTreeMap::<&str, usize>::new();
    for g in groups {
        *by_state.entry(g.state.as_str()).or_default() += 1;
    }
    for (state, count) in by_state {
        f.sample(&[("state", state)], count as f64);
    }
    let mut f = Family::new(
        out,
        "streamforge_group_members",
        "gauge",
        "Members of each consumer group",
    );
    for g in groups {
        f.sample(&[("group", &g.group_id)], g.members.len() as f64);
    }
    let mut f = Family::new(
        out,
        "streamforge_group_lag",
        "gauge",
        "Messages between a group's committed offset and the high watermark",
    );
    for g in groups {
        for o in &g.offsets {
            if let Some(lag) = partition_lag(o) {
                let partition = o.partition.to_string();
                f.sample(
                    &[
                        ("group", &g.group_id),
                        ("topic", &o.topic),
                        ("partition", &partition),
                    ],
                    lag as f64,
                );
            }
        }
    }
}

/// Process metrics with the names Prometheus client libraries use, read from /proc/self.
pub fn render_process(out: &mut String, started_at_ms: i64) {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the ")" that ends the command name; utime is field 14, num_threads 20.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    const CLOCK_TICKS_PER_SECOND: f64 = 100.0;
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        let mut f = Family::new(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent",
        );
        f.sample(&[], (utime + stime) / CLOCK_TICKS_PER_SECOND);
    }
    if let Some(threads) = field(20) {
        let mut f = Family::new(out, "process_threads", "gauge", "OS threads of the process");
        f.sample(&[], threads);
    }
    if let Some(vsize) = field(23) {
        let mut f = Family::new(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size",
        );
        f.sample(&[], vsize);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(rss_kib) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    {
        let mut f = Family::new(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size",
        );
        f.sample(&[], rss_kib * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let mut f = Family::new(out, "process_open_fds", "gauge", "Open file descriptors");
        f.sample(&[], fds.count() as f64);
    }
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(max) = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<f64>().ok())
    {
        let mut f = Family::new(
            out,
            "process_max_fds",
            "gauge",
            "Limit of open file descriptors",
        );
        f.sample(&[], max);
    }
    let mut f = Family::new(
        out,
        "process_start_time_seconds",
        "gauge",
        "Start time since the epoch",
    );
    f.sample(&[], started_at_ms as f64 / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_families_typed() {
        let mut out = String::new();
        let mut f = Family::new(&mut out, "streamforge_x", "gauge", "help");
        f.sample(&[("topic", "a\"b\\c")], 1.5);
        assert!(out.contains("# TYPE streamforge_x gauge\n"));
        assert!(
            out.contains("streamforge_x{topic=\"a\\\"b\\\\c\"} 1.5\n"),
            "{out}"
        );
    }

    #[test]
    fn process_metrics_render() {
        let mut out = String::new();
        render_process(&mut out, 1_000);
        assert!(out.contains("process_resident_memory_bytes "), "{out}");
        assert!(out.contains("process_cpu_seconds_total "), "{out}");
        assert!(out.contains("process_start_time_seconds 1\n"), "{out}");
    }
}

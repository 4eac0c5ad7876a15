//! The human-readable results table.
use crate::BenchResult;

/// `1234567` -> `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn latency_line(l: &crate::LatencySummary) -> String {
    format!(
        "p50 {:.2} ms  p95 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
        l.p50, l.p95, l.p99, l.p999, l.max
    )
}

fn cpu_note(t: &crate::Throughput, embedded: bool) -> String {
    let whose = if embedded {
        "bench client + embedded broker"
    } else {
        "bench client only"
    };
    match t.cpu_seconds_per_million {
        Some(c) => format!("  [{c:.3} CPU-s per million msgs, {whose}]"),
        None => String::new(),
    }
}

/// Where the broker ran, said plainly: every figure depends on it.
fn broker_line(w: &crate::Workload) -> String {
    if w.embedded && w.brokers > 1 {
        format!(
            "Brokers             : a cluster of {} embedded in this process (same CPUs as the \
             clients; each broker its own runtime and data dir); clients reach them over \
             loopback TCP {}\n",
            w.brokers, w.bootstrap
        )
    } else if w.embedded {
        format!(
            "Broker              : embedded in this process (same CPUs as the clients); clients \
             reach it over loopback TCP {}\n",
            w.bootstrap
        )
    } else {
        format!(
            "Broker              : {} (another process), over TCP; CPU figures are the bench \
             client's only\n",
            w.bootstrap
        )
    }
}

/// The results table printed by `streamforge bench`.
pub fn table(r: &BenchResult) -> String {
    let w = &r.workload;
    let mut s = String::new();
    s.push_str(&format!(
        "Target Workload     : {} Broker{} | {} Partitions x {} Replica{} | acks {} | {} Messages | {} B\n",
        w.brokers,
        if w.brokers == 1 { "" } else { "s" },
        w.partitions,
        w.replication_factor,
        if w.replication_factor == 1 { "" } else { "s" },
        if w.acks == -1 { "all".to_string() } else { w.acks.to_string() },
        thousands(w.messages),
        w.message_size
    ));
    s.push_str(&broker_line(w));
    s.push_str(&format!(
        "Producer Throughput : {} msg/s ({:.1} MB/s){}\n",
        thousands(r.producer.msgs_per_sec as u64),
        r.producer.mb_per_sec,
        cpu_note(&r.producer, w.embedded)
    ));
    s.push_str(&format!(
        "Consumer Throughput : {} msg/s ({:.1} MB/s){}\n",
        thousands(r.consumer.msgs_per_sec as u64),
        r.consumer.mb_per_sec,
        cpu_note(&r.consumer, w.embedded)
    ));
    match &r.latency_ms {
        Some(l) => s.push_str(&format!(
            "End-to-end latency  : {}  (full speed)\n",
            latency_line(l)
        )),
        None => s.push_str("End-to-end latency  : not measured\n"),
    }
    if let Some(l) = &r.latency_at_rate_ms {
        s.push_str(&format!(
            "                      {}  (at {} msg/s)\n",
            latency_line(l),
            thousands(r.latency_rate)
        ));
    }
    match &r.recovery {
        Some(rec) => s.push_str(&format!(
            "Crash Recovery Time : {:.0} ms (validated {} messages on disk)\n",
            rec.ms,
            thousands(rec.validated_messages)
        )),
        None if w.embedded && w.brokers > 1 => {
            s.push_str("Crash Recovery Time : not measured (an embedded cluster)\n")
        }
        None if w.embedded => s.push_str("Crash Recovery Time : not measured (--no-recovery)\n"),
        None => s.push_str("Crash Recovery Time : not measured (needs the embedded broker)\n"),
    }
    s.push_str("How each figure is measured: docs/BENCHMARKS.md\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(568_938), "568,938");
    }
}

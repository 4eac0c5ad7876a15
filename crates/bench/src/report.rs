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

/// Producer ack latency, one line per phase that measured it.
fn ack_lines(r: &BenchResult) -> String {
    let phases = [
        (&r.ack_latency_ms, "(full speed)".to_string()),
        (
            &r.ack_latency_at_rate_ms,
            format!("(at {} msg/s)", thousands(r.latency_rate)),
        ),
        (
            &r.produce_ack_latency_ms,
            "(throughput phase, queue full)".to_string(),
        ),
    ];
    let mut s = String::new();
    for (l, label) in phases {
        if let Some(l) = l {
            let head = if s.is_empty() {
                "Ack latency         : "
            } else {
                "                      "
            };
            s.push_str(&format!("{head}{}  {label}\n", latency_line(l)));
        }
    }
    if s.is_empty() {
        s.push_str("Ack latency         : not measured\n");
    }
    s
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
    s.push_str(&ack_lines(r));
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

    fn summary(p50: f64) -> crate::LatencySummary {
        crate::LatencySummary {
            samples: 10,
            p50,
            p95: p50,
            p99: p50,
            p999: p50,
            max: p50,
        }
    }

    #[test]
    fn ack_latency_lines_name_their_phase() {
        let mut r: BenchResult = serde_json::from_value(serde_json::json!({
            "workload": {
                "brokers": 1, "partitions": 1, "messages": 1, "message_size": 100,
                "batch_size": 1, "acks": -1, "producers": 1, "consumers": 1,
                "compression": "none", "idempotence": false, "topic": "t", "bootstrap": "b"
            },
            "producer": {"messages": 1, "bytes": 1, "seconds": 1.0, "msgs_per_sec": 1.0, "mb_per_sec": 1.0},
            "consumer": {"messages": 1, "bytes": 1, "seconds": 1.0, "msgs_per_sec": 1.0, "mb_per_sec": 1.0},
            "latency_ms": null, "latency_at_rate_ms": null, "latency_rate": 10000, "recovery": null
        }))
        .expect("a result without the ack fields still reads");
        assert!(table(&r).contains("Ack latency         : not measured"));
        r.ack_latency_at_rate_ms = Some(summary(1.25));
        r.produce_ack_latency_ms = Some(summary(40.0));
        let t = table(&r);
        assert!(
            t.contains("Ack latency         : p50 1.25 ms") && t.contains("(at 10,000 msg/s)"),
            "{t}"
        );
        assert!(
            t.contains("                      p50 40.00 ms") && t.contains("queue full"),
            "{t}"
        );
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(568_938), "568,938");
    }
}

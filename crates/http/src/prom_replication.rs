//! Replication families for `/metrics`, read from the cluster view at scrape time (Kafka's
//! `UnderReplicatedPartitions`, `UnderMinIsrPartitionCount`, `InSyncReplicasCount`, `IsrShrinksPerSec` / `IsrExpandsPerSec`,
//! the per-partition `UnderReplicated`, `UnderMinIsr` and `AtMinIsr` gauges and the fetcher's
//! `ConsumerLag`).
//!
//! Cardinality: per-partition series exist only for partitions with a role here (ISR size,
//! follower lag and the under-replicated / min-ISR flags where this broker leads, fetcher lag
//! where it follows); an internal topic is one series with `partition="all"` (its smallest
//! ISR, its largest lags, 1 if any of its partitions is flagged); `follower` is a replica
//! id of the partition (at most `REPLICAS_MAX` = 64 each); and no family has more than
//! [`REPLICATION_SERIES_MAX`] series (the rest are left out; the under-replicated count still
//! counts every partition).

use std::collections::BTreeMap;

use crate::facade::{ClusterInfo, PartitionInfo, TopicInfo};
use crate::prom_text::Family;

/// Most series one replication family has on one scrape.
pub const REPLICATION_SERIES_MAX: usize = 10_000;

/// One labelled value before it is written: `(partition label, follower label, value)`.
type Series = (String, Option<i32>, f64);
/// A partition's samples of one family: `(follower, value)`.
type Sample = (Option<i32>, f64);
/// What one family reads from a partition.
type Field<'a> = &'a dyn Fn(&PartitionInfo) -> Vec<Sample>;

/// The replication families.
pub fn render_replication(out: &mut String, cluster: Option<&ClusterInfo>, topics: &[TopicInfo]) {
    let under = topics
        .iter()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.under_replicated_here())
        .count();
    Family::new(
        out,
        "streamforge_under_replicated_partitions",
        "gauge",
        "Partitions led by this broker whose ISR is smaller than their replica set",
    )
    .sample(&[], under as f64);
    let under_min_isr = topics
        .iter()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.under_min_isr_here())
        .count();
    Family::new(
        out,
        "streamforge_under_min_isr_partitions",
        "gauge",
        "Partitions led by this broker whose ISR is smaller than min.insync.replicas (their high watermark waits)",
    )
    .sample(&[], under_min_isr as f64);

    let isr_size = |p: &PartitionInfo| -> Vec<Sample> {
        if !p.led_here {
            return Vec::new();
        }
        vec![(None, p.current_replicas_and_isr().1.len() as f64)]
    };
    let follower_lag = |p: &PartitionInfo| -> Vec<Sample> {
        let followers = p.replication.iter().flat_map(|r| &r.followers);
        followers
            .filter_map(|f| Some((Some(f.broker_id), f.lag_messages? as f64)))
            .collect()
    };
    let fetcher_lag = |p: &PartitionInfo| -> Vec<Sample> {
        p.fetcher_lag
            .map(|l| (None, l as f64))
            .into_iter()
            .collect()
    };
    // Kafka's per-partition `kafka.cluster:type=Partition` gauges, 1 or 0, where led here.
    let flag = |led: bool, on: bool| -> Vec<Sample> {
        if led {
            vec![(None, f64::from(u8::from(on)))]
        } else {
            Vec::new()
        }
    };
    let under_replicated = |p: &PartitionInfo| flag(p.led_here, p.under_replicated_here());
    let under_min_isr = |p: &PartitionInfo| flag(p.led_here, p.under_min_isr_here());
    let at_min_isr = |p: &PartitionInfo| flag(p.led_here, p.at_min_isr_here());
    let families: [(&'static str, &str, Field, Aggregate); 6] = [
        (
            "streamforge_partition_isr_size",
            "In-sync replicas of each partition led by this broker",
            &isr_size,
            Aggregate::Min,
        ),
        (
            "streamforge_replica_lag_messages",
            "On the leader: its log end offset minus each follower's",
            &follower_lag,
            Aggregate::Max,
        ),
        (
            "streamforge_replica_fetcher_lag",
            "On a follower: the leader's high watermark minus this replica's log end offset",
            &fetcher_lag,
            Aggregate::Max,
        ),
        (
            "streamforge_partition_under_replicated",
            "1 when a partition led by this broker has an ISR smaller than its replicas (Kafka's UnderReplicated)",
            &under_replicated,
            Aggregate::Max,
        ),
        (
            "streamforge_partition_under_min_isr",
            "1 when a partition led by this broker has an ISR smaller than min.insync.replicas: its high watermark waits and acks=all is refused (Kafka's UnderMinIsr)",
            &under_min_isr,
            Aggregate::Max,
        ),
        (
            "streamforge_partition_at_min_isr",
            "1 when a partition led by this broker has an ISR of exactly min.insync.replicas: one more replica out and acks=all is refused (Kafka's AtMinIsr)",
            &at_min_isr,
            Aggregate::Max,
        ),
    ];
    for (name, help, field, aggregate) in families {
        let mut f = Family::new(out, name, "gauge", help);
        for (topic, partition, follower, value) in series(topics, field, aggregate) {
            let follower = follower.map(|id| id.to_string());
            let mut labels = vec![("topic", topic), ("partition", partition.as_str())];
            if let Some(id) = &follower {
                labels.push(("follower", id.as_str()));
            }
            f.sample(&labels, value);
        }
    }

    let totals = cluster.map(|c| c.isr_changes).unwrap_or_default();
    let counters: [(&'static str, &str, u64); 2] = [
        (
            "streamforge_isr_shrinks_total",
            "ISR shrinks the controller accepted for partitions led by this broker",
            totals.shrinks,
        ),
        (
            "streamforge_isr_expands_total",
            "ISR expansions the controller accepted for partitions led by this broker",
            totals.expands,
        ),
    ];
    for (name, help, value) in counters {
        Family::new(out, name, "counter", help).sample(&[], value as f64);
    }
}

/// How an internal topic's partitions fold into its one `partition="all"` series.
#[derive(Clone, Copy)]
enum Aggregate {
    Min,
    Max,
}

/// `(topic, partition label, follower, value)` of one family, at most
/// [`REPLICATION_SERIES_MAX`].
fn series<'a>(
    topics: &'a [TopicInfo],
    field: Field,
    aggregate: Aggregate,
) -> Vec<(&'a str, String, Option<i32>, f64)> {
    let mut out = Vec::new();
    for t in topics {
        let mut rows: Vec<Series> = Vec::new();
        if t.internal {
            let mut folded = BTreeMap::<Option<i32>, f64>::new();
            for (follower, v) in t.partitions.iter().flat_map(field) {
                let slot = folded.entry(follower).or_insert(v);
                *slot = match aggregate {
                    Aggregate::Min => slot.min(v),
                    Aggregate::Max => slot.max(v),
                };
            }
            rows.extend(folded.into_iter().map(|(f, v)| ("all".to_string(), f, v)));
        } else {
            for p in &t.partitions {
                let partition = p.partition.to_string();
                rows.extend(field(p).into_iter().map(|(f, v)| (partition.clone(), f, v)));
            }
        }
        for (partition, follower, value) in rows {
            if out.len() == REPLICATION_SERIES_MAX {
                return out;
            }
            out.push((t.name.as_str(), partition, follower, value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facade::{FollowerLag, IsrChangeTotals, ReplicationInfo};

    fn partition(index: i32, led_here: bool, isr: &[i32], lags: &[(i32, i64)]) -> PartitionInfo {
        let replicas = vec![1, 2, 3];
        PartitionInfo {
            partition: index,
            leader: 1,
            leader_epoch: 1,
            replicas: replicas.clone(),
            isr: vec![1, 2, 3],
            log_start_offset: 0,
            log_end_offset: 100,
            high_watermark: 90,
            size_bytes: 0,
            remote_size_bytes: None,
            led_here,
            replication: led_here.then(|| ReplicationInfo {
                replicas,
                isr: isr.to_vec(),
                under_min_isr: isr.len() < 2,
                effective_min_isr: 2,
                followers: lags
                    .iter()
                    .map(|&(id, lag)| FollowerLag {
                        broker_id: id,
                        log_end_offset: Some(100 - lag),
                        lag_messages: Some(lag),
                        in_sync: isr.contains(&id),
                        time_since_caught_up_ms: 0,
                    })
                    .collect(),
            }),
            fetcher_lag: (!led_here).then_some(7),
        }
    }

    fn topic(name: &str, internal: bool, partitions: Vec<PartitionInfo>) -> TopicInfo {
        TopicInfo {
            name: name.to_string(),
            topic_id: None,
            internal,
            replication_factor: 3,
            partitions,
        }
    }

    fn cluster(shrinks: u64, expands: u64) -> ClusterInfo {
        ClusterInfo {
            cluster_id: "c".into(),
            node_id: 1,
            controller_id: 1,
            brokers: Vec::new(),
            version: "test".into(),
            started_at_ms: 0,
            quorum: None,
            isr_changes: IsrChangeTotals { shrinks, expands },
        }
    }

    #[test]
    fn isr_size_lag_and_under_replicated_partitions_are_per_role() {
        let topics = vec![topic(
            "orders",
            false,
            vec![
                partition(0, true, &[1, 2, 3], &[(2, 0), (3, 0)]),
                partition(1, true, &[1, 2], &[(2, 0), (3, 40)]),
                partition(2, false, &[], &[]),
                partition(3, true, &[1], &[(2, 5), (3, 5)]),
            ],
        )];
        let mut out = String::new();
        render_replication(&mut out, Some(&cluster(3, 2)), &topics);
        for line in [
            "# TYPE streamforge_under_replicated_partitions gauge\n",
            "streamforge_under_replicated_partitions 2\n",
            "# TYPE streamforge_under_min_isr_partitions gauge\n",
            "streamforge_under_min_isr_partitions 1\n",
            "streamforge_partition_isr_size{topic=\"orders\",partition=\"0\"} 3\n",
            "streamforge_partition_isr_size{topic=\"orders\",partition=\"1\"} 2\n",
            "streamforge_replica_lag_messages{topic=\"orders\",partition=\"1\",follower=\"3\"} 40\n",
            "streamforge_replica_lag_messages{topic=\"orders\",partition=\"0\",follower=\"2\"} 0\n",
            "streamforge_replica_fetcher_lag{topic=\"orders\",partition=\"2\"} 7\n",
            "# TYPE streamforge_partition_under_min_isr gauge\n",
            "streamforge_partition_under_replicated{topic=\"orders\",partition=\"0\"} 0\n",
            "streamforge_partition_under_replicated{topic=\"orders\",partition=\"1\"} 1\n",
            "streamforge_partition_under_replicated{topic=\"orders\",partition=\"3\"} 1\n",
            "streamforge_partition_under_min_isr{topic=\"orders\",partition=\"0\"} 0\n",
            "streamforge_partition_under_min_isr{topic=\"orders\",partition=\"1\"} 0\n",
            "streamforge_partition_under_min_isr{topic=\"orders\",partition=\"3\"} 1\n",
            "streamforge_partition_at_min_isr{topic=\"orders\",partition=\"0\"} 0\n",
            "streamforge_partition_at_min_isr{topic=\"orders\",partition=\"1\"} 1\n",
            "streamforge_partition_at_min_isr{topic=\"orders\",partition=\"3\"} 0\n",
            "# TYPE streamforge_isr_shrinks_total counter\n",
            "streamforge_isr_shrinks_total 3\n",
            "streamforge_isr_expands_total 2\n",
        ] {
            assert!(out.contains(line), "{line} missing in\n{out}");
        }
        // A follower has no ISR size here (its leader reports it); a leader no fetcher lag.
        assert!(!out.contains("streamforge_partition_isr_size{topic=\"orders\",partition=\"2\"}"));
        assert!(!out.contains("streamforge_replica_fetcher_lag{topic=\"orders\",partition=\"0\"}"));
        // Kafka's per-partition flags: only where this broker leads.
        for family in ["under_replicated", "under_min_isr", "at_min_isr"] {
            let series =
                format!("streamforge_partition_{family}{{topic=\"orders\",partition=\"2\"}}");
            assert!(!out.contains(&series), "{series} on a follower");
        }
    }

    #[test]
    fn an_internal_topic_is_one_series_and_every_family_is_bounded() {
        let offsets = (0..50)
            .map(|i| {
                partition(
                    i,
                    true,
                    if i == 7 { &[1] } else { &[1, 2, 3] },
                    &[(2, i as i64)],
                )
            })
            .collect();
        let many = (0..REPLICATION_SERIES_MAX as i32 + 5)
            .map(|i| partition(i, true, &[1, 2, 3], &[]))
            .collect();
        let topics = vec![
            topic("__consumer_offsets", true, offsets),
            topic("wide", false, many),
        ];
        let mut out = String::new();
        render_replication(&mut out, None, &topics);
        let isr =
            "streamforge_partition_isr_size{topic=\"__consumer_offsets\",partition=\"all\"} 1\n";
        assert!(out.contains(isr), "the smallest ISR: {isr}");
        let lag = "streamforge_replica_lag_messages{topic=\"__consumer_offsets\",partition=\"all\",follower=\"2\"} 49\n";
        assert!(out.contains(lag), "the largest lag: {lag}");
        let flagged = "streamforge_partition_under_min_isr{topic=\"__consumer_offsets\",partition=\"all\"} 1\n";
        assert!(out.contains(flagged), "any partition flagged: {flagged}");
        assert_eq!(out.matches("{topic=\"__consumer_offsets\"").count(), 5);
        let isr_series = out
            .lines()
            .filter(|l| l.starts_with("streamforge_partition_isr_size{"))
            .count();
        assert_eq!(isr_series, REPLICATION_SERIES_MAX);
        assert!(out.contains("streamforge_under_replicated_partitions 1\n"));
        assert!(
            out.contains("streamforge_isr_shrinks_total 0\n"),
            "0 without a cluster view"
        );
    }
}

//! Replication quotas (KIP-73), as Kafka's `ReplicationQuotaManager`: what
//! `kafka-reassign-partitions --execute --throttle <bytes/s>` sets and `--verify` removes.
//!
//! - The broker configs `leader.replication.throttled.rate` and
//!   `follower.replication.throttled.rate` (dynamic, this broker's value or else the
//!   cluster-wide one; unset = unlimited) bound the bytes per second of throttled replicas.
//! - The topic configs `leader.replication.throttled.replicas` and
//!   `follower.replication.throttled.replicas` (`*`, or `partition:broker` pairs) name the
//!   throttled replicas; a broker keeps the partitions whose pair names its own id. The tool
//!   lists the replicas a partition moves away from as leader throttles and the ones it moves
//!   to as follower throttles.
//! - Leader side (the Fetch handler): a follower's fetch of a throttled partition gets no
//!   records while the leader quota is exceeded, unless that follower is in the ISR (Kafka's
//!   `shouldLeaderThrottle`: throttling an in-sync replica would thrash the ISR). The response
//!   is not delayed. The records sent for throttled partitions, in sync or not, are recorded.
//! - Follower side (the fetcher): a throttled partition that is not caught up (its lag to the
//!   leader's high watermark is not known to be 0) is left out of the Fetch while the
//!   follower quota is exceeded; the records received for throttled partitions are recorded.
//!
//! The rate is Kafka's `SimpleRate` over `replication.quota.window.num` (11) windows of
//! `replication.quota.window.size.seconds` (1 s); the quota is exceeded when the rate is
//! above the bound. [`ReplicationQuota`] is sans-io (time passed in); [`ReplicationQuotas`]
//! holds one per side behind a lock, with the broker's clock.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;
use streamforge_protocol::clock::SharedClock;

use super::rate::{Rate, RateConfig};

pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";
/// Kafka's `QUOTA_BYTES_PER_SECOND_DEFAULT` (`Long.MAX_VALUE`): no throttle.
pub const RATE_UNLIMITED: i64 = i64::MAX;
/// `replication.quota.window.num` (Kafka's default).
pub const REPLICATION_QUOTA_WINDOW_NUM: usize = 11;
/// `replication.quota.window.size.seconds` (Kafka's default).
pub const REPLICATION_QUOTA_WINDOW_SIZE_SECONDS: u64 = 1;
/// Bytes of throttled replicas recorded, by side (`leader`, `follower`): Kafka's
/// `LeaderReplication` / `FollowerReplication` byte-rate sensors, as a counter.
pub const THROTTLED_BYTES_METRIC: &str = "streamforge_replication_throttled_bytes_total";

/// Which replicas of a topic a side throttles on this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Throttled {
    /// `*`: every partition.
    All,
    /// The partitions whose `partition:broker` pair names this broker.
    Partitions(BTreeSet<i32>),
}

impl Throttled {
    fn contains(&self, partition: i32) -> bool {
        match self {
            Throttled::All => true,
            Throttled::Partitions(p) => p.contains(&partition),
        }
    }
}

/// Kafka's `ThrottledReplicaListValidator`: `*`, or a comma-separated list of
/// `partitionId:brokerId` (an empty list is allowed).
pub fn validate_throttled_replicas(name: &str, value: &str) -> Result<(), String> {
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    let pair = |s: &str| {
        s.is_empty()
            || s.split_once(':').is_some_and(|(p, b)| {
                let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
                digits(p) && digits(b)
            })
    };
    if items.concat() == "*" || items.iter().all(|s| pair(s)) {
        return Ok(());
    }
    Err(format!(
        "Invalid value {value} for configuration {name}: {name} must be the literal '*' or a \
         list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    ))
}

/// The partitions a throttled-replicas list names for `broker_id` (Kafka's
/// `parseThrottledPartitions`); `None` when the value is empty (nothing throttled). The value
/// must be valid ([`validate_throttled_replicas`]); numbers that do not parse are skipped.
pub fn parse_throttled_replicas(value: &str, broker_id: i32) -> Option<Throttled> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value == "*" {
        return Some(Throttled::All);
    }
    let partitions = value
        .split(',')
        .filter_map(|item| item.trim().split_once(':'))
        .filter(|(_, b)| b.trim().parse::<i32>() == Ok(broker_id))
        .filter_map(|(p, _)| p.trim().parse::<i32>().ok())
        .collect();
    Some(Throttled::Partitions(partitions))
}

/// One side's quota: throttled replicas by topic, the bound, the measured rate. Sans-io.
#[derive(Debug)]
pub struct ReplicationQuota {
    throttled: HashMap<String, Throttled>,
    /// Bytes per second; `None` = unlimited (never exceeded).
    bound: Option<f64>,
    rate: Rate,
    cfg: RateConfig,
}

impl ReplicationQuota {
    pub fn new(cfg: RateConfig) -> ReplicationQuota {
        ReplicationQuota {
            throttled: HashMap::new(),
            bound: None,
            rate: Rate::new(),
            cfg,
        }
    }

    /// Kafka's `updateQuota`: the bound in bytes per second (`RATE_UNLIMITED` = none).
    pub fn set_rate(&mut self, bytes_per_second: i64) {
        self.bound = (bytes_per_second != RATE_UNLIMITED).then_some(bytes_per_second.max(0) as f64);
    }

    /// Kafka's `markThrottled` / `removeThrottle`: the topic's throttled replicas here.
    pub fn set_throttled(&mut self, topic: &str, throttled: Option<Throttled>) {
        match throttled {
            Some(t) => {
                self.throttled.insert(topic.to_string(), t);
            }
            None => {
                self.throttled.remove(topic);
            }
        }
    }

    /// Is `topic`-`partition` throttled by this side (whatever the rate)?
    pub fn is_throttled(&self, topic: &str, partition: i32) -> bool {
        !self.throttled.is_empty()
            && self
                .throttled
                .get(topic)
                .is_some_and(|t| t.contains(partition))
    }

    /// Kafka's `isQuotaExceeded`: the rate is above the bound.
    pub fn is_exceeded(&mut self, now_ms: i64) -> bool {
        match self.bound {
            Some(bound) => self.rate.measure_simple(self.cfg, now_ms) > bound,
            None => false,
        }
    }

    /// Kafka's `record`: add bytes, whether or not the quota is exceeded.
    pub fn record(&mut self, bytes: u64, now_ms: i64) {
        self.rate.record(self.cfg, bytes as f64, now_ms);
    }

    /// The measured rate (bytes per second).
    pub fn measured(&mut self, now_ms: i64) -> f64 {
        self.rate.measure_simple(self.cfg, now_ms)
    }
}

/// Which side of replication a quota bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Leader,
    Follower,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Leader => "leader",
            Side::Follower => "follower",
        }
    }
}

/// The leader and follower quotas of one broker.
pub struct ReplicationQuotas {
    node_id: i32,
    leader: Mutex<ReplicationQuota>,
    follower: Mutex<ReplicationQuota>,
    clock: SharedClock,
}

impl ReplicationQuotas {
    pub fn new(node_id: i32, cfg: RateConfig, clock: SharedClock) -> ReplicationQuotas {
        ReplicationQuotas {
            node_id,
            leader: Mutex::new(ReplicationQuota::new(cfg)),
            follower: Mutex::new(ReplicationQuota::new(cfg)),
            clock,
        }
    }

    fn side(&self, side: Side) -> &Mutex<ReplicationQuota> {
        match side {
            Side::Leader => &self.leader,
            Side::Follower => &self.follower,
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.monotonic().as_millis() as i64
    }

    /// The rates in force: `effective(name)` is the dynamic value of a broker config (this
    /// broker's, else the cluster-wide one), as Kafka's `BrokerConfigHandler` reads them.
    pub fn apply_broker_configs<'a>(&self, effective: impl Fn(&str) -> Option<&'a str>) {
        for (side, name) in [(Side::Leader, LEADER_RATE), (Side::Follower, FOLLOWER_RATE)] {
            let rate = effective(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(RATE_UNLIMITED);
            self.side(side).lock().set_rate(rate);
        }
    }

    /// A topic's configs (its overrides; none when it was deleted) name its throttled replicas.
    pub fn apply_topic_configs(
        &self,
        topic: &str,
        configs: Option<&std::collections::BTreeMap<String, String>>,
    ) {
        for (side, name) in [
            (Side::Leader, LEADER_REPLICAS),
            (Side::Follower, FOLLOWER_REPLICAS),
        ] {
            let throttled = configs
                .and_then(|c| c.get(name))
                .and_then(|v| parse_throttled_replicas(v, self.node_id));
            self.side(side).lock().set_throttled(topic, throttled);
        }
    }

    pub fn is_throttled(&self, side: Side, topic: &str, partition: i32) -> bool {
        self.side(side).lock().is_throttled(topic, partition)
    }

    pub fn is_exceeded(&self, side: Side) -> bool {
        let now_ms = self.now_ms();
        self.side(side).lock().is_exceeded(now_ms)
    }

    /// Record `bytes` of throttled replicas on `side` (nothing for 0).
    pub fn record(&self, side: Side, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let now_ms = self.now_ms();
        self.side(side).lock().record(bytes, now_ms);
        metrics::counter!(THROTTLED_BYTES_METRIC, "side" => side.label()).increment(bytes);
    }

    /// The measured rate of `side` (bytes per second).
    pub fn measured(&self, side: Side) -> f64 {
        let now_ms = self.now_ms();
        self.side(side).lock().measured(now_ms)
    }
}

/// The replication quotas' windows (Kafka's defaults).
pub fn rate_config() -> RateConfig {
    RateConfig::new(
        REPLICATION_QUOTA_WINDOW_NUM,
        REPLICATION_QUOTA_WINDOW_SIZE_SECONDS,
    )
    .expect("Kafka's defaults are valid")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use streamforge_protocol::clock::{Clock, ManualClock};

    use super::*;

    #[test]
    fn the_lists_are_validated_as_kafka_does() {
        for ok in ["", "*", " * ", "0:1", "0:1,1:2", " 0:1 , 1:2 ", "0:1,"] {
            assert!(
                validate_throttled_replicas(LEADER_REPLICAS, ok).is_ok(),
                "{ok}"
            );
        }
        for bad in ["x", "0", "0:", ":1", "0:1:2", "*,0:1", "-1:2", "0:b"] {
            let e = validate_throttled_replicas(LEADER_REPLICAS, bad).unwrap_err();
            assert!(e.contains("must be the literal '*'"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_broker_keeps_the_partitions_its_id_is_paired_with() {
        assert_eq!(parse_throttled_replicas("", 1), None);
        assert_eq!(parse_throttled_replicas("*", 1), Some(Throttled::All));
        let mine = parse_throttled_replicas("0:1,0:2,1:2,3:1", 1).unwrap();
        assert_eq!(mine, Throttled::Partitions(BTreeSet::from([0, 3])));
        // Listed, but not for this broker: throttles nothing here.
        let none = parse_throttled_replicas("0:2", 1).unwrap();
        assert!(!none.contains(0));
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn topic_configs_mark_and_unmark_each_side() {
        let clock = ManualClock::new(0);
        let q = ReplicationQuotas::new(3, rate_config(), clock);
        q.apply_topic_configs(
            "t",
            Some(&configs(&[
                (LEADER_REPLICAS, "0:1"),
                (FOLLOWER_REPLICAS, "0:3,1:3"),
            ])),
        );
        assert!(!q.is_throttled(Side::Leader, "t", 0));
        assert!(q.is_throttled(Side::Follower, "t", 0));
        assert!(q.is_throttled(Side::Follower, "t", 1));
        assert!(!q.is_throttled(Side::Follower, "t", 2));
        assert!(!q.is_throttled(Side::Follower, "other", 0));
        // --verify deletes the configs: nothing is throttled any more.
        q.apply_topic_configs("t", Some(&BTreeMap::new()));
        assert!(!q.is_throttled(Side::Follower, "t", 0));
        q.apply_topic_configs("t", Some(&configs(&[(LEADER_REPLICAS, "*")])));
        assert!(q.is_throttled(Side::Leader, "t", 7));
        q.apply_topic_configs("t", None);
        assert!(!q.is_throttled(Side::Leader, "t", 7));
    }

    #[test]
    fn the_brokers_value_wins_over_the_cluster_default_and_unset_is_unlimited() {
        let clock = ManualClock::new(0);
        let q = ReplicationQuotas::new(1, rate_config(), clock);
        q.record(Side::Leader, 10_000_000);
        assert!(!q.is_exceeded(Side::Leader), "no rate set: unlimited");
        q.apply_broker_configs(|name| (name == LEADER_RATE).then_some("1000"));
        assert!(q.is_exceeded(Side::Leader));
        assert!(!q.is_exceeded(Side::Follower));
        q.apply_broker_configs(|_| None);
        assert!(!q.is_exceeded(Side::Leader));
    }

    /// A side that sends a fetch's worth whenever its quota is not exceeded (as the leader and
    /// the fetcher do), under a manual clock: it moves `total` bytes in about
    /// `(total - first fetch) / rate` seconds, and the rate it keeps is the bound.
    #[test]
    fn a_throttled_copy_takes_its_bytes_over_the_rate() {
        let cfg = rate_config();
        let clock = ManualClock::new(0);
        let now = || clock.monotonic().as_millis() as i64;
        let mut q = ReplicationQuota::new(cfg);
        q.set_rate(1_000_000);
        let (fetch, total) = (100_000u64, 5_000_000u64);
        let mut copied = 0u64;
        while copied < total {
            if !q.is_exceeded(now()) {
                q.record(fetch, now());
                copied += fetch;
            }
            // One fetch round trip (the leader answers an exceeded quota at once, empty).
            clock.advance(Duration::from_millis(10));
        }
        let took_s = now() as f64 / 1000.0;
        // The last fetch starts once (total - fetch) / rate seconds have passed.
        let least = (total - fetch) as f64 / 1e6;
        assert!(took_s >= least && took_s < least + 0.1, "{took_s}");
        // Unlimited, the quota is never exceeded.
        let mut free = ReplicationQuota::new(cfg);
        free.record(total, 0);
        assert!(!free.is_exceeded(0));
    }

    #[test]
    fn the_rate_is_measured_over_the_windows_kept() {
        let cfg = RateConfig::new(3, 1).unwrap();
        let mut q = ReplicationQuota::new(cfg);
        q.set_rate(100);
        q.record(250, 0);
        // 250 over one window: above 100/s.
        assert!(q.is_exceeded(500));
        // 250 over 2.5 s: 100/s, not above.
        assert!(!q.is_exceeded(2_500));
        // The window expires after 3 s: nothing is left.
        assert_eq!(q.measured(3_000), 0.0);
    }
}

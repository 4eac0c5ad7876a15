//! KIP-392: which replica a consumer should fetch from (Kafka's `replica.selector.class`).
//! Sans-io: the leader passes what it knows of its replicas, the selector names one.

use super::replica::BrokerId;

/// `replica.selector.class`: Kafka's default is none, so consumers fetch from the leader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplicaSelectorKind {
    /// No selector: the leader serves every consumer (`preferred_read_replica` = -1).
    #[default]
    Leader,
    /// Kafka's `RackAwareReplicaSelector`: a replica in the consumer's `client.rack`.
    RackAware,
}

/// Kafka's class name for the rack-aware selector, accepted as a value too.
const RACK_AWARE_CLASS: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

impl std::str::FromStr for ReplicaSelectorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "leader" | "" => Ok(ReplicaSelectorKind::Leader),
            "rack-aware" | RACK_AWARE_CLASS => Ok(ReplicaSelectorKind::RackAware),
            other => Err(format!(
                "unknown replica selector {other:?} (rack-aware, leader or {RACK_AWARE_CLASS})"
            )),
        }
    }
}

/// One replica as the selector sees it (Kafka's `ReplicaView`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaCandidate {
    pub id: BrokerId,
    /// Its `broker.rack` (`None` when unset or unknown).
    pub rack: Option<String>,
    pub log_end_offset: i64,
    /// How long ago it was last caught up with the leader (0 for the leader).
    pub time_since_caught_up_ms: i64,
}

impl ReplicaSelectorKind {
    /// The replica a consumer in `client_rack` should read from, or `None` for the leader
    /// (Kafka sends no preferred replica then). `followers` are the in-sync followers that have
    /// the fetch offset. The rack-aware rule, as Kafka's: no client rack, or no replica in it,
    /// is the leader; the leader when it is in the client's rack; otherwise the most caught-up
    /// replica of that rack (highest log end offset, then the most recently caught up).
    pub fn select(
        self,
        client_rack: &str,
        leader: &ReplicaCandidate,
        followers: &[ReplicaCandidate],
    ) -> Option<BrokerId> {
        if self == ReplicaSelectorKind::Leader || client_rack.is_empty() {
            return None;
        }
        let in_rack = |r: &&ReplicaCandidate| r.rack.as_deref() == Some(client_rack);
        if in_rack(&leader) {
            return None;
        }
        followers
            .iter()
            .filter(in_rack)
            .max_by(|a, b| {
                a.log_end_offset
                    .cmp(&b.log_end_offset)
                    .then(b.time_since_caught_up_ms.cmp(&a.time_since_caught_up_ms))
            })
            .map(|r| r.id)
            .filter(|id| *id != leader.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: BrokerId, rack: &str, leo: i64, since_ms: i64) -> ReplicaCandidate {
        ReplicaCandidate {
            id,
            rack: (!rack.is_empty()).then(|| rack.to_string()),
            log_end_offset: leo,
            time_since_caught_up_ms: since_ms,
        }
    }

    #[test]
    fn the_leader_selector_never_names_a_replica() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "b", 10, 0)];
        assert_eq!(
            ReplicaSelectorKind::Leader.select("b", &leader, &followers),
            None
        );
    }

    #[test]
    fn a_follower_in_the_clients_rack_is_preferred() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "b", 10, 0), replica(3, "c", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("b", &leader, &followers), Some(2));
        assert_eq!(s.select("c", &leader, &followers), Some(3));
    }

    #[test]
    fn the_leader_wins_in_its_own_rack_and_without_a_match() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "a", 10, 0), replica(3, "b", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("a", &leader, &followers), None, "leader's rack");
        assert_eq!(s.select("z", &leader, &followers), None, "no replica there");
        assert_eq!(s.select("", &leader, &followers), None, "no client rack");
        let unracked = [replica(2, "", 10, 0)];
        assert_eq!(s.select("b", &leader, &unracked), None, "no broker.rack");
    }

    #[test]
    fn among_followers_of_the_rack_the_most_caught_up_wins() {
        let leader = replica(1, "a", 20, 0);
        let s = ReplicaSelectorKind::RackAware;
        let by_leo = [replica(2, "b", 15, 0), replica(3, "b", 18, 50)];
        assert_eq!(s.select("b", &leader, &by_leo), Some(3), "higher log end");
        let by_time = [replica(2, "b", 18, 400), replica(3, "b", 18, 10)];
        assert_eq!(s.select("b", &leader, &by_time), Some(3), "caught up later");
    }

    #[test]
    fn racks_match_exactly() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "Rack-B", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("rack-b", &leader, &followers), None);
        assert_eq!(s.select("Rack-B", &leader, &followers), Some(2));
    }

    #[test]
    fn kafkas_class_name_and_our_names_parse() {
        let parse = |s: &str| s.parse::<ReplicaSelectorKind>();
        assert_eq!(parse("rack-aware"), Ok(ReplicaSelectorKind::RackAware));
        assert_eq!(parse(RACK_AWARE_CLASS), Ok(ReplicaSelectorKind::RackAware));
        assert_eq!(parse("leader"), Ok(ReplicaSelectorKind::Leader));
        assert!(parse("closest").is_err());
    }
}

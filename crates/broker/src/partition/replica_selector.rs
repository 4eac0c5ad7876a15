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
    /// The first offset it can serve (its log start, remote tier included); -1 when it has
    /// not said (a follower that sent no `log_start_offset`), taken as "from the start".
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// How long ago it was last caught up with the leader (0 for the leader).
    pub time_since_caught_up_ms: i64,
}

impl ReplicaCandidate {
    /// Kafka's `findPreferredReadReplica` filter: the replica's log holds `fetch_offset`
    /// (log start <= offset <= log end). A replica asked below its log start or past its log
    /// end answers OFFSET_OUT_OF_RANGE, which sends the consumer back to the leader: naming it
    /// would only bounce the consumer.
    pub fn has_offset(&self, fetch_offset: i64) -> bool {
        self.log_start_offset <= fetch_offset && fetch_offset <= self.log_end_offset
    }
}

impl ReplicaSelectorKind {
    /// The replica a consumer in `client_rack` fetching from `fetch_offset` should read from,
    /// or `None` for the leader (Kafka sends no preferred replica then). `followers` are the
    /// in-sync followers; only those whose log holds the fetch offset are candidates. The
    /// rack-aware rule, as Kafka's: no client rack, or no candidate in it, is the leader; the
    /// leader when it is in the client's rack; otherwise the most caught-up candidate of that
    /// rack (highest log end offset, then the most recently caught up).
    pub fn select(
        self,
        client_rack: &str,
        fetch_offset: i64,
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
            .filter(|r| r.has_offset(fetch_offset))
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
            log_start_offset: 0,
            log_end_offset: leo,
            time_since_caught_up_ms: since_ms,
        }
    }

    #[test]
    fn the_leader_selector_never_names_a_replica() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "b", 10, 0)];
        assert_eq!(
            ReplicaSelectorKind::Leader.select("b", 5, &leader, &followers),
            None
        );
    }

    #[test]
    fn a_follower_in_the_clients_rack_is_preferred() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "b", 10, 0), replica(3, "c", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("b", 5, &leader, &followers), Some(2));
        assert_eq!(s.select("c", 5, &leader, &followers), Some(3));
    }

    #[test]
    fn the_leader_wins_in_its_own_rack_and_without_a_match() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "a", 10, 0), replica(3, "b", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("a", 5, &leader, &followers), None, "leader's rack");
        assert_eq!(
            s.select("z", 5, &leader, &followers),
            None,
            "no replica there"
        );
        assert_eq!(s.select("", 5, &leader, &followers), None, "no client rack");
        let unracked = [replica(2, "", 10, 0)];
        assert_eq!(s.select("b", 5, &leader, &unracked), None, "no broker.rack");
    }

    #[test]
    fn among_followers_of_the_rack_the_most_caught_up_wins() {
        let leader = replica(1, "a", 20, 0);
        let s = ReplicaSelectorKind::RackAware;
        let by_leo = [replica(2, "b", 15, 0), replica(3, "b", 18, 50)];
        assert_eq!(
            s.select("b", 5, &leader, &by_leo),
            Some(3),
            "higher log end"
        );
        let by_time = [replica(2, "b", 18, 400), replica(3, "b", 18, 10)];
        assert_eq!(
            s.select("b", 5, &leader, &by_time),
            Some(3),
            "caught up later"
        );
    }

    #[test]
    fn racks_match_exactly() {
        let leader = replica(1, "a", 10, 0);
        let followers = [replica(2, "Rack-B", 10, 0)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("rack-b", 5, &leader, &followers), None);
        assert_eq!(s.select("Rack-B", 5, &leader, &followers), Some(2));
    }

    fn ranged(id: BrokerId, rack: &str, start: i64, end: i64) -> ReplicaCandidate {
        ReplicaCandidate {
            log_start_offset: start,
            ..replica(id, rack, end, 0)
        }
    }

    #[test]
    fn a_follower_whose_log_does_not_hold_the_fetch_offset_is_not_named() {
        let leader = ranged(1, "a", 0, 100);
        let s = ReplicaSelectorKind::RackAware;
        // Its log starts after the offset (retention or DeleteRecords ran there first).
        let late_start = [ranged(2, "b", 40, 100)];
        assert_eq!(
            s.select("b", 39, &leader, &late_start),
            None,
            "below log start"
        );
        assert_eq!(
            s.select("b", 40, &leader, &late_start),
            Some(2),
            "at log start"
        );
        // It has not got the offset yet.
        let behind = [ranged(2, "b", 0, 60)];
        assert_eq!(s.select("b", 60, &leader, &behind), Some(2), "at log end");
        assert_eq!(s.select("b", 61, &leader, &behind), None, "past log end");
        // Another follower of the rack that holds it is named instead.
        let two = [ranged(2, "b", 40, 100), ranged(3, "b", 0, 90)];
        assert_eq!(s.select("b", 10, &leader, &two), Some(3));
        assert_eq!(s.select("b", 95, &leader, &two), Some(2));
    }

    #[test]
    fn an_unknown_log_start_holds_every_offset_up_to_the_log_end() {
        let leader = ranged(1, "a", 0, 100);
        let unknown = [ranged(2, "b", -1, 100)];
        let s = ReplicaSelectorKind::RackAware;
        assert_eq!(s.select("b", 0, &leader, &unknown), Some(2));
        assert!(ranged(2, "b", -1, 100).has_offset(0));
        assert!(!ranged(2, "b", -1, 100).has_offset(101));
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

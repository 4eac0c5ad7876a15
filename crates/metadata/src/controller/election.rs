//! Partition leadership: elections (preferred replica first, only from the ISR unless unclean
//! election is enabled for the topic), ElectLeaders, and ISR changes proposed by leaders
//! (AlterPartition). The periodic rebalance is in `rebalance.rs`.

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{AlterPartition, Controller, Effects, ElectionType, Reply};
use crate::image::PartitionState;
use crate::records::{BrokerId, NO_LEADER, PartitionChange, Record};

/// A change to emit for one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Change {
    pub leader: Option<BrokerId>,
    pub isr: Option<Vec<BrokerId>>,
}

impl Controller {
    /// The first replica, in assignment order (so the preferred one first), that is in `isr`,
    /// unfenced and not `excluded`.
    fn clean_leader(
        &self,
        p: &PartitionState,
        isr: &[BrokerId],
        excluded: BrokerId,
    ) -> Option<BrokerId> {
        p.replicas
            .iter()
            .copied()
            .find(|&r| r != excluded && isr.contains(&r) && self.image.is_unfenced(r))
    }

    /// The first unfenced replica outside `excluded`: only used when the topic allows unclean
    /// election, and the ISR then restarts as just that replica.
    fn unclean_leader(&self, p: &PartitionState, excluded: BrokerId) -> Option<BrokerId> {
        p.replicas
            .iter()
            .copied()
            .find(|&r| r != excluded && self.image.is_unfenced(r))
    }

    /// The changes that take `id` out of every ISR and leadership.
    pub(super) fn changes_without(&self, id: BrokerId) -> Vec<(Uuid, i32, Change)> {
        let mut out = Vec::new();
        for topic in self.image.topics() {
            let unclean = self.unclean_allowed(&topic.name);
            for (&partition, p) in &topic.partitions {
                if p.leader != id && !p.isr.contains(&id) {
                    continue;
                }
                let mut isr: Vec<BrokerId> = p.isr.iter().copied().filter(|&r| r != id).collect();
                if isr.is_empty() {
                    isr = p.isr.clone();
                }
                let mut leader = p.leader;
                if p.leader == id {
                    leader = match self.clean_leader(p, &isr, id) {
                        Some(l) => l,
                        None if unclean => match self.unclean_leader(p, id) {
                            Some(l) => {
                                isr = vec![l];
                                l
                            }
                            None => NO_LEADER,
                        },
                        None => NO_LEADER,
                    };
                }
                let change = Change {
                    leader: (leader != p.leader).then_some(leader),
                    isr: (isr != p.isr).then_some(isr),
                };
                if change != Change::default() {
                    out.push((topic.id, partition, change));
                }
            }
        }
        out
    }

    pub(super) fn emit_partition_change(
        &mut self,
        topic_id: Uuid,
        partition: i32,
        change: Change,
        fx: &mut Effects,
    ) {
        let record = PartitionChange {
            topic_id,
            partition,
            leader: change.leader,
            isr: change.isr,
            replicas: None,
        };
        self.emit(Record::PartitionChange(record), fx);
    }

    /// Elect a leader for every partition without one, where someone is eligible.
    pub(super) fn elect_leaderless(&mut self, fx: &mut Effects) {
        let mut changes = Vec::new();
        for topic in self.image.topics() {
            for (&partition, p) in &topic.partitions {
                if p.leader != NO_LEADER {
                    continue;
                }
                let unclean = self.unclean_allowed(&topic.name);
                if let Some(change) = self.election(&topic.name, p, ElectionType::Unclean, unclean)
                {
                    changes.push((topic.id, partition, change));
                }
            }
        }
        for (topic_id, partition, change) in changes {
            self.emit_partition_change(topic_id, partition, change, fx);
        }
    }

    /// The change an election of `kind` makes, or `None` if nobody eligible exists. `Unclean`
    /// tries the ISR first and goes outside it only when `unclean_ok` (the topic's
    /// `unclean.leader.election.enable`, or an explicit unclean ElectLeaders request).
    fn election(
        &self,
        topic: &str,
        p: &PartitionState,
        kind: ElectionType,
        unclean_ok: bool,
    ) -> Option<Change> {
        let leader_change = |l: BrokerId| (l != p.leader).then_some(l);
        match kind {
            ElectionType::Preferred => {
                let preferred = p.preferred_leader();
                let eligible = p.isr.contains(&preferred) && self.image.is_unfenced(preferred);
                eligible.then(|| Change {
                    leader: leader_change(preferred),
                    isr: None,
                })
            }
            ElectionType::Unclean => {
                if let Some(l) = self.clean_leader(p, &p.isr, NO_LEADER) {
                    return Some(Change {
                        leader: leader_change(l),
                        isr: None,
                    });
                }
                if !unclean_ok {
                    return None;
                }
                let l = self.unclean_leader(p, NO_LEADER)?;
                tracing::warn!(
                    topic,
                    leader = l,
                    "unclean leader election: data may be lost"
                );
                Some(Change {
                    leader: leader_change(l),
                    isr: Some(vec![l]),
                })
            }
        }
    }

    /// ElectLeaders: for named partitions, an answer each; for all (`None`), every answer but
    /// ELECTION_NOT_NEEDED, as Kafka does.
    pub(super) fn elect_leaders(
        &mut self,
        kind: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
        fx: &mut Effects,
    ) -> Reply {
        Reply::ElectLeaders(self.elect(kind, partitions, fx))
    }

    fn elect(
        &mut self,
        kind: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
        fx: &mut Effects,
    ) -> Vec<((String, i32), Result<BrokerId, ResponseError>)> {
        let all = partitions.is_none();
        let targets = partitions.unwrap_or_else(|| {
            self.image
                .topics()
                .flat_map(|t| t.partitions.keys().map(|&p| (t.name.clone(), p)))
                .collect()
        });
        let mut results = Vec::new();
        for (topic, partition) in targets {
            let result = self.elect_one(&topic, partition, kind, fx);
            // Electing all partitions, Kafka leaves out the ones that already have the leader.
            if !(all && result == Err(ResponseError::ElectionNotNeeded)) {
                results.push(((topic, partition), result));
            }
        }
        results
    }

    pub(super) fn elect_one(
        &mut self,
        topic: &str,
        partition: i32,
        kind: ElectionType,
        fx: &mut Effects,
    ) -> Result<BrokerId, ResponseError> {
        let t = self
            .image
            .topic_by_name(topic)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let topic_id = t.id;
        let p = t
            .partitions
            .get(&partition)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let needed = match kind {
            ElectionType::Preferred => p.leader != p.preferred_leader(),
            ElectionType::Unclean => p.leader == NO_LEADER,
        };
        if !needed {
            return Err(ResponseError::ElectionNotNeeded);
        }
        // An explicit unclean ElectLeaders is the operator accepting data loss, as in Kafka.
        let change = self.election(topic, p, kind, true).ok_or(match kind {
            ElectionType::Preferred => ResponseError::PreferredLeaderNotAvailable,
            ElectionType::Unclean => ResponseError::EligibleLeadersNotAvailable,
        })?;
        let leader = change.leader.unwrap_or(p.leader);
        self.emit_partition_change(topic_id, partition, change, fx);
        Ok(leader)
    }

    /// AlterPartition, checked in KRaft's order: broker epoch, leader epoch, leadership,
    /// partition epoch, then the new ISR itself.
    pub(super) fn alter_partition(&mut self, a: AlterPartition, fx: &mut Effects) -> Reply {
        let result = self.check_alter_partition(&a).map(|()| {
            // An ISR that now holds every target replica completes a reassignment.
            self.emit_isr_change(a.topic_id, a.partition, a.new_isr.clone(), fx);
            self.image
                .partition(a.topic_id, a.partition)
                .cloned()
                .unwrap_or_else(|| unreachable!("the partition was just changed"))
        });
        Reply::AlterPartition(result)
    }

    fn check_alter_partition(&self, a: &AlterPartition) -> Result<(), ResponseError> {
        self.check_broker_epoch(a.broker_id, a.broker_epoch)?;
        let topic = self
            .image
            .topic(a.topic_id)
            .ok_or(ResponseError::UnknownTopicId)?;
        let p = topic
            .partitions
            .get(&a.partition)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        // A newer epoch than ours means this controller is behind: let the leader find the
        // current one.
        if a.leader_epoch > p.leader_epoch || a.partition_epoch > p.partition_epoch {
            return Err(ResponseError::NotController);
        }
        if a.leader_epoch < p.leader_epoch {
            return Err(ResponseError::FencedLeaderEpoch);
        }
        if a.broker_id != p.leader {
            return Err(ResponseError::InvalidRequest);
        }
        if a.partition_epoch < p.partition_epoch {
            return Err(ResponseError::InvalidUpdateVersion);
        }
        // The ISR must be a duplicate-free subset of the replicas holding the leader ...
        let mut sorted = a.new_isr.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let outside = a.new_isr.iter().any(|r| !p.replicas.contains(r));
        if sorted.len() != a.new_isr.len() || outside || !a.new_isr.contains(&p.leader) {
            return Err(ResponseError::InvalidRequest);
        }
        // ... of registered, unfenced brokers.
        if a.new_isr.iter().any(|&r| !self.image.is_unfenced(r)) {
            return Err(ResponseError::IneligibleReplica);
        }
        Ok(())
    }
}

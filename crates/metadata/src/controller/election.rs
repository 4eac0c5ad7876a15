//! Partition leadership: elections (preferred replica first, only from the ISR unless unclean
//! election is enabled for the topic), ElectLeaders, and ISR changes proposed by leaders
//! (AlterPartition). The periodic rebalance is in `rebalance.rs`.

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::partition_change::{Change, Election, Target, plan};
use super::{AlterPartition, Controller, Effects, ElectionType, Reply};
use super::{MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTIONS_METRIC};
use crate::image::PartitionState;
use crate::records::{BrokerId, NO_LEADER, PartitionChange, PartitionElr, Record};

impl Controller {
    /// The topic's effective `min.insync.replicas`: its own value or the cluster default, at
    /// least 1 and at most the replica count (Kafka's `getTopicEffectiveMinIsr`).
    pub(super) fn min_isr(&self, topic: &str, p: &PartitionState) -> usize {
        let configured = self
            .image
            .topic_config(topic, MIN_INSYNC_REPLICAS)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(i64::from(self.config.min_insync_replicas));
        usize::try_from(configured)
            .unwrap_or(1)
            .clamp(1, p.replicas.len().max(1))
    }

    fn target(&self, topic: &str, p: &PartitionState, isr: Vec<BrokerId>) -> Target {
        let election = if self.unclean_allowed(topic) {
            Election::Unclean
        } else {
            Election::Online
        };
        Target {
            isr,
            election,
            min_isr: self.min_isr(topic, p),
            unclean_shutdown: None,
        }
    }

    /// The changes that take `id` out of every ISR and leadership (a fenced broker, or a
    /// controlled shutdown). Below min ISR it joins the ELR; the last member leaves the ISR too
    /// (KIP-966), and the partition keeps it as its last known leader.
    pub(super) fn changes_without(&self, id: BrokerId) -> Vec<(Uuid, i32, Change)> {
        self.changes_for(id, None)
    }

    /// The changes for a broker back from an unclean shutdown (no clean-shutdown marker with
    /// its last broker epoch): it may have lost records it had, so it leaves every ISR and ELR
    /// and leads nothing (Kafka's `handleBrokerUncleanShutdown`).
    pub(super) fn changes_after_unclean_shutdown(&self, id: BrokerId) -> Vec<(Uuid, i32, Change)> {
        self.changes_for(id, Some(id))
    }

    fn changes_for(
        &self,
        id: BrokerId,
        unclean_shutdown: Option<BrokerId>,
    ) -> Vec<(Uuid, i32, Change)> {
        let mut out = Vec::new();
        for topic in self.image.topics() {
            for (&partition, p) in &topic.partitions {
                let in_elr = unclean_shutdown.is_some() && p.elr.contains(&id);
                if p.leader != id && !p.isr.contains(&id) && !in_elr {
                    continue;
                }
                let isr = p.isr.iter().copied().filter(|&r| r != id).collect();
                let mut target = self.target(&topic.name, p, isr);
                target.unclean_shutdown = unclean_shutdown;
                let change = plan(p, &target, |r| r != id && self.image.is_unfenced(r));
                if !change.is_empty() {
                    out.push((topic.id, partition, change));
                }
            }
        }
        out
    }

    /// Emit `change` (a `PartitionChange`, then the `PartitionElr` when the ELR changes, in the
    /// one batch), and report an unclean election.
    pub(super) fn emit_partition_change(
        &mut self,
        topic_id: Uuid,
        partition: i32,
        change: Change,
        fx: &mut Effects,
    ) {
        if change.unclean {
            self.report_unclean_election(topic_id, partition, &change);
        }
        let record = PartitionChange {
            topic_id,
            partition,
            leader: change.leader,
            isr: change.isr,
            replicas: None,
        };
        self.emit(Record::PartitionChange(record), fx);
        if let Some((elr, last_known_elr)) = change.elr {
            let record = PartitionElr {
                topic_id,
                partition,
                elr,
                last_known_elr,
            };
            self.emit(Record::PartitionElr(record), fx);
        }
    }

    fn report_unclean_election(&mut self, topic_id: Uuid, partition: i32, change: &Change) {
        self.unclean_elections += 1;
        let topic = self.image.topic(topic_id).map(|t| t.name.clone());
        let topic = topic.unwrap_or_default();
        tracing::warn!(
            topic,
            partition,
            leader = change.leader.unwrap_or(NO_LEADER),
            "unclean leader election: the new leader was not in the ISR or ELR, records may be lost"
        );
        metrics::counter!(UNCLEAN_LEADER_ELECTIONS_METRIC, "topic" => topic).increment(1);
    }

    /// Elect a leader for every partition without one, where someone is eligible.
    pub(super) fn elect_leaderless(&mut self, fx: &mut Effects) {
        let mut changes = Vec::new();
        for topic in self.image.topics() {
            for (&partition, p) in &topic.partitions {
                if p.leader != NO_LEADER {
                    continue;
                }
                let target = self.target(&topic.name, p, p.isr.clone());
                let change = plan(p, &target, |r| self.image.is_unfenced(r));
                if change.leader.is_some() {
                    changes.push((topic.id, partition, change));
                }
            }
        }
        for (topic_id, partition, change) in changes {
            self.emit_partition_change(topic_id, partition, change, fx);
        }
    }

    /// The change an election of `kind` makes, or `None` if nobody eligible exists. `Unclean`
    /// tries the ISR, the ELR and the last known leader first, and goes further only when
    /// `unclean_ok` (the topic's `unclean.leader.election.enable`, or an explicit unclean
    /// ElectLeaders request).
    fn election(
        &self,
        topic: &str,
        p: &PartitionState,
        kind: ElectionType,
        unclean_ok: bool,
    ) -> Option<Change> {
        match kind {
            ElectionType::Preferred => {
                let preferred = p.preferred_leader();
                let eligible = p.isr.contains(&preferred) && self.image.is_unfenced(preferred);
                eligible.then(|| Change {
                    leader: (preferred != p.leader).then_some(preferred),
                    ..Change::default()
                })
            }
            ElectionType::Unclean => {
                let mut target = self.target(topic, p, p.isr.clone());
                if unclean_ok {
                    target.election = Election::Unclean;
                }
                let change = plan(p, &target, |r| self.image.is_unfenced(r));
                change.leader.filter(|&l| l != NO_LEADER).map(|_| change)
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
            // An ISR that now holds every target replica completes a reassignment; any other
            // ISR change goes through the KIP-966 rules.
            if !self.complete_reassignment(a.topic_id, a.partition, &a.new_isr, fx) {
                let change = self.isr_change(&a);
                self.emit_partition_change(a.topic_id, a.partition, change, fx);
            }
            self.image
                .partition(a.topic_id, a.partition)
                .cloned()
                .unwrap_or_else(|| unreachable!("the partition was just changed"))
        });
        Reply::AlterPartition(result)
    }

    /// The accepted ISR, with the ELR that follows from it (the leader is in the new ISR, so it
    /// stays). The partition epoch moves even when nothing else does, as in KRaft.
    fn isr_change(&self, a: &AlterPartition) -> Change {
        let topic = self.image.topic(a.topic_id);
        let found = topic.and_then(|t| Some((t.name.as_str(), t.partitions.get(&a.partition)?)));
        let Some((name, p)) = found else {
            unreachable!("checked by check_alter_partition")
        };
        let target = self.target(name, p, a.new_isr.clone());
        let mut change = plan(p, &target, |r| self.image.is_unfenced(r));
        change.isr = Some(a.new_isr.clone());
        change
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

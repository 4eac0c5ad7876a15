//! Partition reassignment (KIP-455), as KRaft does it (`ReplicationControlManager`,
//! `PartitionReassignmentReplicas`, `PartitionChangeBuilder`):
//!
//! 1. AlterPartitionReassignments with target replicas `T` on a partition with replicas `R`:
//!    the replicas become `T` then `R − T` (sorted), `adding = T − R`, `removing = R − T`
//!    (both sorted). The added replicas start outside the ISR: their brokers open the
//!    partition and follow the leader.
//! 2. When every replica of `T` is in the ISR (the leader's AlterPartition adds the caught-up
//!    ones), the reassignment completes in the same change: replicas `T`, the ISR without the
//!    removed replicas, a new leader (the first of `T` in the ISR) if the leader was removed.
//!    A replica leaving bumps the leader epoch even when the leader stays (image replay).
//!    A target already inside the ISR completes at once.
//! 3. Cancelling (`replicas: null`) restores `R − adding` and takes the added replicas out of
//!    the ISR; if nothing of the ISR would remain, only with unclean election allowed.
//!
//! Records: the `PartitionChange` (which bumps the partition epoch, and clears the lists when it
//! sets new replicas), then a `PartitionReassignment` record with the new lists, in one batch.

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{Controller, Effects, OngoingReassignment, ReassignPartition, Reply};
use crate::image::PartitionState;
use crate::records::{BrokerId, NO_LEADER, PartitionChange, PartitionReassignment, Record};

/// What a partition is to become: the targets of Kafka's `PartitionChangeBuilder`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    adding: Vec<BrokerId>,
    removing: Vec<BrokerId>,
    /// A cancel that had to put a replica outside the ISR back into it.
    unclean: bool,
}

impl Target {
    fn of(p: &PartitionState) -> Target {
        Target {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            unclean: false,
        }
    }

    /// Kafka's `maybeCompleteReassignment`: done once the ISR, without the removed replicas,
    /// is not empty and holds every remaining replica.
    fn completed(self) -> Target {
        if self.adding.is_empty() && self.removing.is_empty() {
            return self;
        }
        let kept = |ids: &[BrokerId]| -> Vec<BrokerId> {
            ids.iter()
                .copied()
                .filter(|r| !self.removing.contains(r))
                .collect()
        };
        let (replicas, isr) = (kept(&self.replicas), kept(&self.isr));
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return self;
        }
        Target {
            replicas,
            isr,
            adding: Vec::new(),
            removing: Vec::new(),
            unclean: self.unclean,
        }
    }
}

/// `a − b`, sorted (Kafka builds these lists from `TreeSet`s).
fn sorted_difference(a: &[BrokerId], b: &[BrokerId]) -> Vec<BrokerId> {
    let mut out: Vec<BrokerId> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

impl Controller {
    /// AlterPartitionReassignments: an answer per partition, all records in one batch.
    pub(super) fn alter_reassignments(
        &mut self,
        partitions: Vec<ReassignPartition>,
        allow_replication_factor_change: bool,
        fx: &mut Effects,
    ) -> Reply {
        let mut results = Vec::with_capacity(partitions.len());
        for r in partitions {
            let result = self.alter_reassignment(&r, allow_replication_factor_change, fx);
            if let Err(e) = result {
                tracing::info!(topic = %r.topic, partition = r.partition, error = ?e, "partition reassignment refused");
            }
            results.push(((r.topic, r.partition), result));
        }
        Reply::AlterPartitionReassignments(results)
    }

    fn alter_reassignment(
        &mut self,
        r: &ReassignPartition,
        allow_replication_factor_change: bool,
        fx: &mut Effects,
    ) -> Result<(), ResponseError> {
        let topic = self
            .image
            .topic_by_name(&r.topic)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let topic_id = topic.id;
        let p = topic
            .partitions
            .get(&r.partition)
            .ok_or(ResponseError::UnknownTopicOrPartition)?
            .clone();
        let target = match &r.replicas {
            None => self.revert(&r.topic, &p)?,
            Some(replicas) => {
                self.check_reassignment(&p, replicas, allow_replication_factor_change)?;
                let removing = sorted_difference(&p.replicas, replicas);
                let adding = sorted_difference(replicas, &p.replicas);
                let mut all = replicas.clone();
                all.extend(&removing);
                let target = Target {
                    replicas: all,
                    isr: p.isr.clone(),
                    adding,
                    removing,
                    unclean: false,
                };
                target.completed()
            }
        };
        self.emit_target(topic_id, r.partition, &p, target, fx);
        Ok(())
    }

    /// Kafka's `validateManualPartitionAssignment`: a non-empty list of registered brokers
    /// without duplicates (fenced brokers are allowed, as in Kafka: they join once unfenced);
    /// with KIP-860's flag off, the replication factor must stay.
    fn check_reassignment(
        &self,
        p: &PartitionState,
        target: &[BrokerId],
        allow_replication_factor_change: bool,
    ) -> Result<(), ResponseError> {
        let mut sorted = target.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let unknown = target.iter().any(|&r| self.image.broker(r).is_none());
        if target.is_empty() || sorted.len() != target.len() || unknown {
            return Err(ResponseError::InvalidReplicaAssignment);
        }
        if !allow_replication_factor_change && target.len() != p.original_replicas().len() {
            return Err(ResponseError::InvalidReplicationFactor);
        }
        Ok(())
    }

    /// Kafka's `PartitionReassignmentRevert`: the replicas before the reassignment, the ISR
    /// without the added replicas; an ISR left empty takes the first original replica, which
    /// is an unclean election and needs the topic to allow one.
    fn revert(&self, topic: &str, p: &PartitionState) -> Result<Target, ResponseError> {
        if !p.is_reassigning() {
            return Err(ResponseError::NoReassignmentInProgress);
        }
        let replicas = p.original_replicas();
        let mut isr: Vec<BrokerId> = p
            .isr
            .iter()
            .copied()
            .filter(|r| !p.adding_replicas.contains(r))
            .collect();
        let mut unclean = false;
        if isr.is_empty() {
            if !self.unclean_allowed(topic) {
                return Err(ResponseError::InvalidReplicaAssignment);
            }
            isr = replicas.first().copied().into_iter().collect();
            unclean = true;
        }
        Ok(Target {
            replicas,
            isr,
            adding: Vec::new(),
            removing: Vec::new(),
            unclean,
        })
    }

    /// An ISR change accepted from the leader (AlterPartition): the reassignment in progress
    /// completes when the ISR now holds every target replica. True when it did (the change is
    /// emitted); false leaves the ISR change to the caller.
    pub(super) fn complete_reassignment(
        &mut self,
        topic_id: Uuid,
        partition: i32,
        new_isr: &[BrokerId],
        fx: &mut Effects,
    ) -> bool {
        if let Some(p) = self.image.partition(topic_id, partition).cloned()
            && p.is_reassigning()
        {
            let mut target = Target::of(&p);
            target.isr = new_isr.to_vec();
            let target = target.completed();
            if target.adding.is_empty() && target.removing.is_empty() {
                self.emit_target(topic_id, partition, &p, target, fx);
                return true;
            }
        }
        false
    }

    /// Kafka's `electAnyLeader`: the current leader while it stays in the ISR and unfenced,
    /// else the first replica (target order) in the ISR and unfenced; a revert that put a
    /// replica back into an empty ISR may take any unfenced replica.
    fn leader_for(&self, old: &PartitionState, target: &mut Target) -> BrokerId {
        let eligible = |r: BrokerId| target.isr.contains(&r) && self.image.is_unfenced(r);
        if old.leader != NO_LEADER && eligible(old.leader) {
            return old.leader;
        }
        if let Some(l) = target.replicas.iter().copied().find(|&r| eligible(r)) {
            return l;
        }
        if target.unclean
            && let Some(l) = target
                .replicas
                .iter()
                .copied()
                .find(|&r| self.image.is_unfenced(r))
        {
            tracing::warn!(
                leader = l,
                "unclean leader election to cancel a reassignment"
            );
            target.isr = vec![l];
            return l;
        }
        NO_LEADER
    }

    /// Write what `target` changes: a PartitionChange (always, so the partition epoch moves),
    /// then the reassignment lists when they change or a new assignment cleared them.
    fn emit_target(
        &mut self,
        topic_id: Uuid,
        partition: i32,
        old: &PartitionState,
        mut target: Target,
        fx: &mut Effects,
    ) {
        let leader = self.leader_for(old, &mut target);
        let replicas_changed = target.replicas != old.replicas;
        let lists_changed =
            target.adding != old.adding_replicas || target.removing != old.removing_replicas;
        let change = PartitionChange {
            topic_id,
            partition,
            leader: (leader != old.leader).then_some(leader),
            isr: (target.isr != old.isr).then(|| target.isr.clone()),
            replicas: replicas_changed.then(|| target.replicas.clone()),
        };
        let changes_state = change.leader.is_some() || change.isr.is_some() || replicas_changed;
        if !changes_state && !lists_changed {
            return;
        }
        self.emit(Record::PartitionChange(change), fx);
        let in_progress = !target.adding.is_empty() || !target.removing.is_empty();
        if lists_changed || (replicas_changed && in_progress) {
            let record = PartitionReassignment {
                topic_id,
                partition,
                adding: target.adding,
                removing: target.removing,
            };
            self.emit(Record::PartitionReassignment(record), fx);
        }
    }

    /// ListPartitionReassignments: the reassignments in progress, of every partition (`None`)
    /// or of the named ones (unknown topics and partitions are left out, as in Kafka).
    pub(super) fn list_reassignments(&self, topics: Option<&[(String, Vec<i32>)]>) -> Reply {
        let ongoing = |topic: &str, partition: i32, p: &PartitionState| OngoingReassignment {
            topic: topic.to_string(),
            partition,
            replicas: p.replicas.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
        };
        let mut out = Vec::new();
        match topics {
            None => {
                for t in self.image.topics() {
                    for (&i, p) in t.partitions.iter().filter(|(_, p)| p.is_reassigning()) {
                        out.push(ongoing(&t.name, i, p));
                    }
                }
            }
            Some(named) => {
                for (name, partitions) in named {
                    let Some(t) = self.image.topic_by_name(name) else {
                        continue;
                    };
                    for i in partitions {
                        if let Some(p) = t.partitions.get(i).filter(|p| p.is_reassigning()) {
                            out.push(ongoing(name, *i, p));
                        }
                    }
                }
            }
        }
        Reply::ListPartitionReassignments(out)
    }
}

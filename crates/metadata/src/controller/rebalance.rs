//! The periodic preferred-leader rebalance (`auto.leader.rebalance.enable`), with the per-broker
//! threshold `leader.imbalance.per.broker.percentage`.
//!
//! The rule is the one of Kafka's ZooKeeper controller (`checkAndTriggerAutoLeaderRebalance`):
//! group the partitions by their preferred replica (the first of the assignment); a broker's
//! imbalance is the share of its preferred partitions led by someone else; only a broker whose
//! imbalance is strictly above the percentage gets its partitions back, and then all of those
//! whose preferred replica can lead. Kafka 4's KRaft controller dropped the setting and moves
//! every imbalanced partition back, which is this rule with a percentage of 0.

use std::collections::BTreeMap;

use super::{Controller, Effects, ElectionType};
use crate::records::BrokerId;

/// One broker's preferred partitions: how many, and the ones another replica leads.
#[derive(Debug, Default)]
struct Preferred {
    total: u64,
    led_elsewhere: Vec<(String, i32)>,
}

impl Controller {
    /// Move leadership back to preferred replicas on every broker whose imbalance is above
    /// `leader_imbalance_per_broker_percentage`.
    pub(super) fn rebalance_preferred_leaders(&mut self, fx: &mut Effects) {
        let percentage = u64::from(self.config.leader_imbalance_per_broker_percentage);
        for (broker, preferred) in self.preferred_by_broker() {
            let imbalanced = preferred.led_elsewhere.len() as u64;
            // ratio > percentage / 100, in integers.
            if imbalanced * 100 <= percentage * preferred.total {
                continue;
            }
            tracing::info!(
                broker,
                imbalanced,
                preferred = preferred.total,
                "moving leadership back to a broker's preferred partitions"
            );
            for (topic, partition) in preferred.led_elsewhere {
                // A preferred replica that cannot lead (fenced, out of the ISR) waits for the
                // next check, as in Kafka.
                let _ = self.elect_one(&topic, partition, ElectionType::Preferred, fx);
            }
        }
    }

    fn preferred_by_broker(&self) -> BTreeMap<BrokerId, Preferred> {
        let mut by_broker: BTreeMap<BrokerId, Preferred> = BTreeMap::new();
        for topic in self.image.topics() {
            for (&partition, p) in &topic.partitions {
                let Some(&preferred) = p.replicas.first() else {
                    continue;
                };
                let entry = by_broker.entry(preferred).or_default();
                entry.total += 1;
                if p.leader != preferred {
                    entry.led_elsewhere.push((topic.name.clone(), partition));
                }
            }
        }
        by_broker
    }
}

//! Replica placement for new partitions: spread leaders (first replicas) and replicas evenly
//! over the unfenced brokers, counting what they already host, and put a partition's replicas
//! on distinct racks while racks remain (a broker without `broker.rack` counts as one rack of
//! its own kind, so a cluster without racks is simply rack-less).
//!
//! Greedy and deterministic: each partition's leader is the broker leading the fewest
//! partitions (then hosting the fewest replicas, then the lowest id); each follower the broker
//! hosting the fewest replicas among those on a rack this partition does not use yet.

use std::collections::{BTreeMap, BTreeSet};

use crate::records::BrokerId;

/// How much a broker already carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    pub leaders: usize,
    pub replicas: usize,
}

/// Why replicas cannot be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("replication factor {replication_factor} exceeds the {brokers} available brokers")]
    TooFewBrokers {
        replication_factor: usize,
        brokers: usize,
    },
}

/// Place `partitions` new partitions with `replication_factor` replicas each on `brokers`
/// (id, rack), updating `load`. Returns one replica list per partition, leader first.
pub fn place_replicas(
    brokers: &[(BrokerId, Option<String>)],
    load: &mut BTreeMap<BrokerId, Load>,
    partitions: usize,
    replication_factor: usize,
) -> Result<Vec<Vec<BrokerId>>, PlacementError> {
    if replication_factor == 0 || replication_factor > brokers.len() {
        return Err(PlacementError::TooFewBrokers {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let racks: BTreeMap<BrokerId, Option<&str>> = brokers
        .iter()
        .map(|(id, rack)| (*id, rack.as_deref()))
        .collect();
    let mut out = Vec::with_capacity(partitions);
    for _ in 0..partitions {
        let load_of = |load: &BTreeMap<BrokerId, Load>, id: BrokerId| {
            load.get(&id).copied().unwrap_or_default()
        };
        let leader = *racks
            .keys()
            .min_by_key(|&&id| {
                let l = load_of(load, id);
                (l.leaders, l.replicas, id)
            })
            .unwrap_or_else(|| unreachable!("brokers is not empty"));
        let mut chosen = vec![leader];
        let mut used_racks: BTreeSet<Option<&str>> = BTreeSet::from([racks[&leader]]);
        while chosen.len() < replication_factor {
            let free = racks.keys().copied().filter(|id| !chosen.contains(id));
            let fresh_rack: Vec<BrokerId> = free
                .clone()
                .filter(|id| !used_racks.contains(&racks[id]))
                .collect();
            let candidates: Vec<BrokerId> = if fresh_rack.is_empty() {
                free.collect()
            } else {
                fresh_rack
            };
            let next = *candidates
                .iter()
                .min_by_key(|&&id| {
                    let l = load_of(load, id);
                    (l.replicas, l.leaders, id)
                })
                .unwrap_or_else(|| unreachable!("replication factor <= brokers"));
            used_racks.insert(racks[&next]);
            chosen.push(next);
        }
        for (i, &id) in chosen.iter().enumerate() {
            let l = load.entry(id).or_default();
            l.replicas += 1;
            l.leaders += usize::from(i == 0);
        }
        out.push(chosen);
    }
    Ok(out)
}

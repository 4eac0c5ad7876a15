//! One partition's next state, decided the way Kafka's `PartitionChangeBuilder` decides it
//! with KIP-966 eligible leader replicas (ELR) on: the target ISR, the ELR that follows from
//! it, the election, and the last known leader.
//!
//! The rules (each has a test in `tests/elr.rs`):
//! 1. When the target ISR is at least the topic's effective `min.insync.replicas` (its value,
//!    at most the replica count), the ELR and last known ELR are empty. Below it, every member
//!    that leaves the ISR joins the ELR: the high watermark cannot pass a replica while the ISR
//!    is below min ISR, so such a replica holds every committed record.
//! 2. A broker that restarted after an unclean shutdown (it may have lost its page cache, and
//!    so records it had acknowledged) leaves the ISR and the ELR and is never a clean leader.
//! 3. A leader comes from the ISR; when the ISR is empty, from the ELR (the new ISR is then
//!    just that replica). The current leader stays while it is eligible.
//! 4. When the ISR becomes empty the last leader is kept as the last known ELR. With the ISR and
//!    ELR both empty, it is elected when it is back: an *unclean* election (it may lack records
//!    after an unclean shutdown), as Kafka 4 does, so a cluster that crashed whole comes back.
//! 5. Any other replica outside the ISR and ELR leads only where the topic allows unclean
//!    election (or an operator asks for it). Every unclean election resets the ISR to the new
//!    leader and clears the ELR.

use crate::image::PartitionState;
use crate::records::{BrokerId, NO_LEADER};

/// How far an election may go (Kafka's `PartitionChangeBuilder.Election`, less `PREFERRED`,
/// which the controller decides itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Election {
    /// ISR, then ELR, then the last known leader.
    Online,
    /// As `Online`, then any acceptable replica.
    Unclean,
}

/// What a change asks of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub isr: Vec<BrokerId>,
    pub election: Election,
    /// The topic's effective `min.insync.replicas`.
    pub min_isr: usize,
    /// A broker that restarted after an unclean shutdown: out of the ISR and ELR, never leader.
    pub unclean_shutdown: Option<BrokerId>,
}

/// A change to emit for one partition; `None` fields are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Change {
    pub leader: Option<BrokerId>,
    pub isr: Option<Vec<BrokerId>>,
    /// The new `(elr, last_known_elr)` when either changes.
    pub elr: Option<(Vec<BrokerId>, Vec<BrokerId>)>,
    /// The new leader came from outside the ISR and ELR: records may be lost.
    pub unclean: bool,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.leader.is_none() && self.isr.is_none() && self.elr.is_none()
    }
}

/// The change that takes `p` to `target`, with `acceptable` telling which brokers may lead.
pub(super) fn plan(
    p: &PartitionState,
    target: &Target,
    acceptable: impl Fn(BrokerId) -> bool,
) -> Change {
    let mut isr = target.isr.clone();
    let mut elr = target_elr(p, target);
    let (leader, unclean) = elect(p, &isr, &elr, target.election, &acceptable);
    let mut last_known = p.last_known_elr.clone();
    if leader != p.leader && leader != NO_LEADER {
        if unclean {
            isr = vec![leader];
            elr.clear();
        } else if elr.contains(&leader) {
            isr = vec![leader];
            elr.retain(|&r| r != leader);
        }
        last_known.clear();
    } else if leader != NO_LEADER {
        last_known.clear();
    }
    if isr.is_empty() && !p.isr.is_empty() {
        // The partition just lost its last in-sync replica: remember who led it.
        let last = match p.leader {
            NO_LEADER => p.isr.first().copied(),
            l => Some(l),
        };
        if let Some(l) = last {
            last_known = vec![l];
        }
    }
    let elr_change = (elr != p.elr || last_known != p.last_known_elr).then_some((elr, last_known));
    Change {
        leader: (leader != p.leader).then_some(leader),
        isr: (isr != p.isr).then_some(isr),
        elr: elr_change,
        unclean: unclean && leader != p.leader,
    }
}

/// Rules 1 and 2: the ELR that goes with the target ISR, in assignment order.
fn target_elr(p: &PartitionState, target: &Target) -> Vec<BrokerId> {
    if target.isr.len() >= target.min_isr {
        return Vec::new();
    }
    p.replicas
        .iter()
        .copied()
        .filter(|r| p.elr.contains(r) || p.isr.contains(r))
        .filter(|r| !target.isr.contains(r) && target.unclean_shutdown != Some(*r))
        .collect()
}

/// Rules 3 to 5: the leader, and whether electing it was unclean.
fn elect(
    p: &PartitionState,
    isr: &[BrokerId],
    elr: &[BrokerId],
    election: Election,
    acceptable: &impl Fn(BrokerId) -> bool,
) -> (BrokerId, bool) {
    let valid =
        |r: BrokerId| (isr.contains(&r) || (isr.is_empty() && elr.contains(&r))) && acceptable(r);
    if p.leader != NO_LEADER && valid(p.leader) {
        return (p.leader, false);
    }
    if let Some(l) = p.replicas.iter().copied().find(|&r| valid(r)) {
        return (l, false);
    }
    if isr.is_empty()
        && elr.is_empty()
        && let [last] = p.last_known_elr[..]
        && acceptable(last)
    {
        return (last, true);
    }
    if election == Election::Unclean
        && let Some(l) = p.replicas.iter().copied().find(|&r| acceptable(r))
    {
        return (l, true);
    }
    (NO_LEADER, false)
}

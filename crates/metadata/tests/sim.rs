//! Deterministic simulation of a three-node cluster (combined mode: each node a quorum voter
//! with its controller, and a broker) under message loss, delay, network partitions, crashes,
//! controlled shutdowns and random admin requests, across many seeds.
//!
//! Why our own seeded scheduler and not `turmoil`: the controller, the image and the node
//! driver are sans-io and synchronous, so one loop that steps them under a simulated clock is
//! all the determinism needed; turmoil simulates tokio sockets, which these pieces never touch.
//! The quorum is a model of Raft's guarantees (see `sim/model.rs`); the real openraft quorum
//! is tested on its own.
//!
//! Invariants checked after every step:
//! 1. committed metadata is never lost: every node's image equals the image of a prefix of
//!    the one committed history, and a node's offset never goes backwards;
//! 2. epochs only grow (per node and partition);
//! 3. at most one leader per partition and leader epoch, across all nodes;
//! 4. every elected leader was in the ISR, or in the ELR (KIP-966), or the last known leader
//!    (an unclean election), or the topic allows unclean election; and no clean election
//!    (from the ISR or ELR) picks a replica that may lack committed records: one whose broker
//!    restarted without a clean-shutdown marker (a crash, or a power loss of the whole
//!    cluster), until it has rejoined an ISR;
//! 5. fenced brokers lead nothing (after every committed batch);
//! 6. producer-id blocks never overlap; acknowledged topics were committed;
//! 7. no batch the controller writes fails to apply to the committed log (checked per seed);
//!    and after a quiet period every broker is unfenced and every node caught up.
//!
//! `SIM_SEEDS` (default 200) sets the seed count.

#[path = "sim/cluster.rs"]
mod cluster;
#[path = "sim/model.rs"]
mod model;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use streamforge_metadata::controller::UNCLEAN_LEADER_ELECTION_ENABLE;
use streamforge_metadata::quorum::MetadataQuorum;
use streamforge_metadata::records::PartitionChange;
use streamforge_metadata::{MetadataImage, NO_LEADER, Record};
use uuid::Uuid;

use cluster::Cluster;

const FAULTY_MS: u64 = 40_000;
const QUIET_MS: u64 = 15_000;
/// Every node must have caught up, by the end, with what was committed this long before it.
const SETTLE_MS: u64 = 3_000;

/// The checker's replay of the committed history, one image per batch.
struct Checker {
    images: Vec<MetadataImage>,
    checked_batches: usize,
    leader_by_epoch: BTreeMap<(Uuid, i32, i32), i32>,
    last_epochs: BTreeMap<(u64, Uuid, i32), (i32, i32)>,
    last_offset: BTreeMap<u64, i64>,
    unclean_elections: u64,
    leader_changes: u64,
    /// (topic, partition, replica) whose log may be empty: its broker restarted uncleanly.
    suspect: BTreeSet<(Uuid, i32, i32)>,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            images: vec![MetadataImage::empty()],
            checked_batches: 0,
            leader_by_epoch: BTreeMap::new(),
            last_epochs: BTreeMap::new(),
            last_offset: BTreeMap::new(),
            unclean_elections: 0,
            leader_changes: 0,
            suspect: BTreeSet::new(),
        }
    }

    /// Replay new committed batches, checking elections (4) and fenced leaders (5).
    fn replay_history(&mut self, c: &Cluster) {
        let model = c.model.borrow();
        for batch in &model.history[self.checked_batches..] {
            let mut image = self
                .images
                .last()
                .cloned()
                .unwrap_or_else(MetadataImage::empty);
            for (record, at) in batch.positioned() {
                match record {
                    Record::PartitionChange(change) => self.check_change(&image, change),
                    Record::RegisterBroker(r)
                        if c.tally.unclean_incarnations.contains(&r.incarnation_id) =>
                    {
                        for topic in image.topics() {
                            for (&partition, p) in &topic.partitions {
                                if p.replicas.contains(&r.broker_id) {
                                    self.suspect.insert((topic.id, partition, r.broker_id));
                                }
                            }
                        }
                    }
                    _ => {}
                }
                image = image
                    .apply(record, at)
                    .expect("committed history applies")
                    .0;
            }
            for topic in image.topics() {
                for p in topic.partitions.values() {
                    assert!(
                        p.leader == NO_LEADER || image.is_unfenced(p.leader),
                        "fenced broker {} leads {}: batch {batch:?}",
                        p.leader,
                        topic.name
                    );
                }
            }
            self.images.push(image);
        }
        self.checked_batches = model.history.len();
    }

    /// Invariant 4 for one committed partition change, against the image before it.
    fn check_change(&mut self, image: &MetadataImage, change: &PartitionChange) {
        let topic = image
            .topic(change.topic_id)
            .expect("change of a known topic");
        let key = |r: i32| (change.topic_id, change.partition, r);
        let before = &topic.partitions[&change.partition];
        if let Some(leader) = change.leader.filter(|&l| l != NO_LEADER)
            && leader != before.leader
        {
            self.leader_changes += 1;
            if before.isr.contains(&leader) || before.elr.contains(&leader) {
                assert!(
                    !self.suspect.contains(&key(leader)),
                    "clean election of {leader}, which restarted uncleanly and may lack committed records: {before:?}"
                );
            } else {
                let unclean = image.topic_config(&topic.name, UNCLEAN_LEADER_ELECTION_ENABLE);
                assert!(
                    unclean == Some("true") || before.last_known_elr == [leader],
                    "leader {leader} elected outside the ISR and ELR: {before:?}"
                );
                self.unclean_elections += 1;
                // Its log is the partition's from here on.
                self.suspect.remove(&key(leader));
            }
        }
        // A replica joins the ISR caught up with the leader.
        for r in change.isr.iter().flatten() {
            if !before.isr.contains(r) {
                self.suspect.remove(&key(*r));
            }
        }
    }

    /// Per-node checks (1), (2), (3).
    fn check_nodes(&mut self, c: &Cluster) {
        for id in 1..=3u64 {
            let Some(image) = c.image(id) else { continue };
            let offset = image.position().offset;
            let expected = self
                .images
                .iter()
                .find(|i| i.position().offset == offset)
                .unwrap_or_else(|| {
                    panic!("node {id} is at offset {offset}, not a committed batch end")
                });
            assert!(
                image == expected,
                "node {id}'s image differs from the committed history at {offset}"
            );
            let last = self.last_offset.entry(id).or_insert(offset);
            assert!(
                offset >= *last,
                "node {id} went back from {last} to {offset}"
            );
            *last = offset;
            for topic in image.topics() {
                for (&partition, p) in &topic.partitions {
                    let epochs = (p.leader_epoch, p.partition_epoch);
                    let seen = self
                        .last_epochs
                        .entry((id, topic.id, partition))
                        .or_insert(epochs);
                    assert!(
                        epochs.0 >= seen.0 && epochs.1 >= seen.1,
                        "epochs went back on node {id}"
                    );
                    *seen = epochs;
                    let leader = self
                        .leader_by_epoch
                        .entry((topic.id, partition, p.leader_epoch))
                        .or_insert(p.leader);
                    assert_eq!(*leader, p.leader, "two leaders in one leader epoch");
                }
            }
        }
    }
}

/// Producer-id blocks never overlap (6); acknowledged topics were committed (6).
fn check_tally(c: &Cluster, checker: &Checker) {
    let mut blocks = c.tally.producer_blocks.clone();
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "producer-id blocks {:?} and {:?} overlap",
            w[0],
            w[1]
        );
    }
    for id in &c.tally.topics_acknowledged {
        let committed = checker.images.iter().any(|i| i.topic(*id).is_some());
        assert!(committed, "topic {id} acknowledged but never committed");
    }
}

#[derive(Debug, Default)]
struct Totals {
    elections: u64,
    leader_changes: u64,
    unclean: u64,
    crashes: u64,
    power_losses: u64,
    replies: u64,
    blocks: usize,
}

fn run_seed(seed: u64, totals: &mut Totals) {
    let mut c = Cluster::new(seed, StdRng::seed_from_u64(seed));
    let mut checker = Checker::new();
    let mut settled = -1;
    while c.now_ms < FAULTY_MS + QUIET_MS {
        let faults = c.now_ms < FAULTY_MS;
        if !faults {
            c.loss_ratio = (0, 1);
            c.model.borrow_mut().cut.clear();
        }
        c.step(seed, faults);
        if c.now_ms == FAULTY_MS + QUIET_MS - SETTLE_MS {
            settled = checker.images.last().map_or(-1, |i| i.position().offset);
        }
        if std::env::var("SIM_TRACE").is_ok() && c.now_ms.is_multiple_of(1000) {
            let m = c.model.borrow();
            let views: Vec<_> = c
                .nodes
                .iter()
                .map(|n| {
                    n.as_ref().map(|n| {
                        (
                            n.quorum().leader(),
                            n.is_active(),
                            n.quorum().is_ready_leader(),
                        )
                    })
                })
                .collect();
            eprintln!(
                "{} model leader {:?} term {} alive {:?} cut {:?} views {views:?}",
                c.now_ms, m.leader, m.term, m.alive, m.cut
            );
        }
        checker.replay_history(&c);
        checker.check_nodes(&c);
        check_tally(&c, &checker);
    }
    // After the quiet period the cluster has healed: every broker unfenced, every node caught up.
    let last = checker
        .images
        .last()
        .cloned()
        .unwrap_or_else(MetadataImage::empty);
    for id in 1..=3u64 {
        assert!(
            last.is_unfenced(id as i32),
            "seed {seed}: broker {id} still fenced after the quiet period"
        );
        let offset = c.image(id).map_or(-1, |i| i.position().offset);
        assert!(
            offset >= settled,
            "seed {seed}: node {id} at {offset}, behind {settled}"
        );
    }
    // 7. The controller only writes batches that apply to the committed log.
    assert_eq!(
        c.model.borrow().dropped,
        0,
        "seed {seed}: a committed batch did not apply"
    );
    totals.elections += c.model.borrow().elections;
    totals.leader_changes += checker.leader_changes;
    totals.unclean += checker.unclean_elections;
    totals.crashes += c.tally.crashes;
    totals.power_losses += c.tally.power_losses;
    totals.replies += c.tally.replies;
    totals.blocks += c.tally.producer_blocks.len();
}

#[test]
fn metadata_invariants_hold_across_seeds() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let started = Instant::now();
    let mut totals = Totals::default();
    let first: u64 = std::env::var("SIM_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds {
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed, &mut totals)));
        assert!(
            run.is_ok(),
            "seed {seed} failed (rerun: SIM_FIRST_SEED={seed} SIM_SEEDS=1)"
        );
    }
    eprintln!(
        "{seeds} seeds x {} simulated s in {:?}: {totals:?}",
        (FAULTY_MS + QUIET_MS) / 1000,
        started.elapsed()
    );
    // The faults really happened (the run is not vacuous).
    assert!(totals.elections > seeds && totals.leader_changes > seeds && totals.crashes > 0);
    assert!(totals.power_losses > 0 && totals.unclean > 0);
    assert!(totals.blocks > 0 && totals.replies > 0);
}

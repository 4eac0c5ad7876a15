//! A seeded simulation of one partition replicated on three brokers: real `Partition`s (logs
//! in temp dirs), the sans-io replica state inside them, a model controller (ISR changes with
//! partition-epoch checks; KIP-966's ELR: replicas that leave the ISR while it is below min
//! ISR join the ELR, which is cleared once the ISR is back at min ISR; elections of any alive
//! ISR member, else of any alive ELR member, else of the last known leader when it is back)
//! and a scheduler that picks, per step, a produce (acks=all or acks=1), a follower fetch,
//! time passing, an ISR answer, a high-watermark checkpoint write, a crash, a recovery or the
//! metadata reaching the leader. An acks=all append is acknowledged by the Produce handler's
//! own rule ([`must_wait`], then the wait), and sometimes the controller moves the leadership
//! to another ISR member (a preferred-leader rebalance) between the append and that check. An ISR answer can be lost
//! before or after the controller commits (a timeout), and the leader hears of a commit only
//! through the answer or, later, the metadata. A crashed broker's log is dropped without being closed (no
//! clean-shutdown marker, as after kill -9) and a recovery reopens it from disk, with its high
//! watermark from the `replication-offset-checkpoint` it last wrote.
//! Invariants checked after every step:
//! 1. no broker's high watermark ever decreases while it runs (a reopened broker starts again
//!    at its checkpointed HW, which is at most the HW it had);
//! 2. every acknowledged (acks=all) batch is in the current leader's log, across leader changes;
//! 3. any two alive replicas hold identical batches below the smaller of their high watermarks;
//! 4. a high watermark never passes its log end;
//! 5. every batch below the leader's high watermark is in the log of every member of the
//!    controller's ISR and ELR (KIP-966's strict min ISR: without it an acks=1 batch a
//!    consumer read could be missing on an ELR member);
//! 6. every batch that was ever below the leader's high watermark (what consumers may have
//!    read) is in the current leader's log, across leader changes (ELR elections included).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamforge_log::LogConfig;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

use super::replicate_once;
use crate::partition::purgatory::must_wait;
use crate::partition::replica::{IsrChangeOutcome, LeaderAndIsr, ReplicaConfig, Replication};
use crate::partition::{
    Acks, AlterPartitionIntent, AppendParams, OpenHighWatermark, Partition, RemoteTier,
};
use crate::replica_manager::hw_checkpoint;

const SEEDS: u64 = 60;
const STEPS: usize = 250;
const BROKERS: [i32; 3] = [1, 2, 3];
const LAG_MS: i64 = 1_000;
/// Small fetches, so followers often hold a partial tail.
const FETCH_MAX_BYTES: usize = 600;
const TOPIC: &str = "sim";

type BatchId = (i64, i64, i32, u32);

struct Sim {
    rng: StdRng,
    now_ms: i64,
    min_isr: usize,
    partitions: BTreeMap<i32, Arc<Partition>>,
    alive: BTreeMap<i32, bool>,
    // The controller's view.
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    /// KIP-966's eligible leader replicas.
    elr: Vec<i32>,
    /// No leader: the last one crashed and no replica could be elected yet.
    offline: bool,
    /// The leader has not yet seen the controller's latest partition epoch.
    metadata_behind: bool,
    intents: Arc<Mutex<Vec<AlterPartitionIntent>>>,
    // acks=all appends: waiting (end offset, leader epoch) and acknowledged batches.
    pending: Vec<(i64, i32)>,
    acked: Vec<BatchId>,
    /// Batches that were below a leader's high watermark: consumers may have read them.
    visible: BTreeSet<BatchId>,
    last_hw: BTreeMap<i32, i64>,
    dirs: BTreeMap<i32, tempfile::TempDir>,
    reopened: usize,
    elr_elections: usize,
    /// acks=1 appends made while the leader's ISR was under min ISR.
    appends_under_min_isr: usize,
    /// Leadership moved between an acks=all append and the handler's check.
    moves_before_the_check: usize,
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        ..LogConfig::default()
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let min_isr = rng.random_range(1..=2);
        let topic: Arc<str> = Arc::from(TOPIC);
        let mut dirs = BTreeMap::new();
        let mut partitions = BTreeMap::new();
        for id in BROKERS {
            let dir = tempfile::tempdir().unwrap();
            let p = Partition::create(&topic, 0, dir.path(), log_config(), RemoteTier::default());
            partitions.insert(id, Arc::new(p.unwrap()));
            dirs.insert(id, dir);
        }
        let mut sim = Sim {
            rng,
            now_ms: 0,
            min_isr,
            partitions,
            alive: BROKERS.iter().map(|&b| (b, true)).collect(),
            leader: 1,
            leader_epoch: 1,
            partition_epoch: 0,
            isr: BROKERS.to_vec(),
            elr: Vec::new(),
            offline: false,
            metadata_behind: false,
            intents: Arc::new(Mutex::new(Vec::new())),
            pending: Vec::new(),
            acked: Vec::new(),
            visible: BTreeSet::new(),
            last_hw: BTreeMap::new(),
            dirs,
            reopened: 0,
            elr_elections: 0,
            appends_under_min_isr: 0,
            moves_before_the_check: 0,
        };
        sim.install_leader();
        sim
    }

    fn p(&self, id: i32) -> &Arc<Partition> {
        &self.partitions[&id]
    }

    /// Whether the partition has a leader that runs.
    fn leading(&self) -> bool {
        self.alive[&self.leader] && !self.offline
    }

    fn leader_and_isr(&self) -> (LeaderAndIsr, ReplicaConfig) {
        let state = LeaderAndIsr {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            replicas: BROKERS.to_vec(),
            isr: self.isr.clone(),
        };
        let config = ReplicaConfig {
            replica_lag_time_max_ms: LAG_MS,
            min_insync_replicas: self.min_isr,
        };
        (state, config)
    }

    /// The controller commits `new_isr` (Kafka's `PartitionChangeBuilder`): below min ISR the
    /// members that left it join the ELR; at min ISR the ELR is cleared. Replicas back from an
    /// unclean shutdown are taken out separately ([`Self::recover`]) and never join.
    fn set_isr(&mut self, new_isr: Vec<i32>) {
        let min_isr = self.min_isr.min(BROKERS.len());
        if new_isr.len() >= min_isr {
            self.elr.clear();
        } else {
            for &r in &self.isr {
                if !new_isr.contains(&r) && !self.elr.contains(&r) {
                    self.elr.push(r);
                }
            }
            self.elr.retain(|r| !new_isr.contains(r));
        }
        self.isr = new_isr;
    }

    fn sink(&self) -> crate::partition::IsrChangeSink {
        let sink_target = self.intents.clone();
        Arc::new(move |i| sink_target.lock().push(i))
    }

    /// Tell every alive broker the controller's leader and epoch.
    fn install_leader(&mut self) {
        let (state, config) = self.leader_and_isr();
        self.p(self.leader)
            .make_leader_replicated(self.leader, state, config, self.sink(), self.now_ms)
            .unwrap();
        self.metadata_behind = false;
        self.offline = false;
        for id in BROKERS {
            if id != self.leader && self.alive[&id] {
                self.p(id)
                    .make_follower(self.leader_epoch, self.leader)
                    .unwrap();
            }
        }
        self.pending.clear();
    }

    fn step(&mut self) {
        let choice = self.rng.random_range(0..100);
        if std::env::var("SIM_TRACE").is_ok() {
            let o: Vec<_> = BROKERS
                .iter()
                .map(|&b| {
                    (
                        b,
                        self.alive[&b],
                        self.p(b)
                            .offsets()
                            .map(|o| (o.high_watermark, o.log_end_offset))
                            .ok(),
                        self.p(b).role(),
                    )
                })
                .collect();
            eprintln!(
                "choice {choice} leader {} epoch {} isr {:?} {o:?}",
                self.leader, self.leader_epoch, self.isr
            );
        }
        match choice {
            0..=24 => self.produce(),
            25..=64 => self.fetch(),
            65..=74 => {
                self.now_ms += self.rng.random_range(1..=LAG_MS);
                if self.leading() {
                    self.p(self.leader).maybe_shrink_isr(self.now_ms);
                }
            }
            75..=81 => self.answer_isr_change(),
            82..=84 => self.write_checkpoint(),
            85..=86 => self.deliver_metadata(),
            87..=92 => self.crash(),
            _ => self.recover(),
        }
        self.collect_acks();
    }

    fn produce(&mut self) {
        if !self.leading() {
            return;
        }
        let records = self.rng.random_range(1..=5);
        let batch = &mut build_simple(BatchSpec::default(), records, 40);
        let leader = self.p(self.leader).clone();
        if self.rng.random_bool(0.3) {
            // acks=1: acknowledged on the leader's append, whatever the ISR.
            leader
                .append(batch, AppendParams { acks: Acks::Leader })
                .expect("acks=1 append");
            let isr = leader.replica_status().map_or(0, |s| s.1.len());
            if isr < self.min_isr.min(BROKERS.len()) {
                self.appends_under_min_isr += 1;
            }
        } else if let Ok(info) = leader.append(batch, AppendParams { acks: Acks::All }) {
            let (end, epoch) = (info.last_offset + 1, self.leader_epoch);
            if self.rng.random_bool(0.1) && self.move_leadership() {
                self.moves_before_the_check += 1;
            }
            // The Produce handler: answered at once unless it must wait (then `collect_acks`
            // plays the purgatory, which acknowledges only in the append's leadership).
            if must_wait(&leader, end, Some(epoch)) {
                self.pending.push((end, epoch));
            } else {
                let ids = leader.batch_ids(end).unwrap();
                let acked = ids.iter().find(|b| b.1 == end - 1).expect("acked batch");
                self.acked.push(*acked);
            }
        }
    }

    /// The controller's preferred-leader rebalance: leadership moves to another alive member
    /// of the committed ISR (Kafka elects a preferred replica only from the ISR). Returns
    /// whether it moved.
    fn move_leadership(&mut self) -> bool {
        let others: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|&b| b != self.leader && self.alive[&b])
            .collect();
        if others.is_empty() || self.offline {
            return false;
        }
        self.leader = others[self.rng.random_range(0..others.len())];
        self.leader_epoch += 1;
        self.partition_epoch += 1;
        self.intents.lock().clear();
        self.install_leader();
        true
    }

    fn fetch(&mut self) {
        let followers: Vec<i32> = BROKERS
            .iter()
            .copied()
            .filter(|&b| b != self.leader && self.alive[&b])
            .collect();
        if followers.is_empty() || !self.leading() {
            return;
        }
        let f = followers[self.rng.random_range(0..followers.len())];
        let (leader, follower) = (self.p(self.leader).clone(), self.p(f).clone());
        replicate_once(&leader, &follower, f, FETCH_MAX_BYTES, self.now_ms)
            .expect("replication step");
    }

    /// The controller answers the oldest ISR change: committed when its epochs are current,
    /// else INVALID_UPDATE_VERSION / FENCED_LEADER_EPOCH. One answer in four is lost (a
    /// timeout), after the commit or before the request arrived.
    fn answer_isr_change(&mut self) {
        let Some(intent) = self.intents.lock().pop() else {
            return;
        };
        let lost = self.rng.random_range(0..4) == 0;
        if lost && self.rng.random_bool(0.5) {
            if self.alive[&intent.leader_id] {
                self.p(intent.leader_id)
                    .complete_isr_change(&intent.change, IsrChangeOutcome::Unknown);
            }
            return;
        }
        let current = intent.change.leader_epoch == self.leader_epoch
            && intent.change.partition_epoch == self.partition_epoch
            && intent.leader_id == self.leader;
        let outcome = if lost {
            IsrChangeOutcome::Unknown
        } else {
            IsrChangeOutcome::Superseded
        };
        let outcome = if current {
            self.partition_epoch += 1;
            self.set_isr(intent.change.new_isr.clone());
            if lost {
                self.metadata_behind = true;
                outcome
            } else {
                IsrChangeOutcome::Committed(self.isr.clone(), self.partition_epoch)
            }
        } else {
            outcome
        };
        if self.alive[&intent.leader_id] {
            self.p(intent.leader_id)
                .complete_isr_change(&intent.change, outcome);
        }
    }

    /// The metadata reaches the leader: the controller's ISR and partition epoch.
    fn deliver_metadata(&mut self) {
        if !self.metadata_behind || !self.leading() {
            return;
        }
        let (state, config) = self.leader_and_isr();
        self.p(self.leader)
            .lead_replicated(self.leader, state, config, self.sink(), self.now_ms)
            .unwrap();
        self.metadata_behind = false;
    }

    fn crash(&mut self) {
        let id = BROKERS[self.rng.random_range(0..BROKERS.len())];
        if !self.alive[&id] || self.alive.values().filter(|a| **a).count() == 1 {
            return;
        }
        self.alive.insert(id, false);
        // The controller fences it: out of the ISR, even the last member (Kafka 4), into the
        // ELR if that leaves the ISR below min ISR; a new leader from the ISR or ELR.
        if self.isr.contains(&id) {
            let isr = self.isr.iter().copied().filter(|&b| b != id).collect();
            self.set_isr(isr);
            self.partition_epoch += 1;
        }
        if id == self.leader {
            self.offline = true;
            self.elect();
        } else {
            self.metadata_behind = true;
        }
    }

    /// Elect any alive ISR member, else any alive ELR member (KIP-966: it becomes the ISR);
    /// never a replica outside both: a controller may pick any of them.
    fn elect(&mut self) {
        let alive =
            |set: &[i32]| -> Vec<i32> { set.iter().copied().filter(|&b| self.alive[&b]).collect() };
        let (candidates, from_elr) = match alive(&self.isr) {
            isr if !isr.is_empty() => (isr, false),
            _ => (alive(&self.elr), true),
        };
        if candidates.is_empty() {
            return; // offline until an ISR or ELR member, or the last known leader, returns
        }
        let next = candidates[self.rng.random_range(0..candidates.len())];
        if from_elr {
            self.elr_elections += 1;
            self.set_isr(vec![next]);
        }
        self.leader = next;
        self.leader_epoch += 1;
        self.partition_epoch += 1;
        self.intents.lock().clear();
        self.install_leader();
    }

    /// The periodic `replication-offset-checkpoint` write of one alive broker.
    fn write_checkpoint(&mut self) {
        let id = BROKERS[self.rng.random_range(0..BROKERS.len())];
        if !self.alive[&id] {
            return;
        }
        let hw = self.p(id).high_watermark().unwrap();
        let entries = hw_checkpoint::HighWatermarks::from([((TOPIC.to_string(), 0), hw)]);
        hw_checkpoint::write(self.dirs[&id].path(), &entries).unwrap();
    }

    /// Restart a crashed broker: its log was never closed; open it again from disk as the
    /// broker does at start-up (a replicated partition: HW = min(checkpoint, LEO)).
    fn reopen(&mut self, id: i32) {
        let dir = self.dirs[&id].path();
        let checkpointed = hw_checkpoint::read(dir)
            .unwrap()
            .and_then(|e| e.get(&(TOPIC.to_string(), 0)).copied());
        let topic: Arc<str> = Arc::from(TOPIC);
        let hw = OpenHighWatermark::Checkpointed(checkpointed);
        let p = Partition::open_or_offline(&topic, 0, dir, log_config(), RemoteTier::default(), hw);
        assert!(p.offline_reason().is_none(), "{:?}", p.offline_reason());
        let o = p.offsets().unwrap();
        let before = self.last_hw.get(&id).copied().unwrap_or(0);
        assert!(
            o.high_watermark <= before,
            "broker {id} reopened with HW {} above the {before} it had",
            o.high_watermark
        );
        assert!(o.high_watermark <= o.log_end_offset);
        self.last_hw.insert(id, o.high_watermark);
        // Dropped without `stop`: the crashed log is never closed cleanly.
        self.partitions.insert(id, Arc::new(p));
        self.reopened += 1;
    }

    fn recover(&mut self) {
        let Some(&id) = BROKERS.iter().find(|&&b| !self.alive[&b]) else {
            return;
        };
        self.reopen(id);
        self.alive.insert(id, true);
        // Back from an unclean shutdown (kill -9, no marker): the controller takes it out of
        // every ISR and ELR (KIP-966), without it joining the ELR.
        if self.isr.contains(&id) || self.elr.contains(&id) {
            self.isr.retain(|&b| b != id);
            self.elr.retain(|&b| b != id);
            self.partition_epoch += 1;
            self.metadata_behind = true;
        }
        // A reopened partition has no role until the controller gives it one. Without a leader,
        // the last known leader is elected (uncleanly) once it is back and the ISR and ELR are
        // empty, as Kafka 4 does; it holds everything it committed.
        if !self.leading() {
            self.elect();
            if !self.leading()
                && self.alive[&self.leader]
                && self.isr.is_empty()
                && self.elr.is_empty()
            {
                self.isr = vec![self.leader];
                self.leader_epoch += 1;
                self.partition_epoch += 1;
                self.intents.lock().clear();
                self.install_leader();
            }
            if !self.leading() {
                return;
            }
        }
        if id != self.leader {
            // Back with a stale epoch: it follows the current leader and truncates by epoch.
            self.p(id)
                .make_follower(self.leader_epoch, self.leader)
                .unwrap();
        }
    }

    fn collect_acks(&mut self) {
        if !self.leading() {
            return;
        }
        let leader = self.p(self.leader).clone();
        let epoch = self.leader_epoch;
        let mut still = Vec::new();
        for (end, e) in std::mem::take(&mut self.pending) {
            match leader.replication(end) {
                Ok(Replication::Done) if e == epoch => {
                    let ids = leader.batch_ids(end).unwrap();
                    let acked = ids.iter().find(|b| b.1 == end - 1).expect("acked batch");
                    self.acked.push(*acked);
                }
                Ok(Replication::Pending) if e == epoch => still.push((end, e)),
                _ => {}
            }
        }
        self.pending = still;
    }

    fn check(&mut self, seed: u64, step: usize) {
        let ctx = format!("seed {seed} step {step}");
        let mut views = Vec::new();
        for id in BROKERS {
            if !self.alive[&id] {
                continue;
            }
            let o = self.p(id).offsets().unwrap();
            assert!(
                o.high_watermark <= o.log_end_offset,
                "{ctx}: HW past LEO on {id}"
            );
            let last = self.last_hw.entry(id).or_insert(0);
            assert!(
                o.high_watermark >= *last,
                "{ctx}: HW of {id} went {last} -> {}",
                o.high_watermark
            );
            *last = o.high_watermark;
            views.push((
                id,
                o.high_watermark,
                self.p(id).batch_ids(o.log_end_offset).unwrap(),
            ));
        }
        if self.leading() {
            let (_, hw, leader) = views.iter().find(|v| v.0 == self.leader).unwrap();
            for acked in &self.acked {
                assert!(
                    leader.contains(acked),
                    "{ctx}: acknowledged batch {acked:?} lost"
                );
            }
            let committed: Vec<BatchId> = leader.iter().copied().filter(|b| b.1 < *hw).collect();
            self.check_isr_and_elr_hold(&ctx, &committed);
            self.visible.extend(committed);
            for seen in &self.visible {
                assert!(
                    leader.contains(seen),
                    "{ctx}: batch {seen:?} that consumers could read is lost"
                );
            }
        }
        for (a, hw_a, ids_a) in &views {
            for (b, hw_b, ids_b) in &views {
                let hw = (*hw_a).min(*hw_b);
                let below = |ids: &Vec<BatchId>| -> Vec<BatchId> {
                    ids.iter().copied().filter(|x| x.1 < hw).collect()
                };
                assert_eq!(
                    below(ids_a),
                    below(ids_b),
                    "{ctx}: {a} and {b} differ below {hw}"
                );
            }
        }
    }
}

impl Sim {
    /// Invariant 5: every ISR and ELR member (a crashed one as its log was at the crash:
    /// kill -9 keeps the page cache) holds every batch below the leader's high watermark, so
    /// electing any of them loses nothing a consumer read.
    fn check_isr_and_elr_hold(&self, ctx: &str, committed: &[BatchId]) {
        for &id in self.isr.iter().chain(&self.elr) {
            let end = self.p(id).offsets().unwrap().log_end_offset;
            let held = self.p(id).batch_ids(end).unwrap();
            for b in committed {
                assert!(
                    held.contains(b),
                    "{ctx}: batch {b:?} below the leader's HW is not on {id} (ISR {:?}, ELR {:?})",
                    self.isr,
                    self.elr
                );
            }
        }
    }
}

#[test]
fn replicas_agree_and_nothing_acknowledged_is_lost_over_many_seeds() {
    let mut acked_total = 0;
    let mut elections = 0;
    let mut reopened = 0;
    let mut elr_elections = 0;
    let mut appends_under_min_isr = 0;
    let mut moves = 0;
    let mut seeds = 0;
    for seed in std::env::var("SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(0..SEEDS, |s: u64| s..s + 1)
    {
        let mut sim = Sim::new(seed);
        for step in 0..STEPS {
            sim.step();
            sim.check(seed, step);
        }
        acked_total += sim.acked.len();
        elections += sim.leader_epoch - 1;
        reopened += sim.reopened;
        elr_elections += sim.elr_elections;
        appends_under_min_isr += sim.appends_under_min_isr;
        moves += sim.moves_before_the_check;
        seeds += 1;
    }
    eprintln!(
        "{seeds} seeds: {acked_total} acks, {elections} elections ({elr_elections} from the ELR), {reopened} restarts, {appends_under_min_isr} acks=1 appends under min ISR, {moves} leadership moves between an acks=all append and its check"
    );
    // The scheduler really exercises the protocol.
    assert!(acked_total > seeds * 5, "only {acked_total} acks");
    assert!(elections > seeds as i32, "only {elections} elections");
    assert!(reopened > seeds, "only {reopened} restarts");
    assert!(elr_elections > 0, "no election from the ELR");
    assert!(moves > seeds / 2, "only {moves} moves before the check");
    assert!(
        appends_under_min_isr > seeds,
        "only {appends_under_min_isr} acks=1 appends under min ISR"
    );
}

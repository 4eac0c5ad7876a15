//! Verification guards (KIP-890 part 1, Kafka's `VerificationGuard` /
//! `VerificationStateEntry`): before the leader asks a producer's transaction coordinator
//! whether a partition is in its transaction, it takes a guard for the producer; the append
//! that follows the coordinator's answer goes in only if the guard is still the producer's.
//! Any transactional batch of the producer appended meanwhile (its first data batch, or a
//! marker ending its transaction) clears the guard, so a marker landing between the answer
//! and the append fails the append (INVALID_TXN_STATE) instead of putting a batch of an ended
//! transaction after its marker. Under transaction version 2 a marker carrying the guard's
//! own epoch keeps it: that epoch is already the next transaction's (Kafka's
//! `isV2NextTransactionStarted`). In memory only, as in Kafka; bounded per partition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use streamforge_protocol::batch::RecordBatch;

/// Guards held at once per partition (a named bound; the oldest goes first, which fails its
/// Produce with INVALID_TXN_STATE, the safe side).
pub const VERIFICATIONS_MAX: usize = 10_000;

/// Unique across every log of the process, so a guard never matches one issued before a
/// state reset.
static NEXT_GUARD: AtomicU64 = AtomicU64::new(1);

/// A producer's guard: the token a verified append must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

#[derive(Debug, Clone, Copy)]
struct Entry {
    guard: VerificationGuard,
    /// The newest epoch the guard was asked for.
    epoch: i16,
    /// Taken for a transaction version 2 producer (each transaction bumps the epoch).
    epoch_bump: bool,
    created_ms: i64,
}

/// The guards of one partition, by producer id.
#[derive(Debug, Default)]
pub struct TxnVerifications {
    entries: HashMap<i64, Entry>,
}

impl TxnVerifications {
    /// The producer's guard, made if it has none (a second check of the same producer
    /// shares it, as Kafka's `maybeCreateVerificationStateEntry`).
    pub fn start(
        &mut self,
        producer_id: i64,
        epoch: i16,
        epoch_bump: bool,
        now_ms: i64,
    ) -> VerificationGuard {
        if !self.entries.contains_key(&producer_id) && self.entries.len() >= VERIFICATIONS_MAX {
            self.evict_oldest();
        }
        let entry = self.entries.entry(producer_id).or_insert_with(|| Entry {
            guard: VerificationGuard(NEXT_GUARD.fetch_add(1, Ordering::Relaxed)),
            epoch,
            epoch_bump,
            created_ms: now_ms,
        });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.epoch_bump = epoch_bump;
        }
        entry.guard
    }

    /// Whether `guard` is still the producer's.
    pub fn holds(&self, producer_id: i64, guard: VerificationGuard) -> bool {
        self.entries
            .get(&producer_id)
            .is_some_and(|e| e.guard == guard)
    }

    /// An appended batch: a transactional one of the producer clears its guard (the
    /// transaction is now open in the log, or ended by a marker), except a transaction
    /// version 2 marker at the guard's own epoch.
    pub fn on_append(&mut self, batch: &RecordBatch<'_>) {
        if !batch.is_transactional() {
            return;
        }
        let pid = batch.producer_id();
        let Some(entry) = self.entries.get(&pid) else {
            return;
        };
        let next_transaction_started =
            entry.epoch_bump && batch.is_control() && batch.producer_epoch() == entry.epoch;
        if !next_transaction_started {
            self.entries.remove(&pid);
        }
    }

    /// Drops guards older than `expiration_ms` (Kafka drops them with idle producers).
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.entries
            .retain(|_, e| now_ms.saturating_sub(e.created_ms) < expiration_ms);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn evict_oldest(&mut self) {
        if let Some(pid) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.created_ms)
            .map(|(pid, _)| *pid)
        {
            tracing::warn!(producer_id = pid, "dropping a verification guard: too many");
            self.entries.remove(&pid);
        }
    }
}

#[cfg(test)]
#[path = "txn_verification_tests.rs"]
mod tests;

//! Deterministic tests of the coordinator: no sleeps, time is a number.

mod harness;
mod membership_tests;
mod offsets_tests;
mod records_tests;
mod static_tests;
mod txn_offsets_tests;
mod txn_replay_tests;

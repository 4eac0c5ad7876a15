//! Follower fetchers: what a follower does with the leader's answers (`apply`), and the
//! fetcher tasks that ask for them over the network (one per source broker).

pub mod apply;

pub use apply::{Applied, FetchedPartition, apply, replicate_once, whole_batches};

#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tests;

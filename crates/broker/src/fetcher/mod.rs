//! Follower fetchers: what a follower does with the leader's answers (`apply`), and the
//! fetcher tasks that ask for them over the network (`manager`, one per source broker), and
//! the role changes that start and stop them (`roles`).

pub mod apply;
pub(crate) mod connection;
pub mod manager;
mod roles;
pub mod session;

pub use apply::{Applied, FetchedPartition, apply, replicate_once, whole_batches};
pub use connection::FetcherError;
pub use manager::{FetcherConfig, FetcherManager};

#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tests;

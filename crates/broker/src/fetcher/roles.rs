//! Role changes with replication: what a metadata delta calls once the cluster is wired
//! (tests call them directly). Following starts this broker's fetcher for the partition;
//! leading stops it and starts tracking the followers.

use crate::BrokerState;
use crate::partition::replica::{LeaderAndIsr, ReplicaConfig};
use crate::partition::{IsrChangeSink, PartitionError};

impl BrokerState {
    /// Follow `leader_id` for `topic`-`index` from `leader_epoch` on and fetch from it.
    pub fn follow(
        &self,
        topic: &str,
        index: i32,
        leader_epoch: i32,
        leader_id: i32,
    ) -> Result<(), PartitionError> {
        self.replicas
            .make_follower(topic, index, leader_epoch, leader_id)?;
        let partition = self
            .replicas
            .partition(topic, index)
            .ok_or(PartitionError::Gone)?;
        self.fetchers.add(partition, leader_id);
        Ok(())
    }

    /// Lead `topic`-`index` with followers: stop fetching it, track the ISR, send ISR changes
    /// to `sink`. `min.insync.replicas` comes from the topic's config.
    pub fn lead(
        &self,
        topic: &str,
        index: i32,
        state: LeaderAndIsr,
        sink: IsrChangeSink,
    ) -> Result<(), PartitionError> {
        self.fetchers.remove(topic, index);
        let t = self.replicas.topic(topic).ok_or(PartitionError::Gone)?;
        let partition = self
            .replicas
            .partition(topic, index)
            .ok_or(PartitionError::Gone)?;
        let config = ReplicaConfig {
            replica_lag_time_max_ms: self.config.replica_lag_time_max_ms,
            ..ReplicaConfig::default()
        }
        .with_topic_configs(&t.configs);
        let epoch = state.leader_epoch;
        partition.make_leader_replicated(
            self.node_id(),
            state,
            config,
            sink,
            self.clock.now_ms(),
        )?;
        tracing::info!(
            topic,
            partition = index,
            leader_epoch = epoch,
            "became leader with followers"
        );
        Ok(())
    }
}

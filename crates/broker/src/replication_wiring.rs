//! The cluster's replication wiring: what connects the metadata image to the replicas here.
//! After every applied delta (and every [`RESYNC_INTERVAL_MS`]) it points the fetchers at the
//! brokers the image names: each follower partition is fetched from its leader, at the
//! address that broker registered. And it sends the ISR changes this broker's leaders propose
//! to the controller as AlterPartition, answering each leader with the result
//! ([`Partition::complete_isr_change`]).
//!
//! The roles themselves (lone leader, leader with followers, follower) are taken where deltas
//! are applied (`replica_manager/roles.rs`), under the admin lock, before anything is served
//! in the new role.

use std::collections::{BTreeSet, HashMap};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use streamforge_metadata::MetadataImage;
use streamforge_metadata::controller::{AlterPartition, Reply};
use tokio::sync::watch;

use crate::BrokerState;
use crate::inter_broker::PeerAddr;
use crate::partition::replica::IsrChangeOutcome;
use crate::partition::{AlterPartitionIntent, Partition, PartitionRole};

/// The wiring looks again this often without a metadata change (a fetcher that dropped a
/// fenced partition gets it back once the metadata moves on).
pub const RESYNC_INTERVAL_MS: u64 = 1_000;

/// Run until `shutdown`: the fetchers follow the image, ISR changes go to the controller.
pub async fn run(state: Arc<BrokerState>, shutdown: watch::Receiver<bool>) {
    let intents = state.spawn(send_isr_changes(state.clone(), shutdown.clone()));
    follow_image(state, shutdown).await;
    let _ = intents.await;
}

async fn follow_image(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let mut roles = state.replicas.watch_roles();
    loop {
        roles.borrow_and_update();
        let st = state.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || sync_fetchers(&st)).await {
            tracing::error!(error = %e, "syncing the replica fetchers failed");
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = roles.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(RESYNC_INTERVAL_MS)) => {}
        }
    }
}

/// Peers' addresses from the image, then every follower partition fetched from its leader.
fn sync_fetchers(state: &BrokerState) {
    let image = state.replicas.image();
    let listener = state.fetchers.link().listener_name();
    let peers = peer_addresses(&image, listener, state.node_id());
    for (id, addr) in peers.reachable {
        state.fetchers.set_peer(id, addr);
    }
    state.fetchers.set_unreachable(peers.missing);
    // Topic ids and broker epochs mean the same on the leader only when the image is the
    // cluster's: a standalone broker (its own one-voter quorum, made to follow by hand as in
    // the single-process tests) fetches by name, with no epoch.
    if state.replicas.metadata().is_cluster() {
        let topic_ids = image.topics().map(|t| (t.name.clone(), t.id)).collect();
        (state.fetchers).set_image_facts(topic_ids, state.replicas.metadata().broker_epoch());
    }
    let wanted: Vec<(Arc<Partition>, i32)> = state
        .replicas
        .all_partitions()
        .into_iter()
        .filter(|p| p.role() == PartitionRole::Follower)
        .filter_map(|p| {
            let leader = p.leader_id()?;
            Some((p, leader))
        })
        .collect();
    state.fetchers.sync(wanted);
}

/// The other registered brokers, by whether they can be reached on the inter-broker listener.
#[derive(Debug, Default)]
pub struct Peers {
    /// Each one's endpoint on that listener, resolved.
    pub reachable: HashMap<i32, PeerAddr>,
    /// Registered without an endpoint of that name: not reached at all (Kafka does not fall
    /// back to another listener either).
    pub missing: BTreeSet<i32>,
}

/// Where each other registered broker listens on `listener` (`inter.broker.listener.name`).
/// Names that do not resolve are left out (logged); a broker without that listener is
/// `missing`.
pub fn peer_addresses(image: &MetadataImage, listener: &str, local: i32) -> Peers {
    let mut out = Peers::default();
    for (&id, broker) in image.brokers() {
        if id == local {
            continue;
        }
        let Some(e) = broker.endpoints.iter().find(|e| e.name == listener) else {
            out.missing.insert(id);
            continue;
        };
        match (e.host.as_str(), e.port).to_socket_addrs() {
            Ok(mut addrs) => {
                if let Some(addr) = addrs.next() {
                    let host = e.host.clone();
                    out.reachable.insert(id, PeerAddr { addr, host });
                }
            }
            Err(error) => {
                tracing::warn!(broker = id, host = %e.host, port = e.port, %error, "broker address does not resolve");
            }
        }
    }
    out
}

/// Send each queued ISR change to the controller, one at a time (each waits for its commit).
async fn send_isr_changes(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    let intents = state.replicas.isr_intents().clone();
    loop {
        let batch = intents.take();
        if batch.is_empty() {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = intents.wait() => continue,
            }
        }
        for intent in batch {
            if *shutdown.borrow() {
                return;
            }
            let st = state.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || send_one(&st, intent)).await {
                tracing::error!(error = %e, "sending an ISR change failed");
            }
        }
    }
}

/// AlterPartition for `intent`; the leader hears what became of it ([`IsrChangeOutcome`]):
/// committed, refused, or open (no answer: it may have committed, so the leader keeps counting
/// it and sends it again).
fn send_one(state: &BrokerState, intent: AlterPartitionIntent) {
    let Some(partition) = state.replicas.partition(&intent.topic, intent.partition) else {
        return;
    };
    let Some(topic_id) = state
        .replicas
        .image()
        .topic_by_name(&intent.topic)
        .map(|t| t.id)
    else {
        partition.complete_isr_change(&intent.change, IsrChangeOutcome::Refused);
        return;
    };
    let change = AlterPartition {
        broker_id: state.node_id(),
        broker_epoch: state.replicas.metadata().broker_epoch(),
        topic_id,
        partition: intent.partition,
        leader_epoch: intent.change.leader_epoch,
        partition_epoch: intent.change.partition_epoch,
        new_isr: intent.change.new_isr.clone(),
    };
    let outcome = match state.replicas.alter_partition(change) {
        Ok(Reply::AlterPartition(Ok(committed))) => {
            tracing::info!(topic = %intent.topic, partition = intent.partition, isr = ?committed.isr, partition_epoch = committed.partition_epoch, "ISR change committed");
            IsrChangeOutcome::Committed(committed.isr, committed.partition_epoch)
        }
        Ok(Reply::AlterPartition(Err(code))) => {
            tracing::info!(topic = %intent.topic, partition = intent.partition, ?code, new_isr = ?intent.change.new_isr, "the controller refused an ISR change");
            outcome_of_refusal(code)
        }
        Ok(other) => {
            tracing::info!(topic = %intent.topic, partition = intent.partition, reply = ?other, "no controller for an ISR change");
            IsrChangeOutcome::Unknown
        }
        Err(error) => {
            tracing::warn!(topic = %intent.topic, partition = intent.partition, %error, "ISR change not answered");
            IsrChangeOutcome::Unknown
        }
    };
    partition.complete_isr_change(&intent.change, outcome);
}

/// What a refusal says about the change: a newer epoch at the controller may be this change
/// committed by an earlier try whose answer was lost (the metadata settles it); NOT_CONTROLLER
/// says nothing; anything else changed nothing.
fn outcome_of_refusal(code: ResponseError) -> IsrChangeOutcome {
    match code {
        ResponseError::InvalidUpdateVersion | ResponseError::FencedLeaderEpoch => {
            IsrChangeOutcome::Superseded
        }
        ResponseError::NotController | ResponseError::RequestTimedOut => IsrChangeOutcome::Unknown,
        _ => IsrChangeOutcome::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamforge_metadata::records::{Endpoint, Record, RegisterBroker};

    fn image_with(brokers: &[(i32, Vec<Endpoint>)]) -> MetadataImage {
        let records: Vec<Record> = brokers
            .iter()
            .map(|(id, endpoints)| {
                Record::RegisterBroker(RegisterBroker {
                    broker_id: *id,
                    broker_epoch: 1,
                    incarnation_id: uuid::Uuid::nil(),
                    endpoints: endpoints.clone(),
                    rack: None,
                    fenced: false,
                })
            })
            .collect();
        let at = |offset: usize| streamforge_metadata::LogPosition {
            offset: offset as i64 + 1,
            epoch: 1,
        };
        let (image, _) = MetadataImage::default()
            .apply_all(records.iter().enumerate().map(|(i, r)| (r, at(i))))
            .expect("applies");
        image
    }

    fn endpoint(name: &str, port: u16) -> Endpoint {
        Endpoint {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
        }
    }

    #[test]
    fn peers_are_reached_on_the_inter_broker_listener_only() {
        let image = image_with(&[
            (1, vec![endpoint("PLAINTEXT", 9092)]),
            (
                2,
                vec![endpoint("SASL_SSL", 9193), endpoint("PLAINTEXT", 9192)],
            ),
            (3, vec![endpoint("OTHER", 9292)]),
        ]);
        let peers = peer_addresses(&image, "PLAINTEXT", 1);
        assert_eq!(peers.reachable.len(), 1, "not itself: {peers:?}");
        assert_eq!(peers.reachable[&2].addr.port(), 9192);
        assert_eq!(peers.reachable[&2].host, "127.0.0.1");
        assert_eq!(peers.missing, BTreeSet::from([3]), "not sent elsewhere");
        let peers = peer_addresses(&image, "SASL_SSL", 1);
        assert_eq!(peers.reachable[&2].addr.port(), 9193);
        assert_eq!(peers.missing, BTreeSet::from([3]));
    }
}

//! Replication between brokers in one process, over their real Kafka listeners: acks=all
//! waits for the follower, the follower's log equals the leader's up to the high watermark,
//! a stopped follower drops out of the ISR (then acks=all with min.insync.replicas=2 gets
//! NOT_ENOUGH_REPLICAS, and acks=1 records stay invisible until the ISR is back at min ISR),
//! a restarted one catches up and rejoins, and after a leader change the
//! old leader's unreplicated tail is truncated. The test plays the controller: it drives the
//! roles and accepts the leader's ISR changes.

mod support;

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use streamforge_broker::partition::PartitionOffsets;
use streamforge_broker::partition::replica::LeaderAndIsr;
use streamforge_broker::{BrokerConfig, BrokerHandle};
use support::group_client::RawClient;
use support::{controller, lead_and_follow, replica_config, start_with_topic, wait_for};

const TOPIC: &str = "replicated";
const LAG_MS: i64 = 1_000;

async fn start(dir: &std::path::Path, node_id: i32) -> BrokerHandle {
    let config = BrokerConfig {
        replica_lag_time_max_ms: LAG_MS,
        ..replica_config(dir, node_id)
    };
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
    start_with_topic(config, TOPIC, configs).await
}

fn offsets(b: &BrokerHandle) -> PartitionOffsets {
    support::offsets(b, TOPIC)
}

async fn produce(client: &mut RawClient, acks: i16, timeout_ms: i32) -> i16 {
    support::produce(client, TOPIC, acks, timeout_ms).await
}

fn batch_ids(b: &BrokerHandle, up_to: i64) -> Vec<(i64, i64, i32, u32)> {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.batch_ids(up_to).unwrap()
}

/// The leader epoch `b`'s metadata image names for the partition, once `b` leads it there.
fn image_epoch(b: &BrokerHandle) -> Option<i32> {
    let image = b.state().replicas.image();
    if !image.is_unfenced(b.state().node_id()) {
        return None;
    }
    let p = image.topic_by_name(TOPIC)?.partitions.get(&0)?;
    (p.leader == b.state().node_id()).then_some(p.leader_epoch)
}

fn isr(b: &BrokerHandle) -> Vec<i32> {
    let p = b.state().replicas.partition(TOPIC, 0).unwrap();
    p.replica_status().map(|s| s.1).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_replicates_leaves_and_rejoins_the_isr_and_truncates_after_a_leader_change() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(dir_a.path(), 1).await;
    let mut b = start(dir_b.path(), 2).await;
    lead_and_follow(&a, &b, TOPIC, 1);

    // acks=all succeeds once the follower has the batch; logs agree up to the HW.
    let mut client = RawClient::connect(a.kafka_addr()).await;
    for _ in 0..20 {
        assert_eq!(produce(&mut client, -1, 10_000).await, 0);
    }
    let hw = offsets(&a).high_watermark;
    assert_eq!(hw, 100);
    wait_for("the follower's HW", || offsets(&b).high_watermark == hw).await;
    assert_eq!(batch_ids(&a, hw), batch_ids(&b, hw));

    // The follower stops: after replica.lag.time.max.ms it leaves the ISR. The acks=all
    // request waiting meanwhile times out (under min ISR the high watermark cannot pass its
    // batch: KIP-966), and acks=all with min.insync.replicas=2 is then refused.
    b.shutdown().await;
    let waited = produce(&mut client, -1, 3_000).await;
    assert_eq!(waited, ResponseError::RequestTimedOut.code());
    wait_for("the ISR to shrink", || isr(&a) == vec![1]).await;
    assert_eq!(
        produce(&mut client, -1, 10_000).await,
        ResponseError::NotEnoughReplicas.code()
    );
    assert_eq!(
        produce(&mut client, 1, 10_000).await,
        0,
        "acks=1 still works"
    );
    // ... but consumers do not see it (nor the timed-out batch) while the ISR is under min ISR.
    let under_min = offsets(&a);
    assert_eq!(under_min.high_watermark, hw);
    assert!(under_min.log_end_offset > hw);

    // It restarts, catches up and rejoins; acks=all works again. Its restart bumped the
    // leader epoch in its own (one-voter) metadata, so this test's "controller" moves both
    // brokers to that epoch, as a controller's election after a restart would.
    b = start(dir_b.path(), 2).await;
    wait_for("B's own election after its restart", || {
        image_epoch(&b)
            == Some(
                b.state()
                    .replicas
                    .partition(TOPIC, 0)
                    .unwrap()
                    .leader_epoch(),
            )
    })
    .await;
    let epoch = image_epoch(&b).unwrap().max(1);
    let relead = LeaderAndIsr {
        leader_epoch: epoch,
        partition_epoch: 5,
        replicas: vec![1, 2],
        isr: vec![1],
    };
    a.state()
        .lead(TOPIC, 0, relead, controller(a.state(), 5))
        .unwrap();
    b.state().fetchers.set_peer(1, a.kafka_addr());
    b.state().follow(TOPIC, 0, epoch, 1).unwrap();
    wait_for("the ISR to grow back", || isr(&a) == vec![1, 2]).await;
    wait_for(
        "the records appended under min ISR to become visible",
        || offsets(&a).high_watermark >= under_min.log_end_offset,
    )
    .await;
    assert_eq!(produce(&mut client, -1, 10_000).await, 0);
    let hw = offsets(&a).high_watermark;
    wait_for("the follower's HW", || offsets(&b).high_watermark == hw).await;

    // Leader change: B leads the next epoch; A, still believing it leads the old one, takes an
    // acks=1 batch B never sees. A then follows B and truncates that tail by epoch.
    let lead_2 = LeaderAndIsr {
        leader_epoch: epoch + 1,
        partition_epoch: 10,
        replicas: vec![1, 2],
        isr: vec![2, 1],
    };
    b.state()
        .lead(TOPIC, 0, lead_2, controller(b.state(), 10))
        .unwrap();
    assert_eq!(produce(&mut client, 1, 10_000).await, 0);
    let stale_end = offsets(&a).log_end_offset;
    a.state().fetchers.set_peer(2, b.kafka_addr());
    a.state().follow(TOPIC, 0, epoch + 1, 2).unwrap();
    let mut client_b = RawClient::connect(b.kafka_addr()).await;
    for _ in 0..3 {
        assert_eq!(produce(&mut client_b, 1, 10_000).await, 0);
    }
    let end = offsets(&b).log_end_offset;
    wait_for("A to replicate the new epoch", || {
        offsets(&a).log_end_offset == end
    })
    .await;
    assert_eq!(batch_ids(&a, end), batch_ids(&b, end));
    let epochs: Vec<i32> = batch_ids(&a, end).iter().map(|b| b.2).collect();
    assert!(
        epochs.contains(&(epoch + 1)) && stale_end > hw,
        "the stale tail was replaced"
    );
    a.shutdown().await;
    b.shutdown().await;
}

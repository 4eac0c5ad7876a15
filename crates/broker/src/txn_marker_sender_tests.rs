//! Markers on partitions led here (the WriteTxnMarkers handler and the sender's own
//! partitions): every marker appended before any wait, then one wait for all the ISRs with a
//! per-partition answer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use streamforge_log::{LogConfig, TxnMarker};
use streamforge_protocol::control::ControlType;

use super::*;
use crate::fetcher::replicate_once;
use crate::partition::replica::{LeaderAndIsr, ReplicaConfig};
use crate::partition::{Partition, RemoteTier};

const MAX_BYTES: usize = 1 << 20;

/// Partition `index` of topic "t", led by broker 1 with broker 2 in its ISR.
fn leader(dir: &Path, index: i32) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from("t");
    let p = Arc::new(
        Partition::create(
            &topic,
            index,
            dir,
            LogConfig::default(),
            RemoteTier::default(),
        )
        .unwrap(),
    );
    let state = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    let config = ReplicaConfig {
        replica_lag_time_max_ms: 10_000,
        min_insync_replicas: 1,
    };
    p.make_leader_replicated(1, state, config, Arc::new(|_| {}), 0)
        .unwrap();
    p
}

fn follower(dir: &Path, index: i32) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from("t");
    let p = Arc::new(
        Partition::create(
            &topic,
            index,
            dir,
            LogConfig::default(),
            RemoteTier::default(),
        )
        .unwrap(),
    );
    p.make_follower(1, 1).unwrap();
    p
}

fn write(partition: i32) -> MarkerWrite {
    MarkerWrite {
        topic: "t".to_string(),
        partition,
        marker: TxnMarker {
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: 0,
            kind: ControlType::Commit,
        },
        transactional_id: None,
    }
}

/// The follower fetches (gets the marker), then fetches again (acknowledging it).
fn replicate(leader: &Partition, follower: &Partition) {
    replicate_once(leader, follower, 2, MAX_BYTES, 1).unwrap();
    replicate_once(leader, follower, 2, MAX_BYTES, 2).unwrap();
}

#[tokio::test]
async fn every_marker_is_appended_before_one_wait_for_all_the_isrs() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let leaders = [leader(dirs[0].path(), 0), leader(dirs[1].path(), 1)];
    let followers = [follower(dirs[2].path(), 0), follower(dirs[3].path(), 1)];
    let by_index = leaders.clone();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let appended = append_markers(vec![write(0), write(9), write(1)], move |_, i| {
        by_index.get(i as usize).cloned().ok_or(unknown)
    });
    // Both markers are in their leaders' logs before anything waits; neither is committed.
    for p in &leaders {
        let o = p.offsets().unwrap();
        assert_eq!((o.log_end_offset, o.high_watermark), (1, 0));
    }
    let wait = tokio::spawn(async move {
        appended
            .wait(&ProducePurgatory::default(), Duration::from_secs(10))
            .await
    });
    // The second partition's follower first: the answer waits for both, in any order.
    replicate(&leaders[1], &followers[1]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !wait.is_finished(),
        "answered before the first partition's ISR had it"
    );
    replicate(&leaders[0], &followers[0]);
    assert_eq!(wait.await.unwrap(), vec![0, unknown, 0]);
}

#[tokio::test]
async fn a_partition_not_replicated_in_time_answers_its_own_error() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let leaders = [leader(dirs[0].path(), 0), leader(dirs[1].path(), 1)];
    let follower0 = follower(dirs[2].path(), 0);
    let by_index = leaders.clone();
    let appended = append_markers(vec![write(0), write(1)], move |_, i| {
        Ok(by_index[i as usize].clone())
    });
    replicate(&leaders[0], &follower0);
    let codes = appended
        .wait(&ProducePurgatory::default(), Duration::from_millis(50))
        .await;
    assert_eq!(codes, vec![0, ResponseError::RequestTimedOut.code()]);
}

#[tokio::test]
async fn a_partition_not_led_here_is_answered_without_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let not_leader = follower(dir.path(), 0);
    let appended = append_markers(vec![write(0)], move |_, _| Ok(not_leader.clone()));
    let codes = appended
        .wait(&ProducePurgatory::default(), Duration::from_secs(10))
        .await;
    assert_eq!(codes, vec![ResponseError::NotLeaderOrFollower.code()]);
}

//! The replica protocol between two `Partition`s in process (leader 1, follower 2): acks=all
//! waits for the ISR, stale epochs are fenced, divergent tails are truncated by epoch, a
//! lagging follower leaves the ISR and comes back.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use streamforge_log::LogConfig;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

use super::*;
use crate::partition::purgatory::ProducePurgatory;
use crate::partition::replica::{IsrChangeOutcome, LeaderAndIsr, ReplicaConfig, Replication};
use crate::partition::replica_selector::ReplicaSelectorKind;
use crate::partition::{
    Acks, AlterPartitionIntent, AppendParams, IsrChangeSink, Partition, RemoteTier,
};

const LAG_MS: i64 = 10_000;
const ALL: AppendParams = AppendParams { acks: Acks::All };
const MAX_BYTES: usize = 1 << 20;

fn open(dir: &Path) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from("t");
    let config = LogConfig {
        segment_bytes: 8192,
        ..LogConfig::default()
    };
    Arc::new(Partition::create(&topic, 0, dir, config, RemoteTier::default()).unwrap())
}

/// A sink that keeps the intents for the test to answer.
fn sink() -> (IsrChangeSink, Arc<Mutex<Vec<AlterPartitionIntent>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (Arc::new(move |i| s.lock().push(i)), seen)
}

fn lead(p: &Partition, epoch: i32, isr: &[i32], min_isr: usize, sink: IsrChangeSink) {
    lead_as(1, p, epoch, isr, min_isr, sink)
}

fn lead_as(id: i32, p: &Partition, epoch: i32, isr: &[i32], min_isr: usize, sink: IsrChangeSink) {
    let state = LeaderAndIsr {
        leader_epoch: epoch,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: isr.to_vec(),
    };
    let config = ReplicaConfig {
        replica_lag_time_max_ms: LAG_MS,
        min_insync_replicas: min_isr,
    };
    p.make_leader_replicated(id, state, config, sink, 0)
        .unwrap();
}

fn produce(p: &Partition, records: usize) -> i64 {
    let batch = &mut build_simple(BatchSpec::default(), records, 50);
    p.append(batch, ALL).unwrap().last_offset + 1
}

#[tokio::test]
async fn acks_all_waits_until_the_follower_has_the_batch() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 2, sink().0);
    follower.make_follower(1, 1).unwrap();
    let end = produce(&leader, 10);
    assert_eq!(
        leader.offsets().unwrap().high_watermark,
        0,
        "not committed yet"
    );
    let purgatory = ProducePurgatory::default();
    let waits = vec![(leader.clone(), end)];
    let timed_out = purgatory.wait(&waits, Duration::from_millis(20)).await;
    assert_eq!(
        timed_out[0].as_ref().unwrap_err().kafka_code(),
        ResponseError::RequestTimedOut.code()
    );
    // The follower fetches (gets the batch), then fetches again (acknowledging it).
    let wait = tokio::spawn(async move {
        ProducePurgatory::default()
            .wait(&waits, Duration::from_secs(10))
            .await
    });
    replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 2).unwrap();
    assert!(wait.await.unwrap()[0].is_ok());
    assert_eq!(leader.offsets().unwrap().high_watermark, end);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 3).unwrap();
    assert_eq!(follower.offsets().unwrap().high_watermark, end);
    assert_eq!(
        leader.batch_ids(end).unwrap(),
        follower.batch_ids(end).unwrap()
    );
    // Consumers of the leader see only committed records.
    let pending = produce(&leader, 5);
    let o = leader.offsets().unwrap();
    assert_eq!((o.high_watermark, o.log_end_offset), (end, pending));
}

/// The cluster loop's lost acknowledgement (docs/REPLICATION.md, "acks=all and a leader
/// change"): an acks=all append whose partition stops leading before the handler decides
/// whether to wait (the controller's preferred-leader rebalance landed in between) must be
/// answered NOT_LEADER_OR_FOLLOWER, never as a success. The handler took every answer but
/// `Pending` for "no wait", so the error of the lost leadership read as "replicated": the
/// producer held records as acknowledged that only the old leader had, which the new leader
/// (without them) then truncated away.
#[tokio::test]
async fn an_acks_all_append_whose_leadership_moves_before_the_check_is_not_acknowledged() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 2, sink().0);
    follower.make_follower(1, 1).unwrap();
    let end = produce(&leader, 10);
    // Leadership moves to the follower (which never fetched the batch) before the check.
    follower.make_leader(2).unwrap();
    leader.make_follower(2, 2).unwrap();
    assert!(
        crate::partition::purgatory::must_wait(&leader, end, Some(1)),
        "an append that lost its leadership is answered through the wait, not at once"
    );
    let answered = ProducePurgatory::default()
        .wait(&[(leader.clone(), end)], Duration::from_secs(5))
        .await;
    assert_eq!(
        answered[0].as_ref().unwrap_err().kafka_code(),
        ResponseError::NotLeaderOrFollower.code()
    );
    // What it was about: the new leader does not have the batch.
    assert_eq!(follower.offsets().unwrap().log_end_offset, 0);
    // Leadership back here in a later epoch, alone in the ISR: the HW passes the batch, but
    // the append's leadership ended (its log could have been truncated and refilled since).
    lead(&leader, 3, &[1], 1, sink().0);
    assert!(matches!(leader.replication(end), Ok(Replication::Done)));
    assert!(crate::partition::purgatory::must_wait(
        &leader,
        end,
        Some(1)
    ));
    let answered = ProducePurgatory::default()
        .wait_in_leadership(&[(leader.clone(), end, 1)], Duration::from_secs(5))
        .await;
    assert_eq!(
        answered[0].as_ref().unwrap_err().kafka_code(),
        ResponseError::NotLeaderOrFollower.code()
    );
    assert!(!crate::partition::purgatory::must_wait(
        &leader,
        end,
        Some(3)
    ));
}

#[test]
fn a_follower_with_a_stale_epoch_is_fenced() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 3, &[1, 2], 1, sink().0);
    follower.make_follower(2, 1).unwrap();
    let e = replicate_once(&leader, &follower, 2, MAX_BYTES, 0).unwrap();
    assert_eq!(e, Applied::Stop(ResponseError::FencedLeaderEpoch.code()));
    // A newer epoch than the leader knows: UNKNOWN_LEADER_EPOCH.
    follower.make_follower(4, 1).unwrap();
    let e = replicate_once(&leader, &follower, 2, MAX_BYTES, 0).unwrap();
    assert_eq!(e, Applied::Stop(ResponseError::UnknownLeaderEpoch.code()));
}

#[test]
fn a_divergent_tail_is_truncated_by_epoch_after_a_leader_change() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (p1, p2) = (open(a.path()), open(b.path()));
    // Epoch 1: broker 2 leads, both have 10 records.
    lead_as(2, &p2, 1, &[1, 2], 1, sink().0);
    p1.make_follower(1, 2).unwrap();
    produce(&p2, 10);
    for _ in 0..2 {
        let applied = replicate_once(&p2, &p1, 1, MAX_BYTES, 0).unwrap();
        assert!(matches!(applied, Applied::Appended { .. }), "{applied:?}");
    }
    assert_eq!(p2.offsets().unwrap().high_watermark, 10);
    // Broker 2 appends 5 more nobody gets (never acknowledged), then loses leadership.
    produce(&p2, 5);
    assert_eq!(p2.offsets().unwrap().log_end_offset, 15);
    lead(&p1, 2, &[1, 2], 1, sink().0);
    produce(&p1, 3);
    p2.make_follower(2, 1).unwrap();
    // Broker 2 truncates its epoch-1 tail to where epoch 1 ended on the new leader, then
    // replicates epoch 2.
    let first = replicate_once(&p1, &p2, 2, MAX_BYTES, 1).unwrap();
    assert_eq!(
        first,
        Applied::Truncated {
            log_end_offset: 10,
            done: true
        }
    );
    for now in 2..5 {
        replicate_once(&p1, &p2, 2, MAX_BYTES, now).unwrap();
    }
    let end = p1.offsets().unwrap().log_end_offset;
    assert_eq!(p1.offsets().unwrap().high_watermark, end);
    assert_eq!(p1.batch_ids(end).unwrap(), p2.batch_ids(end).unwrap());
}

#[tokio::test]
async fn a_lagging_follower_leaves_the_isr_and_comes_back_when_caught_up() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    let (sink, intents) = sink();
    lead(&leader, 1, &[1, 2], 2, sink);
    follower.make_follower(1, 1).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 0).unwrap();
    let end = produce(&leader, 10);
    // The follower stops fetching; after the lag time the leader proposes dropping it.
    leader.maybe_shrink_isr(LAG_MS / 2);
    assert!(intents.lock().is_empty());
    leader.maybe_shrink_isr(LAG_MS + 1);
    let intent = intents.lock().pop().unwrap();
    assert_eq!(intent.change.new_isr, vec![1]);
    // Until the controller accepts, acks=all is still allowed. Once it does, the ISR (the
    // leader alone) is under min.insync.replicas=2, so the high watermark cannot pass the
    // waiting batch (KIP-966's strict min ISR): the wait times out, as in Kafka 4.
    leader.complete_isr_change(
        &intent.change,
        IsrChangeOutcome::Committed(intent.change.new_isr.clone(), 1),
    );
    let waits = vec![(leader.clone(), end)];
    let r = ProducePurgatory::default()
        .wait(&waits, Duration::from_millis(50))
        .await;
    assert_eq!(
        r[0].as_ref().unwrap_err().kafka_code(),
        ResponseError::RequestTimedOut.code()
    );
    let batch = &mut build_simple(BatchSpec::default(), 1, 10);
    let e = leader.append(batch, ALL).unwrap_err();
    assert_eq!(e.kafka_code(), ResponseError::NotEnoughReplicas.code());
    // acks=1 is appended and acknowledged, but consumers do not see it yet.
    let batch = &mut build_simple(BatchSpec::default(), 1, 10);
    let one_end = leader
        .append(batch, AppendParams { acks: Acks::Leader })
        .unwrap()
        .last_offset
        + 1;
    let o = leader.offsets().unwrap();
    assert_eq!((o.high_watermark, o.log_end_offset), (0, one_end));
    // A waiting consumer fetch (on the HW watch) and an acks=all wait wake once it moves.
    let mut hw_watch = leader.watch_high_watermark();
    hw_watch.borrow_and_update();
    let waiting = tokio::spawn(async move {
        ProducePurgatory::default()
            .wait(&waits, Duration::from_secs(10))
            .await
    });
    // The follower comes back, reaches the high watermark and is proposed again; the high
    // watermark moves only once the controller accepts.
    for now in 0..3 {
        replicate_once(&leader, &follower, 2, MAX_BYTES, LAG_MS + 10 + now).unwrap();
    }
    assert_eq!(leader.offsets().unwrap().high_watermark, 0);
    assert!(!hw_watch.has_changed().unwrap());
    let intent = intents.lock().pop().unwrap();
    assert_eq!(intent.change.new_isr, vec![1, 2]);
    leader.complete_isr_change(
        &intent.change,
        IsrChangeOutcome::Committed(intent.change.new_isr.clone(), 2),
    );
    assert_eq!(leader.replica_status().unwrap().1, vec![1, 2]);
    assert_eq!(leader.offsets().unwrap().high_watermark, one_end);
    assert!(hw_watch.has_changed().unwrap());
    assert!(waiting.await.unwrap()[0].is_ok());
    let batch = &mut build_simple(BatchSpec::default(), 1, 10);
    leader.append(batch, ALL).unwrap();
}

#[test]
fn a_response_cut_inside_a_batch_keeps_only_whole_batches() {
    let one = build_simple(BatchSpec::default(), 3, 20);
    let mut two = one.clone();
    two.extend_from_slice(&one);
    assert_eq!(whole_batches(&two).len(), two.len());
    assert_eq!(whole_batches(&two[..two.len() - 1]).len(), one.len());
    assert_eq!(whole_batches(&two[..5]).len(), 0);
}

/// KIP-392: a consumer's read (v11+ unless `any_replica` is false) at `offset`.
async fn consumer_read(
    p: &Partition,
    offset: i64,
    epoch: i32,
    any_replica: bool,
) -> Result<crate::partition::ReadResult, crate::partition::PartitionError> {
    let params = crate::partition::FetchParams {
        fetch_offset: offset,
        max_bytes: MAX_BYTES,
        min_one_message: true,
        isolation: crate::partition::FetchIsolation::HighWatermark,
        replica_id: -1,
    };
    let fetch = crate::partition::ConsumerFetch {
        current_leader_epoch: epoch,
        any_replica,
    };
    p.read_for_consumer(params, fetch).await
}

#[tokio::test]
async fn a_follower_serves_consumers_up_to_its_high_watermark() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    let end = produce(&leader, 10);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    // The follower has the batch but not yet the leader's HW that commits it.
    let read = consumer_read(&follower, 0, 1, true).await.unwrap();
    assert_eq!(read.records.unwrap().bytes, 0);
    assert_eq!(read.offsets.high_watermark, 0);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 2).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 3).unwrap();
    let read = consumer_read(&follower, 0, 1, true).await.unwrap();
    assert!(read.records.unwrap().bytes > 0);
    assert_eq!(read.offsets.high_watermark, end);
    // Past its HW but within its log: nothing yet (the fetch waits); past its log end:
    // OFFSET_OUT_OF_RANGE, after which the consumer goes back to the leader.
    let pending = produce(&leader, 5);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 4).unwrap();
    let o = follower.offsets().unwrap();
    assert_eq!((o.high_watermark, o.log_end_offset), (end, pending));
    let read = consumer_read(&follower, end + 2, 1, true).await.unwrap();
    assert_eq!(read.records.unwrap().bytes, 0);
    let read = consumer_read(&follower, pending + 1, 1, true)
        .await
        .unwrap();
    assert_eq!(
        read.records.unwrap_err().kafka_code(),
        ResponseError::OffsetOutOfRange.code()
    );
}

#[tokio::test]
async fn a_follower_checks_the_consumers_leader_epoch_and_fetch_version() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 3, &[1, 2], 1, sink().0);
    follower.make_follower(3, 1).unwrap();
    let code = |r: Result<crate::partition::ReadResult, crate::partition::PartitionError>| {
        r.map(|_| 0).unwrap_or_else(|e| e.kafka_code())
    };
    assert_eq!(code(consumer_read(&follower, 0, 3, true).await), 0);
    assert_eq!(code(consumer_read(&follower, 0, -1, true).await), 0);
    assert_eq!(
        code(consumer_read(&follower, 0, 2, true).await),
        ResponseError::FencedLeaderEpoch.code()
    );
    assert_eq!(
        code(consumer_read(&follower, 0, 4, true).await),
        ResponseError::UnknownLeaderEpoch.code()
    );
    // Fetch before v11 (no client metadata) reads from the leader only.
    assert_eq!(
        code(consumer_read(&follower, 0, 3, false).await),
        ResponseError::NotLeaderOrFollower.code()
    );
    // The leader checks the epoch too; a stopped replica is gone, as a stopped leader is.
    assert_eq!(
        code(consumer_read(&leader, 0, 2, false).await),
        ResponseError::FencedLeaderEpoch.code()
    );
    follower.stop(false).unwrap();
    assert_eq!(
        code(consumer_read(&follower, 0, -1, true).await),
        ResponseError::UnknownTopicOrPartition.code()
    );
}

#[test]
fn the_leader_offers_in_sync_followers_with_their_log_range() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    let end = produce(&leader, 10);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 5).unwrap();
    let (me, followers) = leader.read_replica_candidates(105).unwrap();
    assert_eq!((me.id, me.log_end_offset), (1, end));
    assert_eq!(followers.len(), 1);
    let f = &followers[0];
    assert_eq!((f.id, f.log_start_offset, f.log_end_offset), (2, 0, end));
    assert_eq!(f.time_since_caught_up_ms, 100);
    assert!(
        f.has_offset(end) && !f.has_offset(end + 1),
        "not past its log end"
    );
    assert!(follower.read_replica_candidates(105).is_none());
}

#[test]
fn a_follower_whose_log_starts_after_the_fetch_offset_is_not_named() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    let start = produce(&leader, 10);
    // The follower holds only what came after `start` (as after the leader's retention
    // passed it); its fetches say so.
    follower.restart_follower_at(1, start).unwrap();
    let end = produce(&leader, 10);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 2).unwrap();
    assert_eq!(follower.offsets().unwrap().log_end_offset, end);
    let (mut me, mut followers) = leader.read_replica_candidates(3).unwrap();
    assert_eq!(followers[0].log_start_offset, start);
    me.rack = Some("a".into());
    followers[0].rack = Some("b".into());
    let select = |offset| ReplicaSelectorKind::RackAware.select("b", offset, &me, &followers);
    assert_eq!(
        select(start - 1),
        None,
        "below its log start: the leader serves"
    );
    assert_eq!(select(start), Some(2));
    assert_eq!(select(end), Some(2));
    assert_eq!(select(end + 1), None, "past its log end");
}

#[test]
fn a_follower_outside_the_isr_is_not_offered() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    let (_, followers) = leader.read_replica_candidates(2).unwrap();
    assert!(followers.is_empty());
}

#[tokio::test]
async fn a_follower_below_a_tiered_leaders_local_log_start_restarts_there() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    let config = LogConfig {
        segment_bytes: 8192,
        ..LogConfig::default()
    };
    leader.update_config(config, true); // remote.storage.enable=true
    lead(&leader, 1, &[1], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    let mut end = 0;
    for _ in 0..20 {
        end = produce(&leader, 20);
    }
    // The leader's local retention deleted below `local_start` (its data is remote).
    let local_start = end / 2;
    leader.delete_local_records_before(local_start).unwrap();
    assert_eq!(
        leader.offsets().unwrap().local_log_start_offset,
        local_start
    );
    // Fetch at 0: OFFSET_MOVED_TO_TIERED_STORAGE, not OFFSET_OUT_OF_RANGE.
    let params = crate::partition::FetchParams {
        fetch_offset: 0,
        max_bytes: MAX_BYTES,
        min_one_message: true,
        isolation: crate::partition::FetchIsolation::LogEnd,
        replica_id: 2,
    };
    let fetch = crate::partition::FollowerFetch {
        replica_id: 2,
        current_leader_epoch: 1,
        last_fetched_epoch: -1,
        log_start_offset: -1,
        throttled: false,
    };
    let read = leader.read_for_follower(params, fetch, 0).unwrap();
    let err = read.read.records.unwrap_err();
    assert_eq!(
        err.kafka_code(),
        ResponseError::OffsetMovedToTieredStorage.code()
    );
    // The follower starts at the leader's local log start and replicates from there.
    let applied = replicate_once(&leader, &follower, 2, MAX_BYTES, 1).unwrap();
    assert_eq!(
        applied,
        Applied::Appended {
            log_end_offset: local_start
        }
    );
    assert_eq!(
        follower.offsets().unwrap().local_log_start_offset,
        local_start
    );
    for now in 2..100 {
        if follower.offsets().unwrap().log_end_offset == end {
            break;
        }
        replicate_once(&leader, &follower, 2, MAX_BYTES, now).unwrap();
    }
    assert_eq!(follower.offsets().unwrap().log_end_offset, end);
}

#[tokio::test]
async fn a_follower_moves_its_log_start_to_the_leaders_after_delete_records() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, follower) = (open(a.path()), open(b.path()));
    lead(&leader, 1, &[1, 2], 1, sink().0);
    follower.make_follower(1, 1).unwrap();
    // Four batches (a `map(..).last()` would be `next_back()` to clippy, which produces one).
    let mut end = 0;
    for _ in 0..4 {
        end = produce(&leader, 50);
    }
    for now in 0..3 {
        replicate_once(&leader, &follower, 2, MAX_BYTES, now).unwrap();
    }
    assert_eq!(follower.offsets().unwrap().high_watermark, end);
    assert_eq!(follower.offsets().unwrap().log_start_offset, 0);

    assert_eq!(leader.delete_records(120).await.unwrap(), 120);
    replicate_once(&leader, &follower, 2, MAX_BYTES, 4).unwrap();
    let o = follower.offsets().unwrap();
    assert_eq!(
        (o.log_start_offset, o.high_watermark, o.log_end_offset),
        (120, end, end),
        "the follower's low watermark is the leader's; its log is otherwise unchanged"
    );
    assert_eq!(
        leader.batch_ids(end).unwrap(),
        follower.batch_ids(end).unwrap()
    );
}

//! Unit tests of `Partition`: append, read (local and remote), list offsets, delete records,
//! roles and epochs, each with the Kafka error code a client gets.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use streamforge_log::LogConfig;
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_tiered::{
    LocalLog, PartitionId, StoreSpec, TierPolicy, TieredConfig, TieredStorage, TieringManager,
};

use super::*;

const TOPIC: &str = "t";
const APPEND: AppendParams = AppendParams { acks: Acks::All };

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, remote: RemoteTier) -> Arc<Partition> {
    let topic: Arc<str> = Arc::from(TOPIC);
    Arc::new(Partition::create(&topic, 0, dir, small_config(), remote).unwrap())
}

/// Append `batches` batches of 10 records (timestamps from `ts`).
fn append(p: &Partition, batches: usize, ts: i64) {
    for i in 0..batches {
        let spec = BatchSpec {
            base_timestamp: ts + 10 * i as i64,
            ..BatchSpec::default()
        };
        p.append(&mut build_simple(spec, 10, 100), APPEND).unwrap();
    }
}

fn fetch(offset: i64) -> FetchParams {
    FetchParams {
        fetch_offset: offset,
        max_bytes: 1 << 20,
        min_one_message: true,
        isolation: FetchIsolation::HighWatermark,
        replica_id: -1,
    }
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

#[tokio::test]
async fn append_advances_the_high_watermark_and_wakes_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    let mut watch = p.watch_high_watermark();
    let spec = BatchSpec::default();
    let info = p.append(&mut build_simple(spec, 5, 10), APPEND).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    assert!(watch.has_changed().unwrap());
    assert_eq!(*watch.borrow_and_update(), 5);
    let o = p.offsets().unwrap();
    assert_eq!(
        (o.log_start_offset, o.high_watermark, o.log_end_offset),
        (0, 5, 5)
    );
    assert_eq!(o.last_stable_offset, 5);
    let read = p.read(fetch(0)).await.unwrap();
    let records = read.records.unwrap();
    assert!(records.bytes > 0);
    assert_eq!(read.offsets.high_watermark, 5);
    assert_eq!(
        (p.role(), p.leader_epoch()),
        (PartitionRole::Leader, LEADER_EPOCH)
    );
}

#[tokio::test]
async fn a_read_outside_the_log_is_offset_out_of_range_with_the_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 2, 1_000);
    let read = p.read(fetch(100)).await.unwrap();
    let e = read.records.unwrap_err();
    assert_eq!(e.kafka_code(), code(ResponseError::OffsetOutOfRange));
    assert_eq!(read.offsets.high_watermark, 20);
    assert_eq!(read.offsets.log_start_offset, 0);
    // At the log end: nothing yet, no error (a consumer long-polls there).
    let at_end = p.read(fetch(20)).await.unwrap();
    assert_eq!(at_end.records.unwrap().bytes, 0);
    // No budget left in the response: nothing read, nothing checked.
    let mut no_budget = fetch(100);
    no_budget.max_bytes = 0;
    no_budget.min_one_message = false;
    let read = p.read(no_budget).await.unwrap();
    assert_eq!(read.records.unwrap().bytes, 0);
}

#[tokio::test]
async fn list_offsets_answers_every_spec() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 3, 1_000); // timestamps 1000..=1029
    let list = |spec| {
        let p = p.clone();
        async move { p.list_offsets(spec, -1).await }
    };
    let latest = list(OffsetSpec::from_kafka(-1)).await.unwrap();
    assert_eq!((latest.timestamp, latest.offset), (-1, 30));
    assert_eq!(latest.leader_epoch, LEADER_EPOCH);
    assert_eq!(list(OffsetSpec::Earliest).await.unwrap().offset, 0);
    assert_eq!(list(OffsetSpec::EarliestLocal).await.unwrap().offset, 0);
    assert_eq!(list(OffsetSpec::LatestTiered).await.unwrap().offset, -1);
    let max = list(OffsetSpec::from_kafka(-3)).await.unwrap();
    assert_eq!((max.timestamp, max.offset), (1_029, 29));
    let by_time = list(OffsetSpec::from_kafka(1_015)).await.unwrap();
    assert_eq!((by_time.timestamp, by_time.offset), (1_015, 15));
    let after_all = list(OffsetSpec::Timestamp(5_000)).await.unwrap();
    assert_eq!((after_all.timestamp, after_all.offset), (-1, -1));
    let e = list(OffsetSpec::from_kafka(-7)).await.unwrap_err();
    assert_eq!(e.kafka_code(), code(ResponseError::InvalidRequest));
}

#[tokio::test]
async fn a_client_epoch_other_than_the_leaders_is_fenced_or_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    p.make_leader(3).unwrap();
    let fenced = p.list_offsets(OffsetSpec::Latest, 2).await.unwrap_err();
    assert_eq!(fenced.kafka_code(), code(ResponseError::FencedLeaderEpoch));
    let unknown = p.list_offsets(OffsetSpec::Latest, 4).await.unwrap_err();
    assert_eq!(
        unknown.kafka_code(),
        code(ResponseError::UnknownLeaderEpoch)
    );
    assert!(p.list_offsets(OffsetSpec::Latest, 3).await.is_ok());
    let e = p.end_offset_for_epoch(0, 9).unwrap_err();
    assert_eq!(e.kafka_code(), code(ResponseError::UnknownLeaderEpoch));
}

#[tokio::test]
async fn delete_records_follows_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 40, 1_000); // 400 records over several 4 KiB segments
    let past_hw = p.delete_records(401).await.unwrap_err();
    assert_eq!(past_hw.kafka_code(), code(ResponseError::OffsetOutOfRange));
    let negative = p.delete_records(-2).await.unwrap_err();
    assert_eq!(negative.kafka_code(), code(ResponseError::OffsetOutOfRange));
    let mut watch = p.watch_high_watermark();
    watch.borrow_and_update();
    assert_eq!(p.delete_records(150).await.unwrap(), 150);
    assert!(watch.has_changed().unwrap(), "waiting fetches wake");
    assert_eq!(p.offsets().unwrap().log_start_offset, 150);
    // Below the log start: nothing moves back.
    assert_eq!(p.delete_records(10).await.unwrap(), 150);
    let below = p.read(fetch(100)).await.unwrap().records.unwrap_err();
    assert_eq!(below.kafka_code(), code(ResponseError::OffsetOutOfRange));
    // -1: up to the high watermark.
    assert_eq!(
        p.delete_records(DELETE_TO_HIGH_WATERMARK).await.unwrap(),
        400
    );
    let o = p.offsets().unwrap();
    assert_eq!((o.log_start_offset, o.high_watermark), (400, 400));
}

#[tokio::test]
async fn a_follower_serves_no_client() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 1, 1_000);
    let mut watch = p.watch_high_watermark();
    watch.borrow_and_update();
    p.make_follower(1, 7).unwrap();
    assert!(watch.has_changed().unwrap(), "waiting fetches wake");
    assert_eq!(p.role(), PartitionRole::Follower);
    assert_eq!((p.leader_epoch(), p.leader_id()), (1, Some(7)));
    let not_leader = code(ResponseError::NotLeaderOrFollower);
    let spec = BatchSpec::default();
    let e = p.append(&mut build_simple(spec, 1, 1), APPEND).unwrap_err();
    assert_eq!(e.kafka_code(), not_leader);
    assert_eq!(p.read(fetch(0)).await.unwrap_err().kafka_code(), not_leader);
    let e = p.list_offsets(OffsetSpec::Latest, -1).await.unwrap_err();
    assert_eq!(e.kafka_code(), not_leader);
    assert_eq!(
        p.delete_records(1).await.unwrap_err().kafka_code(),
        not_leader
    );
    // Its offsets are still there (the dashboard, the replica manager).
    assert_eq!(p.offsets().unwrap().log_end_offset, 10);
    // A stale epoch cannot take leadership back; a newer one does.
    let stale = p.make_leader(0).unwrap_err();
    assert_eq!(stale.kafka_code(), code(ResponseError::FencedLeaderEpoch));
    p.make_leader(2).unwrap();
    append(&p, 1, 2_000);
    assert_eq!(p.end_offset_for_epoch(0, 2).unwrap(), Some((0, 10)));
    assert_eq!(p.end_offset_for_epoch(2, -1).unwrap(), Some((2, 20)));
}

#[tokio::test]
async fn a_stopped_partition_is_gone_and_a_deleted_one_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 1, 1_000);
    p.stop(false).unwrap();
    assert_eq!(p.role(), PartitionRole::None);
    assert_eq!(*p.watch_high_watermark().borrow(), -1);
    let gone = code(ResponseError::UnknownTopicOrPartition);
    assert_eq!(p.read(fetch(0)).await.unwrap_err().kafka_code(), gone);
    assert_eq!(p.offsets().unwrap_err().kafka_code(), gone);
    // Closed cleanly: it opens again with its data.
    let p = open(dir.path(), RemoteTier::default());
    assert_eq!(p.offsets().unwrap().log_end_offset, 10);
    p.stop(true).unwrap();
    assert!(!p.dir.exists());
}

#[tokio::test]
async fn an_offline_partition_answers_kafka_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    // The partition directory path is taken by a file: the log cannot be opened.
    std::fs::write(dir.path().join("t-0"), b"not a directory").unwrap();
    let topic: Arc<str> = Arc::from(TOPIC);
    let p = Partition::open_or_offline(
        &topic,
        0,
        dir.path(),
        small_config(),
        RemoteTier::default(),
        OpenHighWatermark::LogEnd,
    );
    assert!(p.offline_reason().is_some());
    let storage = code(ResponseError::KafkaStorageError);
    assert_eq!(p.read(fetch(0)).await.unwrap_err().kafka_code(), storage);
    let e = p.append(&mut build_simple(BatchSpec::default(), 1, 1), APPEND);
    assert_eq!(e.unwrap_err().kafka_code(), storage);
    assert_eq!(p.delete_records(0).await.unwrap_err().kafka_code(), storage);
}

fn tiering(remote_dir: &Path) -> Arc<TieringManager> {
    let config = TieredConfig {
        store: StoreSpec::Local {
            path: remote_dir.to_path_buf(),
        },
        chunk_bytes: 8192,
        cache_bytes: 64 << 10,
        index_interval_bytes: 2048,
        ..TieredConfig::default()
    };
    TieringManager::new(TieredStorage::new(config).unwrap())
}

#[tokio::test]
async fn a_tiered_partition_not_loaded_yet_answers_a_retriable_error() {
    let dir = tempfile::tempdir().unwrap();
    let tiering = tiering(&dir.path().join("remote"));
    let remote = RemoteTier {
        tiering: Some(tiering.clone()),
        enabled: true,
    };
    let p = open(dir.path(), remote);
    append(&p, 40, 1_000);
    p.delete_local_records_before(200).unwrap();
    // Below the local log start, remote state not registered: KAFKA_STORAGE_ERROR (retriable),
    // not OFFSET_OUT_OF_RANGE (which would make the consumer reset).
    let read = p.read(fetch(0)).await.unwrap();
    let e = read.records.unwrap_err();
    assert_eq!(e.kafka_code(), code(ResponseError::KafkaStorageError));
    // Not tiered: the local error stands.
    p.update_config(small_config(), false);
    let e = p.read(fetch(0)).await.unwrap().records.unwrap_err();
    assert_eq!(e.kafka_code(), code(ResponseError::OffsetOutOfRange));
}

#[tokio::test]
async fn reads_and_offsets_below_the_local_log_come_from_remote_storage() {
    let dir = tempfile::tempdir().unwrap();
    let tiering = tiering(&dir.path().join("remote"));
    let remote = RemoteTier {
        tiering: Some(tiering.clone()),
        enabled: true,
    };
    let p = open(dir.path(), remote);
    append(&p, 40, 1_000); // 400 records, timestamps 1000..1399
    let policy = TierPolicy {
        remote_storage_enable: true,
        local_retention_ms: -1,
        local_retention_bytes: 0,
        retention_ms: -1,
        retention_bytes: -1,
    };
    let log: Arc<dyn LocalLog> = p.clone();
    tiering
        .register(PartitionId::new(TOPIC, "0123", 0), log, policy)
        .await
        .unwrap();
    tiering.run_once(now_ms()).await;
    let o = p.offsets().unwrap();
    assert!(
        o.local_log_start_offset > 0,
        "uploaded segments left the local log"
    );
    assert_eq!(o.log_start_offset, 0, "clients see the remote start");
    assert!(p.remote_size_bytes().unwrap() > 0);

    let read = p.read(fetch(5)).await.unwrap();
    let records = read.records.unwrap();
    assert!(records.bytes > 0, "served from remote storage");
    let first = streamforge_protocol::batch::BatchIter::new(&records.slices[0])
        .next()
        .unwrap()
        .unwrap()
        .1;
    assert_eq!(first.base_offset(), 0, "the whole batch holding offset 5");

    let earliest = p.list_offsets(OffsetSpec::Earliest, -1).await.unwrap();
    assert_eq!(earliest.offset, 0);
    let local = p.list_offsets(OffsetSpec::EarliestLocal, -1).await.unwrap();
    assert_eq!(local.offset, o.local_log_start_offset);
    let tiered = p.list_offsets(OffsetSpec::LatestTiered, -1).await.unwrap();
    assert_eq!(tiered.offset, o.local_log_start_offset - 1);
    let by_time = p
        .list_offsets(OffsetSpec::Timestamp(1_005), -1)
        .await
        .unwrap();
    assert_eq!((by_time.timestamp, by_time.offset), (1_005, 5));

    // DeleteRecords below the local log start moves only the remote start.
    let target = o.local_log_start_offset - 1;
    let low = p.delete_records(target).await.unwrap();
    assert!(low <= target && low > 0, "low watermark {low}");
    assert_eq!(
        p.offsets().unwrap().local_log_start_offset,
        o.local_log_start_offset
    );
}

#[test]
fn a_reopened_log_starts_its_high_watermark_at_min_of_checkpoint_and_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 3, 0);
    assert_eq!(p.high_watermark().unwrap(), 30);
    p.stop(false).unwrap();
    drop(p);
    let topic: Arc<str> = Arc::from(TOPIC);
    let reopen = |hw| {
        let p = Partition::open_or_offline(
            &topic,
            0,
            dir.path(),
            small_config(),
            RemoteTier::default(),
            hw,
        );
        let o = p.offsets().unwrap();
        let role = match hw {
            OpenHighWatermark::LogEnd => PartitionRole::Leader,
            // No role, so no appends, until the metadata names one.
            OpenHighWatermark::Checkpointed(_) => PartitionRole::None,
        };
        assert_eq!(p.role(), role);
        // The watch fetches wait on starts at the same value.
        assert_eq!(*p.watch_high_watermark().borrow(), o.high_watermark);
        p.stop(false).unwrap();
        (o.high_watermark, o.log_end_offset)
    };
    // Alone in the ISR: everything the log holds is committed (the single-broker rule).
    assert_eq!(reopen(OpenHighWatermark::LogEnd), (30, 30));
    // Replicated: the checkpointed HW, never above the log end, and the log start without one.
    assert_eq!(reopen(OpenHighWatermark::Checkpointed(Some(20))), (20, 30));
    assert_eq!(reopen(OpenHighWatermark::Checkpointed(Some(31))), (30, 30));
    assert_eq!(reopen(OpenHighWatermark::Checkpointed(None)), (0, 30));
    assert_eq!(OpenHighWatermark::Checkpointed(Some(3)).resolve(5, 9), 5);
    assert_eq!(
        OpenHighWatermark::Checkpointed(Some(i64::MAX)).resolve(5, 9),
        9
    );
    assert_eq!(OpenHighWatermark::LogEnd.resolve(5, 9), 9);
}

#[tokio::test]
async fn a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available() {
    use super::replica::{LeaderAndIsr, ReplicaConfig};
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    append(&p, 3, 1_000); // offsets 0..30 committed alone, timestamps 1000..=1029
    let lead = |leader_epoch| {
        let state = LeaderAndIsr {
            leader_epoch,
            partition_epoch: leader_epoch,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        let sink: IsrChangeSink = Arc::new(|_| {});
        p.make_leader_replicated(1, state, ReplicaConfig::default(), sink, 0)
            .unwrap();
    };
    // Leader with a follower: 30..40 (timestamps 2000..) wait for it.
    lead(1);
    let spec = BatchSpec {
        base_timestamp: 2_000,
        ..BatchSpec::default()
    };
    p.append(
        &mut build_simple(spec, 10, 100),
        AppendParams { acks: Acks::Leader },
    )
    .unwrap();
    let latest = p.list_offsets(OffsetSpec::Latest, -1).await.unwrap();
    assert_eq!(latest.offset, 30, "the HW, not the log end");
    // A record past the HW is not named, even by its time.
    let past = p
        .list_offsets(OffsetSpec::Timestamp(2_000), -1)
        .await
        .unwrap();
    assert_eq!((past.timestamp, past.offset), (-1, -1));
    // Elected again (epoch 2 starts at 40) before the follower fetched: its HW 30 may lag
    // what the previous leader had committed, so "latest" is not available yet.
    lead(2);
    let not_available = code(ResponseError::OffsetNotAvailable);
    for spec in [
        OffsetSpec::Latest,
        OffsetSpec::LastStable,
        OffsetSpec::Timestamp(2_000),
        OffsetSpec::MaxTimestamp,
    ] {
        let e = p.list_offsets(spec, -1).await.unwrap_err();
        assert_eq!(e.kafka_code(), not_available, "{spec:?}");
    }
    // What lies below the HW is still answered.
    assert_eq!(
        p.list_offsets(OffsetSpec::Earliest, -1)
            .await
            .unwrap()
            .offset,
        0
    );
    let old = p
        .list_offsets(OffsetSpec::Timestamp(1_015), -1)
        .await
        .unwrap();
    assert_eq!(old.offset, 15);
    // The follower fetches up to the log end: the HW reaches the epoch start.
    let follower = FollowerFetch {
        replica_id: 2,
        current_leader_epoch: 2,
        last_fetched_epoch: 1,
        log_start_offset: 0,
        throttled: false,
    };
    let mut params = fetch(40);
    params.replica_id = 2;
    p.read_for_follower(params, follower, 1).unwrap();
    let latest = p.list_offsets(OffsetSpec::Latest, -1).await.unwrap();
    assert_eq!(latest.offset, 40);
    let by_time = p
        .list_offsets(OffsetSpec::Timestamp(2_000), -1)
        .await
        .unwrap();
    assert_eq!(by_time.offset, 30);
}

#[tokio::test]
async fn under_min_isr_acks_1_records_are_hidden_until_min_insync_replicas_allows_them() {
    use super::replica::{LeaderAndIsr, ReplicaConfig};
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), RemoteTier::default());
    let state = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 1,
        replicas: vec![1, 2, 3],
        isr: vec![1],
    };
    let config = ReplicaConfig {
        min_insync_replicas: 2,
        ..ReplicaConfig::default()
    };
    let sink: IsrChangeSink = Arc::new(|_| {});
    p.make_leader_replicated(1, state.clone(), config, sink.clone(), 0)
        .unwrap();
    // acks=all is refused before the append; acks=1 is appended but stays invisible.
    let all = p.append(&mut build_simple(BatchSpec::default(), 5, 10), APPEND);
    assert_eq!(
        all.unwrap_err().kafka_code(),
        code(ResponseError::NotEnoughReplicas)
    );
    let one = AppendParams { acks: Acks::Leader };
    let info = p
        .append(&mut build_simple(BatchSpec::default(), 5, 10), one)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    let o = p.offsets().unwrap();
    assert_eq!((o.high_watermark, o.log_end_offset), (0, 5));
    let latest = p.list_offsets(OffsetSpec::Latest, -1).await.unwrap();
    assert_eq!(latest.offset, 0);
    let read = p.read(fetch(0)).await.unwrap();
    assert_eq!(read.records.unwrap().bytes, 0, "nothing is visible");
    assert!(p.replica_progress(0).unwrap().under_min_isr, "for /metrics");
    // The same leadership with a new config (the metadata's): still 2, nothing moves.
    let mut watch = p.watch_high_watermark();
    watch.borrow_and_update();
    p.lead_replicated(1, state.clone(), config, sink.clone(), 1)
        .unwrap();
    assert_eq!(p.offsets().unwrap().high_watermark, 0);
    // AlterConfigs lowers the topic's min.insync.replicas to 1: the records appear at once,
    // and waiting fetches wake.
    watch.borrow_and_update();
    p.update_config(
        LogConfig {
            min_insync_replicas: 1,
            ..small_config()
        },
        false,
    );
    assert!(watch.has_changed().unwrap());
    assert_eq!(*watch.borrow_and_update(), 5);
    assert_eq!(
        p.list_offsets(OffsetSpec::Latest, -1).await.unwrap().offset,
        5
    );
    assert!(!p.replica_progress(0).unwrap().under_min_isr);
    // Raised again (through the metadata's role update this time): new appends wait again.
    let two = ReplicaConfig {
        min_insync_replicas: 2,
        ..config
    };
    p.lead_replicated(1, state, two, sink, 2).unwrap();
    p.append(&mut build_simple(BatchSpec::default(), 5, 10), one)
        .unwrap();
    let o = p.offsets().unwrap();
    assert_eq!((o.high_watermark, o.log_end_offset), (5, 10));
}

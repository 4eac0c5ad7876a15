//! Group coordination through the real broker (in-process, loopback TCP, raw protocol):
//! a group forms, its state survives a broker restart by replay of `__consumer_offsets`.

mod support {
    pub mod group_client;
}

use futures::future::join_all;
use streamforge_broker::{Broker, BrokerConfig};
use support::group_client::{RawClient, assignment, range_assign, subscription};

const GROUP: &str = "it-group";
const TOPIC: &str = "it-topic";

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        http_listen: None,
        ..BrokerConfig::default()
    };
    config.groups.coordinator.group_initial_rebalance_delay_ms = 300;
    config.groups.coordinator.offsets_topic_partitions = 5;
    config
}

async fn join_and_sync(client: &mut RawClient, member_id: String) -> (String, i32, Vec<u8>) {
    let join = client.join(GROUP, &member_id, subscription(TOPIC)).await;
    assert_eq!(join.error_code, 0);
    let me = join.member_id.to_string();
    let assignments = if join.leader.as_str() == me {
        let ids: Vec<String> = join
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect();
        range_assign(&ids, 6)
            .into_iter()
            .map(|(id, ps)| (id, assignment(TOPIC, &ps)))
            .collect()
    } else {
        Vec::new()
    };
    let sync = client
        .sync(GROUP, &me, join.generation_id, assignments)
        .await;
    assert_eq!(sync.error_code, 0);
    (me, join.generation_id, sync.assignment.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_forms_and_survives_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut c = RawClient::connect(broker.kafka_addr()).await;
        let first = c.join(GROUP, "", subscription(TOPIC)).await;
        assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED first");
        ids.push(first.member_id.to_string());
        clients.push(c);
    }
    let results = join_all(
        clients
            .iter_mut()
            .zip(ids.clone())
            .map(|(c, id)| join_and_sync(c, id)),
    )
    .await;
    let generation = results[0].1;
    assert!(results.iter().all(|r| r.1 == generation), "one generation");
    let mut assignments: Vec<Vec<u8>> = results.iter().map(|r| r.2.clone()).collect();
    assignments.sort();
    assignments.dedup();
    assert_eq!(assignments.len(), 3, "distinct assignments");
    for (c, id) in clients.iter_mut().zip(&ids) {
        assert_eq!(c.heartbeat(GROUP, id, generation).await, 0);
    }
    drop(clients);
    broker.shutdown().await;

    // Same data dir: the group comes back Stable with its members and generation.
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let mut c = RawClient::connect(broker.kafka_addr()).await;
    for id in &ids {
        assert_eq!(
            c.heartbeat(GROUP, id, generation).await,
            0,
            "member {id} kept"
        );
    }
    let sync = c.sync(GROUP, &ids[1], generation, Vec::new()).await;
    assert_eq!(sync.error_code, 0);
    assert!(
        results
            .iter()
            .any(|r| r.0 == ids[1] && r.2 == sync.assignment.to_vec()),
        "assignment restored"
    );
    assert_eq!(
        c.heartbeat(GROUP, &ids[0], generation - 1).await,
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        c.heartbeat(GROUP, "stranger", generation).await,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_topic_stays_bounded_by_snapshot_and_truncate() {
    const COMMITS: i64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let small = |dir: &std::path::Path| {
        let mut c = config(dir);
        c.groups.coordinator.offsets_topic_partitions = 1;
        c.groups.offsets_segment_bytes = 16 * 1024;
        c.groups.offsets_snapshot_trigger_bytes = 32 * 1024;
        c
    };
    let broker = Broker::start(small(dir.path())).await.unwrap();
    broker
        .state()
        .replicas
        .create_topic(TOPIC, 2, Default::default(), false)
        .unwrap();
    let mut c = RawClient::connect(broker.kafka_addr()).await;
    for i in 0..COMMITS {
        assert_eq!(c.commit("bounded", TOPIC, (i % 2) as i32, i).await, 0);
        assert_eq!(c.commit(&format!("other-{}", i % 7), TOPIC, 0, i).await, 0);
    }
    let offsets = broker
        .state()
        .replicas
        .partition("__consumer_offsets", 0)
        .unwrap();
    let log_start = offsets.offsets().unwrap().log_start_offset;
    let size_bytes = offsets.size_bytes().unwrap();
    // 6000 commits of ~100 bytes each were appended; old segments are gone.
    assert!(log_start > 0, "the log start moved past superseded records");
    assert!(size_bytes < 200 * 1024, "kept {size_bytes} bytes");
    broker.shutdown().await;

    let broker = Broker::start(small(dir.path())).await.unwrap();
    let mut c = RawClient::connect(broker.kafka_addr()).await;
    assert_eq!(
        c.fetch("bounded", TOPIC, 1).await,
        (COMMITS - 1, format!("m{}", COMMITS - 1))
    );
    assert_eq!(c.fetch("bounded", TOPIC, 0).await.0, COMMITS - 2);
    for g in 0..7 {
        let last = (0..COMMITS).filter(|i| i % 7 == g).max().unwrap();
        assert_eq!(c.fetch(&format!("other-{g}"), TOPIC, 0).await.0, last);
    }
    broker.shutdown().await;
}

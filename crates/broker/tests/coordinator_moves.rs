//! The group coordinator follows `__consumer_offsets` leadership through the real Kafka
//! listener: node 2 (brokers 1 and 3 registered, not running) leads the offsets partition,
//! a group commits, leadership moves to broker 1 (this broker keeps its log as a follower) and
//! group requests answer NOT_COORDINATOR; it moves back and the committed offsets are
//! replayed from the log and served again.

mod support;

use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use streamforge_broker::BrokerState;
use streamforge_coordinator::OFFSETS_TOPIC;
use streamforge_metadata::{MetadataDelta, PartitionDelta};
use support::group_client::{RawClient, assignment, subscription};
use support::{peer_config, start_with_peers};

const NODE: i32 = 2;
const TOPIC: &str = "orders";
const GROUP: &str = "moving-group";
/// How long a leadership change may take to reach the coordinator (it follows at once).
const FOLLOW_WAIT: Duration = Duration::from_secs(15);

async fn create_topic(client: &mut RawClient) {
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.num_partitions = -1;
    t.replication_factor = -1;
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = vec![BrokerId(NODE)];
    t.assignments = vec![a];
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 10_000;
    let response: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 5, &request).await;
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

/// Moves the leadership of `__consumer_offsets-0` to `leader` under the next epoch, as the
/// controller would (replicas 2 and 1: this broker keeps the log). The new leader is alone in
/// the ISR (the other broker does not run here, so it never fetches: with it in the ISR an
/// offset commit would wait for it, as Kafka's does).
fn move_offsets_leader(state: &BrokerState, leader: i32) {
    change_offsets_partition(state, leader, &[leader], 1);
}

/// Sets the ISR of `__consumer_offsets-0` (replicas 2 and 1) to `isr` under this broker's
/// leadership, in the same leader epoch (the controller's AlterPartition: only the partition
/// epoch moves, so the coordinator keeps its load).
fn set_offsets_isr(state: &BrokerState, isr: &[i32]) {
    change_offsets_partition(state, NODE, isr, 0);
}

/// Applies `__consumer_offsets-0` led by `leader` with ISR `isr` (replicas 2 and 1), its leader
/// epoch moved by `epoch_step`, as the controller would.
fn change_offsets_partition(state: &BrokerState, leader: i32, isr: &[i32], epoch_step: i32) {
    let image = state.replicas.image();
    let t = image.topic_by_name(OFFSETS_TOPIC).unwrap();
    let local = state.replicas.partition(OFFSETS_TOPIC, 0).unwrap();
    let mut before = t.partitions[&0].clone();
    before.leader = local.leader_id().unwrap_or(NODE);
    before.leader_epoch = local.leader_epoch();
    // The test applies deltas straight to the partitions (its image stays as created): the
    // partition epoch to follow is the leader's own.
    if let Some((_, _, partition_epoch)) = local.replica_status() {
        before.partition_epoch = partition_epoch;
    }
    let mut after = before.clone();
    after.replicas = vec![NODE, 1];
    after.isr = isr.to_vec();
    after.leader = leader;
    after.leader_epoch += epoch_step;
    after.partition_epoch += 1;
    let mut delta = MetadataDelta::default();
    let moved = PartitionDelta {
        topic: OFFSETS_TOPIC.into(),
        before: Some(before),
        after: Some(after),
    };
    delta.partitions.insert((t.id, 0), moved);
    state.replicas.apply_delta_for_tests(&delta);
}

/// OffsetFetch v8 of the group: (the group's error, the offset of partition 0 or -1).
async fn fetch_v8(client: &mut RawClient) -> (i16, i64) {
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(StrBytes::from_static_str(GROUP));
    g.topics = None;
    let mut request = OffsetFetchRequest::default();
    request.groups = vec![g];
    let response: OffsetFetchResponse = client.call(ApiKey::OffsetFetch, 8, &request).await;
    let group = &response.groups[0];
    let offset = group
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.committed_offset);
    (group.error_code, offset)
}

/// Polls `fetch_v8` until it answers `want` (bounded by [`FOLLOW_WAIT`]).
async fn wait_for(client: &mut RawClient, want: (i16, i64)) {
    let started = Instant::now();
    loop {
        let got = fetch_v8(client).await;
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < FOLLOW_WAIT,
            "still {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_the_offsets_partition_moving_away_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = peer_config(dir.path(), NODE);
    config.groups.coordinator.offsets_topic_partitions = 1;
    let broker = start_with_peers(config, &[1, 3]).await;
    let mut client = RawClient::connect(broker.kafka_addr()).await;
    create_topic(&mut client).await;
    assert_eq!(client.commit(GROUP, TOPIC, 0, 42).await, 0);
    assert_eq!(fetch_v8(&mut client).await, (0, 42));

    let not_coordinator = ResponseError::NotCoordinator.code();
    move_offsets_leader(&broker.state(), 1);
    wait_for(&mut client, (not_coordinator, -1)).await;
    assert_eq!(client.commit(GROUP, TOPIC, 0, 43).await, not_coordinator);
    assert_eq!(client.heartbeat(GROUP, "m", 1).await, not_coordinator);
    let mut list = ListGroupsRequest::default();
    list.states_filter = Vec::new();
    let listed: ListGroupsResponse = client.call(ApiKey::ListGroups, 4, &list).await;
    assert!(listed.groups.is_empty(), "{listed:?}");

    move_offsets_leader(&broker.state(), NODE);
    wait_for(&mut client, (0, 42)).await;
    assert_eq!(client.commit(GROUP, TOPIC, 0, 44).await, 0);
    assert_eq!(fetch_v8(&mut client).await, (0, 44));
    broker.shutdown().await;
}

/// JoinGroup of `GROUP`, asked again while the coordinator is still loading the partition
/// under its new leader epoch (bounded by [`FOLLOW_WAIT`]).
async fn join_loaded(client: &mut RawClient, member_id: &str) -> JoinGroupResponse {
    let started = Instant::now();
    loop {
        let join = client.join(GROUP, member_id, subscription(TOPIC)).await;
        let loading = ResponseError::CoordinatorLoadInProgress.code();
        if join.error_code != loading || started.elapsed() > FOLLOW_WAIT {
            return join;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One member joins `GROUP` (JoinGroup v9: the first call hands out the member id) and syncs
/// its own assignment as leader: (the SyncGroup error, the generation, the member id).
async fn join_and_sync_alone(client: &mut RawClient) -> (i16, i32, String) {
    let first = join_loaded(client, "").await;
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED first");
    let join = client
        .join(GROUP, first.member_id.as_str(), subscription(TOPIC))
        .await;
    assert_eq!(join.error_code, 0, "{join:?}");
    let me = join.member_id.to_string();
    assert_eq!(join.leader.as_str(), me);
    let mine = vec![(me.clone(), assignment(TOPIC, &[0]))];
    let sync = client.sync(GROUP, &me, join.generation_id, mine).await;
    (sync.error_code, join.generation_id, me)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_group_is_answered_only_once_the_assignment_is_on_every_isr_member() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = peer_config(dir.path(), NODE);
    config.groups.coordinator.offsets_topic_partitions = 1;
    config.groups.coordinator.group_initial_rebalance_delay_ms = 0;
    // The absent broker 1 stays in the ISR for the whole test (no shrink).
    config.replica_lag_time_max_ms = 600_000;
    let broker = start_with_peers(config, &[1, 3]).await;
    let mut client = RawClient::connect(broker.kafka_addr()).await;
    create_topic(&mut client).await;
    // Loads the group's partition of `__consumer_offsets` here.
    assert_eq!(client.commit("warm-up", TOPIC, 0, 1).await, 0);

    // Broker 1 is in the ISR but never fetches: the group's record cannot be committed, so the
    // assignment must not be handed out (Kafka answers COORDINATOR_NOT_AVAILABLE after
    // offsets.commit.timeout.ms) and the generation is not kept: the group rebalances.
    set_offsets_isr(&broker.state(), &[NODE, 1]);
    let started = Instant::now();
    let (code, generation, member) = join_and_sync_alone(&mut client).await;
    assert_eq!(code, ResponseError::CoordinatorNotAvailable.code());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(4_500),
        "answered after {waited:?}, before the commit timeout"
    );
    assert_eq!(
        client.heartbeat(GROUP, &member, generation).await,
        ResponseError::RebalanceInProgress.code()
    );

    // With the ISR back to this broker alone, the same member's next generation is stable at
    // once.
    set_offsets_isr(&broker.state(), &[NODE]);
    let join = join_loaded(&mut client, &member).await;
    assert_eq!(join.error_code, 0, "{join:?}");
    assert!(join.generation_id > generation);
    let mine = vec![(member.clone(), assignment(TOPIC, &[0]))];
    let started = Instant::now();
    let sync = client.sync(GROUP, &member, join.generation_id, mine).await;
    assert_eq!(sync.error_code, 0);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        client.heartbeat(GROUP, &member, join.generation_id).await,
        0
    );
    broker.shutdown().await;
}

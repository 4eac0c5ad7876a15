"""Three real brokers in one cluster (`--controller-quorum-voters`, combined mode), through
confluent-kafka: the cluster forms, RF=3 topics are placed across the brokers and seen the same
on each, metadata propagation is measured, produce (acks=1) and consume go to each partition's
leader, and kill -9 of the active controller elects another one (measured) while topics stay
creatable and the killed broker rejoins; a whole cluster killed at once comes back with its
metadata (the voters' Raft log is on disk).

Replication of records between the brokers is tested in test_replication_cluster.py.
"""

from __future__ import annotations

import os
import re
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import free_port

WAIT_S = 60


@pytest.fixture(autouse=True)
def fresh_admins():
    yield
    _admins.clear()


def start_cluster(broker_factory, offsets_partitions=3, extra_args=(), env=None, observers=0,
                  http=False, args_of=lambda node_id: []):
    """Three voters on free ports, started together, and `observers` broker-only nodes (node ids
    4, 5, ...: `--process-roles broker`, each with its own controller listener); `extra_args`
    and `env` go to each, `args_of(node_id)` to one; `http` serves each one's /metrics."""
    brokers = [broker_factory(start=False, http=http) for _ in range(3 + observers)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{free_port()}" for i in range(3))
    for i, b in enumerate(brokers):
        b.extra_args += [
            "--node-id", str(i + 1),
            "--controller-quorum-voters", voters,
            "--broker-session-timeout-ms", "3000",
            "--broker-heartbeat-interval-ms", "500",
            "--offsets-topic-partitions", str(offsets_partitions),
            *extra_args,
            *args_of(i + 1),
        ]
        if i >= 3:
            b.extra_args += ["--process-roles", "broker", "--controller-listen", f"127.0.0.1:{free_port()}"]
        b.env.update(env or {})
        b.env["RUST_LOG"] = os.environ.get("SF_RUST_LOG", "info,openraft=error")
    # The voters need each other to elect a controller: start them together.
    with ThreadPoolExecutor(len(brokers)) as pool:
        list(pool.map(lambda b: b.start(timeout_s=WAIT_S), brokers))
    return brokers


_admins: dict[str, AdminClient] = {}


def admin(b) -> AdminClient:
    """One client per broker address, kept alive while its futures run."""
    if b.bootstrap not in _admins:
        _admins[b.bootstrap] = AdminClient({"bootstrap.servers": b.bootstrap})
    return _admins[b.bootstrap]


# Client errors a look at the cluster meets while a broker dies under it: librdkafka ties a
# Metadata request to one connection, so a request in flight to a broker that is killed times
# out (or fails in transport) rather than going to another broker. Kafka's clients refresh
# metadata again; `wait_for` takes such an answer as "not yet".
TRANSIENT_CLIENT_ERRORS = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


def wait_for(what, f, timeout_s=WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            v = f()
        except KafkaException as e:
            if e.args[0].code() not in TRANSIENT_CLIENT_ERRORS or time.monotonic() > deadline:
                raise
            v = None
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# What a client retries after a leader change: the new leader's high watermark lags the start
# of its epoch (OFFSET_NOT_AVAILABLE, as Kafka answers), or the leader moved.
RETRIABLE_LIST_OFFSETS = {KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                          KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                          KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError._TRANSPORT}


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s=WAIT_S) -> tuple[int, int]:
    """(low, high) of `tp`, asked of its leader, retrying what Kafka clients retry."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException as e:
            if e.args[0].code() not in RETRIABLE_LIST_OFFSETS or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def cluster_view(b):
    md = admin(b).list_topics(timeout=10)
    return sorted(md.brokers), md.controller_id, md.cluster_id


def placement(b, topic):
    """{partition: (leader, replicas, isr)} once every partition has a leader, else None."""
    md = admin(b).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    out = {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in t.partitions.items()}
    return out if all(v[0] >= 0 for v in out.values()) else None


def metric(b, name, labels="") -> float:
    """One sample of `name{labels}` on `b`'s /metrics (0 while the series does not exist)."""
    text = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
    pattern = "^" + re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)$"
    m = re.search(pattern, text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def partition_gauge(b, name, topic, partition=0) -> float:
    """Kafka's per-partition gauge `name` (under_replicated, under_min_isr, at_min_isr)."""
    return metric(b, f"streamforge_partition_{name}", f'topic="{topic}",partition="{partition}"')


def create(b, topic, partitions, rf):
    client = admin(b)
    fs = client.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=15)
    for f in fs.values():
        f.result(20)


def test_three_brokers_place_rf3_topics_across_them_and_serve_each_partitions_leader(broker_factory):
    brokers = start_cluster(broker_factory)
    views = wait_for(
        "the cluster to form",
        lambda: (lambda v: v if all(x[0] == [1, 2, 3] and x[1] == v[0][1] and x[1] > 0 for x in v) else None)(
            [cluster_view(b) for b in brokers]
        ),
    )
    assert len({v[2] for v in views}) == 1, f"one cluster id: {views}"

    create(brokers[0], "cluster-rf3", 3, 3)
    seen = [wait_for("the topic on each broker", lambda b=b: placement(b, "cluster-rf3")) for b in brokers]
    assert seen[0] == seen[1] == seen[2], seen
    assert sorted(v[0] for v in seen[0].values()) == [1, 2, 3], seen[0]
    assert all(sorted(v[1]) == [1, 2, 3] and sorted(v[2]) == [1, 2, 3] for v in seen[0].values())

    with pytest.raises(Exception) as too_many:
        create(brokers[1], "cluster-rf4", 1, 4)
    assert "INVALID_REPLICATION_FACTOR" in str(too_many.value)

    # A topic config altered through one broker is what every broker describes.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cluster-rf3", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin(brokers[2]).incremental_alter_configs([resource]).values():
        f.result(20)
    for b in brokers:
        def described(b=b):
            r = ConfigResource(ConfigResource.Type.TOPIC, "cluster-rf3")
            entries = list(admin(b).describe_configs([r]).values())[0].result(20)
            return entries["retention.ms"].value == "3600000"
        wait_for("the config on every broker", described)

    # Propagation: create on one broker, until every broker answers Metadata with leaders.
    took = []
    for n in range(20):
        topic = f"cluster-propagate-{n}"
        started = time.monotonic()
        create(brokers[n % 3], topic, 1, 3)
        for b in brokers:
            wait_for("propagation", lambda b=b: placement(b, topic))
        took.append(time.monotonic() - started)
    took.sort()
    p50 = statistics.median(took)
    p99 = took[min(len(took) - 1, round(0.99 * (len(took) - 1)))]
    print(f"metadata propagation over {len(took)} topics: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    # Measured 7 ms / 8 ms (debug, shared machine); a round trip waiting on a timer (a delayed
    # ACK once made p50 90 ms) fails the first bound.
    assert p50 < 0.05 and p99 < 0.5, took

    # acks=1 produce to each partition (the client sends each to its leader), consume back.
    bootstrap = ",".join(b.bootstrap for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    sent = {p: [f"p{p}-{i}".encode() for i in range(10)] for p in range(3)}
    for p, values in sent.items():
        for v in values:
            producer.produce("cluster-rf3", value=v, partition=p)
    assert producer.flush(20) == 0
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "cluster-reader",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition("cluster-rf3", p, 0) for p in range(3)])
    got = {p: [] for p in range(3)}
    deadline = time.monotonic() + WAIT_S
    while sum(map(len, got.values())) < 30 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got[m.partition()].append(m.value())
    consumer.close()
    assert got == sent


def test_killing_the_active_controller_elects_another_and_the_broker_rejoins(broker_factory):
    brokers = start_cluster(broker_factory)
    controller = wait_for(
        "a controller",
        lambda: (lambda v: v[1] if v[0] == [1, 2, 3] and v[1] > 0 else None)(cluster_view(brokers[0])),
    )
    create(brokers[0], "before-failover", 3, 3)
    wait_for("the topic", lambda: placement(brokers[2], "before-failover"))

    dead = brokers[controller - 1]
    alive = [b for b in brokers if b is not dead]
    killed_at = time.monotonic()
    dead.kill()
    new = wait_for("a new controller", lambda: (lambda c: c if c > 0 and c != controller else None)(
        cluster_view(alive[0])[1]))
    failover = time.monotonic() - killed_at
    print(f"controller {controller} killed: controller {new} after {failover * 1000:.0f} ms")
    assert failover < 15
    for b in alive:
        wait_for("the survivors to agree", lambda b=b: cluster_view(b)[1] == new)

    # Once the dead broker is fenced, new topics are placed on the two live brokers.
    wait_for("the dead broker fenced", lambda: cluster_view(alive[0])[0] == sorted(
        int(b.extra_args[b.extra_args.index("--node-id") + 1]) for b in alive))
    create(alive[1], "after-failover", 2, 2)
    for b in alive:
        assert wait_for("the new topic", lambda b=b: placement(b, "after-failover"))
    moved = wait_for("leaders off the dead broker", lambda: (lambda p: p if p and all(
        v[0] != controller for v in p.values()) else None)(placement(alive[0], "before-failover")))
    assert all(controller not in v[2] for v in moved.values())

    # Restart with its Raft log, vote and snapshot from its data dir, and rejoin.
    dead.start(timeout_s=WAIT_S)
    for b in brokers:
        wait_for("the broker back", lambda b=b: cluster_view(b)[0] == [1, 2, 3] and cluster_view(b)[1] == new)
    assert wait_for("the topics on the rejoined broker", lambda: placement(dead, "after-failover")) == \
        placement(alive[0], "after-failover")


def test_a_whole_cluster_killed_at_once_comes_back_with_its_metadata(broker_factory):
    """The voters keep their Raft log, vote and snapshot on disk: kill -9 all three, start them
    again from the same data dirs, and every topic, its placement and config are still there."""
    brokers = start_cluster(broker_factory)
    wait_for("a controller", lambda: cluster_view(brokers[0])[1] > 0)
    create(brokers[1], "survives", 3, 3)
    before = wait_for("the topic", lambda: placement(brokers[0], "survives"))
    cluster_id = cluster_view(brokers[0])[2]
    for b in brokers:
        b.kill()
    _admins.clear()
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda b: b.start(timeout_s=WAIT_S), brokers))
    for b in brokers:
        wait_for("the cluster back", lambda b=b: (lambda v: v[0] == [1, 2, 3] and v[1] > 0)(cluster_view(b)))
        assert cluster_view(b)[2] == cluster_id
        after = wait_for("the topic after the restart", lambda b=b: placement(b, "survives"))
        assert sorted(after) == sorted(before)
        assert all(sorted(after[p][1]) == sorted(before[p][1]) for p in before), (before, after)

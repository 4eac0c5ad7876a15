"""A broker-only node (`--process-roles broker`, Kafka's `process.roles=broker`) beside three
combined voters, through confluent-kafka: it follows the metadata log as an observer (an
openraft learner), is listed by Metadata and DescribeCluster but is never the controller, hosts
and leads replicas of an RF=3 topic, serves acks=all produce and consume for the partitions it
leads, and after kill -9 its leaderships move while the voters go on; started again from its
data dir it rejoins every ISR it belongs to.
"""

from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from harness import find_binary
from test_cluster import admin, cluster_view, placement, start_cluster, wait_for
from test_cluster import fresh_admins  # noqa: F401  (autouse: one admin client per test)

TOPIC = "observed"
PARTITIONS = 8
OBSERVER = 4
WAIT_S = 60


def describe_cluster(b):
    """(node ids, controller id) from DescribeCluster sent to `b`."""
    d = admin(b).describe_cluster(request_timeout=10).result(15)
    return sorted(n.id for n in d.nodes), d.controller.id


def quorum(b):
    """The metadata quorum as `streamforge cluster --json` (DescribeQuorum) reports it."""
    out = subprocess.run([str(find_binary()), "cluster", "-b", b.bootstrap, "--json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)["quorum"]


def produce_all(bootstrap, start, count):
    """`count` values per partition with an idempotent acks=all producer; all acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000, "topic.metadata.refresh.interval.ms": 1000})
    failed = []
    for p in range(PARTITIONS):
        for i in range(start, start + count):
            producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(WAIT_S) == 0 and not failed, failed[:3]


def consume_all(bootstrap, per_partition):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"observer-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + WAIT_S
    while sum(map(len, got.values())) < PARTITIONS * per_partition:
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got[m.partition()].append(m.value().decode())
    consumer.close()
    return got


def test_a_broker_only_node_hosts_and_leads_replicas_and_rejoins_but_never_controls(broker_factory):
    brokers = start_cluster(broker_factory, observers=1)
    observer = brokers[OBSERVER - 1]
    for b in brokers:
        wait_for("four brokers and a voter as controller", lambda b=b: (
            lambda v: v[0] == [1, 2, 3, 4] and v[1] in (1, 2, 3))(cluster_view(b)))
    assert len({cluster_view(b)[2] for b in brokers}) == 1, "one cluster id"
    nodes, controller = describe_cluster(observer)
    assert nodes == [1, 2, 3, 4] and controller in (1, 2, 3)
    q = quorum(observer)
    assert sorted(v["replica_id"] for v in q["voters"]) == [1, 2, 3], q
    assert [v["replica_id"] for v in q["observers"]] == [OBSERVER], q

    # Created through the broker-only node (forwarded to the controller): 24 replicas spread
    # over four brokers, about 6 on each and 2 leaderships (placement also counts what each
    # broker already holds, such as __consumer_offsets on the voters).
    fs = admin(observer).create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    placed = wait_for("the topic on every broker", lambda: all(
        placement(b, TOPIC) for b in brokers) and placement(brokers[0], TOPIC))
    hosted = [p for p, (_, replicas, _) in placed.items() if OBSERVER in replicas]
    led = [p for p, (leader, _, _) in placed.items() if leader == OBSERVER]
    assert len(hosted) >= 4 and len(led) >= 1, placed

    bootstrap = ",".join(b.bootstrap for b in brokers)
    produce_all(bootstrap, 0, 10)
    got = consume_all(bootstrap, 10)
    assert all(got[p] == [f"{p}-{i}" for i in range(10)] for p in range(PARTITIONS)), got

    # kill -9: its leaderships move to the other replicas within the session timeout (3 s
    # here) plus a heartbeat and a commit; the voters' majority does not miss it.
    killed_at = time.monotonic()
    observer.kill()
    voters = brokers[:3]
    moved = wait_for("its leaderships moved", lambda: (lambda p: p if p and all(
        v[0] != OBSERVER and OBSERVER not in v[2] for v in p.values()) else None)(placement(voters[0], TOPIC)))
    took = time.monotonic() - killed_at
    print(f"broker-only node killed: its {len(led)} leaderships moved after {took * 1000:.0f} ms")
    assert took < 15, took
    assert all(moved[p][0] in (1, 2, 3) for p in led)
    assert cluster_view(voters[0])[1] == controller, "the controller did not change"
    produce_all(",".join(b.bootstrap for b in voters), 10, 5)

    # Restarted from its data dir: it follows the log again and rejoins every ISR it is in.
    observer.start(timeout_s=WAIT_S)
    back = wait_for("back in its ISRs", lambda: (lambda p: p if p and all(
        OBSERVER in v[2] for v in p.values() if OBSERVER in v[1]) else None)(placement(voters[0], TOPIC)))
    assert sorted(p for p, v in back.items() if OBSERVER in v[1]) == hosted
    for b in brokers:
        wait_for("four brokers again", lambda b=b: cluster_view(b)[0] == [1, 2, 3, 4])
        assert cluster_view(b)[1] in (1, 2, 3)
    got = consume_all(bootstrap, 15)
    assert all(got[p] == [f"{p}-{i}" for i in range(15)] for p in range(PARTITIONS)), got

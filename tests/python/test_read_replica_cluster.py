"""KIP-392 across real broker processes, through confluent-kafka (librdkafka): three brokers,
each in its own rack (`--broker-rack r1|r2|r3`) with the rack-aware selector, and an RF=3 topic
led by broker 1. A consumer with `client.rack=r2` reads every acks=all record, in order and
once, from the follower in its rack (broker 2): the leader answers its fetches with
`preferred_read_replica = 2` and no records, and each broker's /metrics says who sent the
records (`streamforge_consumer_fetch_records_total{role}`).

Then broker 2 is killed: librdkafka goes back to the leader when the preferred replica's
connection fails, and the leader keeps it there once broker 2 has left the ISR (it names only
in-sync replicas). The consumer goes on from the leader with no gap and no duplicate. When
broker 2 is back in the ISR, the leader names it again and the consumer returns to it.

The same run checks Kafka's per-partition gauges on the leader's /metrics: with one of three
replicas out and min.insync.replicas=2 the partition is UnderReplicated and AtMinIsr (1), and
both are 0 again once the ISR is full (UnderMinIsr is checked in test_min_isr_cluster.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

import wire
from test_cluster import admin, cluster_view, metric, partition_gauge, placement, start_cluster, wait_for
from test_cluster import fresh_admins  # noqa: F401  (autouse: one admin client per test)

TOPIC = "rack-reads"
LEADER, FOLLOWER = 1, 2
N = 300  # records per phase
READ_S = 60


def isr_seen_by(b):
    """The partition's ISR in `b`'s metadata, asked of `b` alone: a client would also send its
    Metadata requests to the paused broker, whose connection stays open and never answers."""
    with wire.connect(b.port, host=b.host) as sock:
        p = wire.metadata_v1(sock, [TOPIC])["partitions"].get(TOPIC, {}).get(0)
    return sorted(p[2]) if p else None


def records_sent(b, role) -> float:
    return metric(b, "streamforge_consumer_fetch_records_total", f'role="{role}"')


def flags(b):
    """Kafka's UnderReplicated, AtMinIsr and UnderMinIsr of the partition, on `b`."""
    return [partition_gauge(b, g, TOPIC) for g in ("under_replicated", "at_min_isr", "under_min_isr")]


def produce(bootstrap, values):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 30000})
    failed = []
    for v in values:
        producer.produce(TOPIC, value=str(v).encode(), partition=0,
                         on_delivery=lambda err, _m: err is not None and failed.append(err))
    assert producer.flush(60) == 0
    assert not failed, failed[:3]


def read_until(consumer, got, count):
    """Poll `consumer` into `got` ((offset, value) pairs) until it holds `count` records."""
    deadline = time.monotonic() + READ_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        for m in consumer.consume(num_messages=500, timeout=0.2):
            if m.error() is None:
                got.append((m.offset(), int(m.value())))
            elif m.error().code() != KafkaError._PARTITION_EOF:
                # Transport errors while a broker is down are the client's to retry.
                assert m.error().retriable() or m.error().code() in (
                    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), m.error()
    assert got == [(o, o) for o in range(count)], "a gap or a duplicate"


@pytest.mark.parametrize("away", ["killed", "paused"])
def test_a_racked_consumer_reads_from_its_follower_and_goes_on_from_the_leader_without_it(broker_factory, away):
    """`killed`: kill -9, then a restart. `paused`: SIGSTOP until the controller fences it and
    it leaves the ISR (the consumer's fetch to it times out after `socket.timeout.ms`), then
    SIGCONT."""
    brokers = start_cluster(broker_factory, http=True,
                            extra_args=["--replica-selector", "rack-aware"],
                            args_of=lambda node_id: ["--broker-rack", f"r{node_id}"])
    for b in brokers:
        wait_for("three brokers", lambda b=b: cluster_view(b)[0] == [1, 2, 3])
    leader, follower = brokers[LEADER - 1], brokers[FOLLOWER - 1]
    fs = admin(leader).create_topics([NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
        config={"min.insync.replicas": "2"})], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the ISR full", lambda: isr_seen_by(leader) == [1, 2, 3])
    assert placement(leader, TOPIC)[0][0] == LEADER
    assert flags(leader) == [0, 0, 0]

    # 1. Every record from the follower in the consumer's rack; none from the leader.
    produce(leader.bootstrap, range(N))
    consumer = Consumer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                         "group.id": "rack-r2", "client.rack": "r2", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                         "socket.timeout.ms": 5000})
    got = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read_until(consumer, got, N)
        assert records_sent(follower, "follower") >= N
        assert records_sent(leader, "leader") == 0
        assert metric(leader, "streamforge_preferred_read_replica_answers_total") >= 1
        print(f"phase 1: {N} records from broker {FOLLOWER} (rack r2); the leader named it "
              f"{metric(leader, 'streamforge_preferred_read_replica_answers_total'):.0f} times")

        # 2. The follower is gone: the consumer goes on from the leader.
        if away == "killed":
            follower.kill()
        else:
            os.kill(follower.pid, signal.SIGSTOP)
        wait_for("broker 2 out of the ISR", lambda: isr_seen_by(leader) == [1, 3])
        wait_for("the partition flagged under-replicated and at min ISR",
                 lambda: flags(leader) == [1, 1, 0])
        from_leader_before = records_sent(leader, "leader")
        produce(leader.bootstrap, range(N, 2 * N))
        read_until(consumer, got, 2 * N)
        from_leader = records_sent(leader, "leader") - from_leader_before
        assert from_leader >= N, f"the leader sent {from_leader} records"
        print(f"phase 2: broker {FOLLOWER} {away}; {from_leader:.0f} records from the leader")

        # 3. The follower is back in the ISR: the consumer returns to it.
        from_follower_before = 0.0
        if away == "killed":
            follower.start(timeout_s=60)
        else:
            os.kill(follower.pid, signal.SIGCONT)
            from_follower_before = records_sent(follower, "follower")
        wait_for("broker 2 back in the ISR", lambda: isr_seen_by(leader) == [1, 2, 3])
        wait_for("the partition flags cleared", lambda: flags(leader) == [0, 0, 0])
        from_leader_before = records_sent(leader, "leader")
        produce(leader.bootstrap, range(2 * N, 3 * N))
        read_until(consumer, got, 3 * N)
        from_follower = records_sent(follower, "follower") - from_follower_before
        assert from_follower >= N, f"the follower sent {from_follower} records once back"
        assert records_sent(leader, "leader") == from_leader_before
        print(f"phase 3: broker {FOLLOWER} back; {from_follower:.0f} records from it again")
    finally:
        if follower.is_running():
            os.kill(follower.pid, signal.SIGCONT)
        consumer.close()

"""KIP-966's strict min ISR across real broker processes, through confluent-kafka: a partition
leader does not advance its high watermark while its ISR is smaller than the topic's
min.insync.replicas, as Kafka 4 does. acks=1 writes are appended and acknowledged, but no
consumer (nor ListOffsets latest) sees them until the ISR is back at min ISR; acks=all is
refused with NOT_ENOUGH_REPLICAS meanwhile. And when that leader dies, the follower the
controller elects from the ELR holds every record a consumer could have read.

Three combined voters and two broker-only nodes: the partition's replicas are voter 1 (the
leader) and the broker-only nodes 4 and 5, so pausing both followers leaves the metadata quorum
(the three voters) able to fence them and shrink the ISR to the leader alone.
"""

from __future__ import annotations

import os
import signal
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

import wire
from test_cluster import admin, cluster_view, partition_gauge, placement, start_cluster, wait_for, watermarks
from test_cluster import fresh_admins  # noqa: F401  (autouse: one admin client per test)

TOPIC = "strict-min-isr"
LEADER, FOLLOWERS = 1, (4, 5)
NOT_ENOUGH_REPLICAS = 19


def isr_seen_by(b):
    """The partition's ISR in `b`'s metadata, asked of `b` alone: librdkafka would also send its
    Metadata requests to a paused broker, whose connection stays open and never answers."""
    with wire.connect(b.port, host=b.host) as sock:
        p = wire.metadata_v1(sock, [TOPIC])["partitions"].get(TOPIC, {}).get(0)
    return sorted(p[2]) if p else None


def produce(bootstrap, acks, values):
    """Produce `values` to partition 0; {value: offset} of the acknowledged ones, and errors."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "message.timeout.ms": 30000})
    acked, failed = {}, []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            acked[int(msg.value())] = msg.offset()

    for v in values:
        producer.produce(TOPIC, value=str(v).encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    return acked, failed


def read_from(bootstrap, offset, quiet_s):
    """Every (offset, value) a read_uncommitted consumer gets from `offset` on, reading until
    nothing new arrived for `quiet_s`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"strict-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(TOPIC, 0, offset)])
    got, last = [], time.monotonic()
    while time.monotonic() - last < quiet_s:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append((m.offset(), int(m.value())))
            last = time.monotonic()
    consumer.close()
    return got


def high_watermark(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{time.monotonic_ns()}"})
    try:
        return watermarks(consumer, TopicPartition(TOPIC, 0))[1]
    finally:
        consumer.close()


def min_isr_flags(b):
    """Kafka's UnderMinIsr and AtMinIsr gauges of the partition, on `b`."""
    return [partition_gauge(b, g, TOPIC) for g in ("under_min_isr", "at_min_isr")]


def setup(broker_factory):
    """Five brokers; the topic's one partition on [1, 4, 5] led by 1, with 10 acks=all records.
    Then both followers are paused (SIGSTOP) until the controller fences them: the ISR is the
    leader alone, below min.insync.replicas=2. Returns the brokers and the paused ones."""
    brokers = start_cluster(broker_factory, observers=2, http=True)
    for b in brokers:
        wait_for("five brokers", lambda b=b: cluster_view(b)[0] == [1, 2, 3, 4, 5])
    leader = brokers[LEADER - 1]
    fs = admin(leader).create_topics([NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[LEADER, *FOLLOWERS]], config={"min.insync.replicas": "2"})],
        operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the ISR full", lambda: isr_seen_by(leader) == [1, 4, 5])
    assert placement(leader, TOPIC)[0][0] == LEADER
    assert min_isr_flags(leader) == [0, 0]
    acked, failed = produce(leader.bootstrap, "all", range(10))
    assert not failed and sorted(acked.values()) == list(range(10)), (acked, failed)
    assert read_from(leader.bootstrap, 0, 1.0) == [(o, o) for o in range(10)]
    paused = [brokers[f - 1] for f in FOLLOWERS]
    for b in paused:
        os.kill(b.pid, signal.SIGSTOP)
    # Longer than the session timeout (3 s): the controller fences both.
    wait_for("the ISR to shrink to the leader", lambda: isr_seen_by(leader) == [LEADER])
    # Kafka's per-partition UnderMinIsr on the leader's /metrics.
    wait_for("UnderMinIsr", lambda: min_isr_flags(leader) == [1, 0])
    return brokers, paused


def test_acks_1_records_stay_invisible_until_the_isr_is_back_at_min_isr(broker_factory):
    brokers, paused = setup(broker_factory)
    leader = brokers[LEADER - 1]
    bootstrap = leader.bootstrap
    try:
        acked, failed = produce(bootstrap, "1", range(10, 30))
        assert not failed, failed[:3]
        assert sorted(acked.values()) == list(range(10, 30)), acked
        # Appended and acknowledged, but no consumer sees them, and "latest" stays put.
        assert high_watermark(bootstrap) == 10
        assert read_from(bootstrap, 10, 2.0) == []
        assert [v for _, v in read_from(bootstrap, 0, 1.0)] == list(range(10))
        # acks=all is refused before the append.
        with wire.connect(leader.port, host=leader.host) as sock:
            batch = wire.record_batch([(None, b"refused")])
            err, _ = wire.produce_v3(sock, TOPIC, 0, batch)[(TOPIC, 0)]
        assert err == NOT_ENOUGH_REPLICAS, err
        assert high_watermark(bootstrap) == 10

        # One follower resumes: it is unfenced, catches up, rejoins the ISR (back at min ISR)
        # and the acks=1 records become visible, in order, at the offsets acknowledged.
        resumed_at = time.monotonic()
        os.kill(paused[0].pid, signal.SIGCONT)
        wait_for("the ISR back at min ISR", lambda: isr_seen_by(leader) == [LEADER, FOLLOWERS[0]])
        wait_for("the records to become visible", lambda: high_watermark(bootstrap) == 30)
        wait_for("AtMinIsr, no longer UnderMinIsr", lambda: min_isr_flags(leader) == [0, 1])
        took = time.monotonic() - resumed_at
        got = read_from(bootstrap, 10, 1.0)
        assert got == [(acked[v], v) for v in range(10, 30)], got
        print(f"20 acks=1 records hidden under min ISR; visible {took * 1000:.0f} ms after the "
              f"follower resumed")
    finally:
        for b in paused:
            os.kill(b.pid, signal.SIGCONT)
    wait_for("the ISR full again", lambda: isr_seen_by(leader) == [1, 4, 5])
    wait_for("neither flag", lambda: min_isr_flags(leader) == [0, 0])
    acked, failed = produce(bootstrap, "all", range(30, 35))
    assert not failed and sorted(acked.values()) == list(range(30, 35)), (acked, failed)


def test_an_elr_member_elected_after_the_leader_dies_holds_every_record_consumers_read(broker_factory):
    """The leader, alone in its ISR, takes acks=1 records and dies (kill -9); the followers that
    left the ISR below min ISR (the ELR) are resumed and one of them is elected. Everything a
    consumer could read before is there; the acks=1 records no consumer could read are the
    only loss (before KIP-966's strict min ISR they were readable, and lost here)."""
    brokers, paused = setup(broker_factory)
    leader = brokers[LEADER - 1]
    voter = brokers[1]
    try:
        acked, failed = produce(leader.bootstrap, "1", range(10, 30))
        assert not failed and len(acked) == 20, (acked, failed)
        read_before = read_from(leader.bootstrap, 0, 2.0)
        leader.kill()
        for b in paused:
            os.kill(b.pid, signal.SIGCONT)
        # The controller elects an ELR member once it is unfenced (the ISR is empty).
        wait_for("a leader from the ELR", lambda: (lambda p: p and p[0][0] in FOLLOWERS)(
            placement(voter, TOPIC)))
    finally:
        for b in paused:
            os.kill(b.pid, signal.SIGCONT)
    # The other follower rejoins; at min ISR the new leader's high watermark moves.
    wait_for("the ISR at min ISR", lambda: isr_seen_by(voter) == [4, 5])
    rest = ",".join(b.bootstrap for b in brokers[1:])
    wait_for("the committed records visible", lambda: high_watermark(rest) >= 10)
    read_after = read_from(rest, 0, 2.0)
    lost = sorted(set(read_before) - set(read_after))
    assert not lost, f"{len(lost)} records consumers read are gone: {lost[:5]}"
    assert read_before == [(o, o) for o in range(10)], read_before
    print(f"elected from the ELR: broker {placement(voter, TOPIC)[0][0]}; {len(read_before)} records "
          f"read before, all there after; the {20 - (len(read_after) - 10)} acks=1 records never visible are gone")
    # The old leader comes back (no clean-shutdown marker), truncates what it alone had and
    # rejoins; new acks=all writes work.
    leader.start(timeout_s=60)
    wait_for("the ISR full again", lambda: isr_seen_by(voter) == [1, 4, 5])
    acked, failed = produce(rest, "all", range(100, 105))
    assert not failed and len(acked) == 5, (acked, failed)

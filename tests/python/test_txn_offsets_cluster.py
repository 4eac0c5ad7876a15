"""Offsets sent to a transaction survive the loss of the group's coordinator (three real
brokers, confluent-kafka). The group's coordinator (leader of its `__consumer_offsets`
partition) is not the transaction's coordinator; it is killed with SIGKILL right after
`send_offsets_to_transaction` answered, so the group's partition moves to another broker
before the transaction ends. As on Kafka, the offsets are the producer's transactional batch
in `__consumer_offsets`, in every in-sync replica before TxnOffsetCommit is answered: the new
leader loads them as pending, and the transaction's COMMIT marker commits them (OffsetFetch
and a consumer's position are the sent offsets), its ABORT drops them (the offsets stay the
ones committed before), whether the transaction ends once the partition moved or right
after the kill.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from test_cluster import admin, cluster_view, placement, start_cluster, wait_for
from test_txn_cluster import partition_for

IN, OUT = "eos-offsets-in", "eos-offsets-out"
SENT = {0: 42, 1: 17}
BEFORE = {0: 5, 1: 3}


def coordinator_of(b, topic, key):
    """The leader of `key`'s partition of `topic` (`__consumer_offsets`, `__transaction_state`)."""
    p = wait_for(f"{topic} placement", lambda: placement(b, topic))
    return p[partition_for(key, len(p))][0]


def group_consumer(bootstrap, group):
    # read_committed: OffsetFetch asks require_stable, so an offset pending in a transaction
    # is waited for, never read as the old one.
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })


def committed(bootstrap, group):
    c = group_consumer(bootstrap, group)
    try:
        tps = c.committed([TopicPartition(IN, p) for p in SENT], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def position(bootstrap, group, partition):
    """Where a consumer of the group starts on `partition`: the offset of its first record."""
    c = group_consumer(bootstrap, group)
    try:
        c.assign([TopicPartition(IN, partition)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                return m.offset()
        raise AssertionError(f"no record of {IN}-{partition}")
    finally:
        c.close()


@pytest.mark.parametrize("outcome,wait_for_the_move", [("commit", True), ("abort", True), ("commit", False)])
def test_offsets_sent_to_a_transaction_outlive_the_group_coordinator(broker_factory, outcome, wait_for_the_move):
    """`wait_for_the_move`: the transaction ends once the group's offsets partition is led by
    another broker; else right after the kill (its markers wait for the new leader, which may
    still be loading the partition when they come)."""
    brokers = start_cluster(broker_factory)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    fs = admin(brokers[0]).create_topics([NewTopic(t, 2, 3) for t in (IN, OUT)], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    feed = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        feed.produce(IN, f"in-{i}".encode(), partition=i % 2)
    assert feed.flush(30) == 0

    tid = f"offsets-{outcome}-{wait_for_the_move}"
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": tid,
        "transaction.timeout.ms": 60000,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    p.init_transactions(30)
    txn_coordinator = coordinator_of(brokers[0], "__transaction_state", tid)
    group, group_coordinator = next(
        (g, c) for g, c in (
            (g, coordinator_of(brokers[0], "__consumer_offsets", g))
            for g in (f"eos-offsets-{outcome}-{wait_for_the_move}-{i}" for i in range(100))
        ) if c != txn_coordinator
    )
    # Offsets committed before the transaction (a plain commit).
    c = group_consumer(bootstrap, group)
    c.commit(offsets=[TopicPartition(IN, p, o) for p, o in BEFORE.items()], asynchronous=False)
    metadata = c.consumer_group_metadata()
    c.close()
    assert committed(bootstrap, group) == BEFORE

    p.begin_transaction()
    for part in (0, 1):
        p.produce(OUT, f"out-{part}".encode(), partition=part)
    p.send_offsets_to_transaction([TopicPartition(IN, q, o) for q, o in SENT.items()], metadata, 30)
    # The group's coordinator dies with the offsets taken and the transaction open.
    brokers[group_coordinator - 1].kill()
    def moved():
        return wait_for(
            "the group's offsets partition led by another broker",
            lambda: (lambda lead: lead if lead != group_coordinator else None)(
                coordinator_of(brokers[txn_coordinator - 1], "__consumer_offsets", group)),
        )

    moved_to = moved() if wait_for_the_move else None
    started = time.monotonic()
    if outcome == "commit":
        p.commit_transaction(60)
        want = SENT
    else:
        p.abort_transaction(60)
        want = BEFORE
    ended = time.monotonic() - started
    moved_to = moved_to or moved()
    print(f"group coordinator {group_coordinator} killed, offsets partition now on {moved_to}, "
          f"transaction coordinator {txn_coordinator}: {outcome} took {ended:.2f} s")
    wait_for(f"the group's offsets after the {outcome}", lambda: committed(bootstrap, group) == want,
             timeout_s=30)
    for part, offset in want.items():
        assert position(bootstrap, group, part) == offset
    # The killed broker comes back as a follower; the offsets stay.
    brokers[group_coordinator - 1].start()
    wait_for("the killed broker rejoined", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    assert committed(bootstrap, group) == want

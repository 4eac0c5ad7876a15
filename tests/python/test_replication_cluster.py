"""Replication across three real broker processes, through confluent-kafka: a topic with RF=3 and
min.insync.replicas=2, an idempotent acks=all producer, and a checker that records every
acknowledged message. Faults are injected while it produces: kill -9 of partition leaders and of
the active controller, SIGSTOP/SIGCONT of a leader for longer than the session timeout, and a
rolling restart of all three brokers. After each run: every acknowledged message is present exactly
once at the offset it was acknowledged with, per-partition order holds, and the three replicas'
logs hold the same batches (base offset, last offset, CRC) up to the high watermark.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from test_cluster import admin, cluster_view, start_cluster, wait_for, watermarks

TOPIC = "replicated"
PARTITIONS = 3
WAIT_S = 60


def create_replicated(b):
    fs = admin(b).create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=15)
    for f in fs.values():
        f.result(20)


def placement_seen_by(b):
    """{partition: (leader, replicas, isr)} in `b`'s own Metadata answer once every partition
    has a leader; None while `b` does not answer. Asked of `b` alone: a client bootstrapped
    with one broker may send its Metadata to any broker it knows, such as a paused one."""
    try:
        with wire.connect(b.port, timeout_s=2.0, host=b.host) as sock:
            p = wire.metadata_v1(sock, [TOPIC])["partitions"].get(TOPIC, {})
    except (OSError, wire.WireError):
        return None
    return p if p and all(v[0] >= 0 for v in p.values()) else None


def wait_full_isr(brokers, b, what="the ISR full again"):
    """Wait until `b` sees every partition's ISR full; on timeout, say what each broker sees."""
    try:
        return wait_for(what, lambda: full_isr(b))
    except AssertionError as e:
        views = {i + 1: placement_seen_by(x) for i, x in enumerate(brokers) if x.is_running()}
        raise AssertionError(f"{e}; placement (leader, replicas, isr) per broker: {views}") from None


def full_isr(b):
    """The placement once every partition has a leader and all three replicas in its ISR."""
    p = placement_seen_by(b)
    return p if p and all(sorted(v[2]) == [1, 2, 3] for v in p.values()) else None


class Checker:
    """Produces `n` to partition n % PARTITIONS (so each partition's values grow) with an
    idempotent acks=all producer, and records what was acknowledged."""

    def __init__(self, bootstrap: str):
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 300000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        self.acked_at_unknown_offset: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.failed: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, msg):
        if err is not None:
            self.failed.append(str(err))
            return
        if msg.offset() is None:
            # Persisted, offset unknown: librdkafka's idempotent producer reports a batch it
            # retried as delivered without an offset when the broker had already acknowledged
            # a later batch of the same producer (the earlier one is then known to be written).
            self.acked_at_unknown_offset[msg.partition()].append(int(msg.value()))
            return
        self.acked[msg.partition()][msg.offset()] = int(msg.value())

    def run(self):
        n = 0
        while not self.stop.is_set():
            for _ in range(20):
                try:
                    self.producer.produce(TOPIC, value=str(n).encode(), partition=n % PARTITIONS,
                                          on_delivery=self.on_delivery)
                    n += 1
                except BufferError:
                    break
            self.sent = n
            self.producer.poll(0.01)
        self.sent = n

    def __enter__(self):
        self.thread.start()
        return self

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        left = self.producer.flush(120)
        assert left == 0, f"{left} messages never acknowledged or failed"

    def acked_count(self):
        return sum(map(len, self.acked.values())) + sum(map(len, self.acked_at_unknown_offset.values()))

    def __exit__(self, *exc):
        self.stop.set()


def read_all(bootstrap: str) -> dict[int, list[tuple[int, int]]]:
    """Every (offset, value) of each partition, from the start to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    ends = {p: watermarks(consumer, TopicPartition(TOPIC, p))[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + WAIT_S
    while any((got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in got):
        assert time.monotonic() < deadline, f"reading back stalled: ends {ends}"
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got[m.partition()].append((m.offset(), int(m.value())))
    consumer.close()
    return got


def check_acknowledged(checker: Checker, got):
    assert checker.failed == [], checker.failed[:5]
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got[p]]
        values = [v for _, v in got[p]]
        assert len(set(values)) == len(values), f"partition {p} holds a duplicate"
        assert values == sorted(values), f"partition {p} is out of order"
        assert all(v % PARTITIONS == p for v in values)
        stored = dict(got[p])
        lost = {o: v for o, v in checker.acked[p].items() if stored.get(o) != v}
        assert not lost, f"partition {p}: acknowledged and not at their offset: {list(lost.items())[:5]}"
        present = set(values)
        missing = [v for v in checker.acked_at_unknown_offset[p] if v not in present]
        assert not missing, f"partition {p}: acknowledged (offset unknown) and missing: {missing[:5]}"
        assert offsets == sorted(offsets)


def batches(data_dir: Path, partition: int):
    """(base offset, last offset, crc) of every batch in a partition's segment files."""
    out = []
    for seg in sorted((data_dir / f"{TOPIC}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            crc, = struct.unpack_from(">I", data, pos + 17)
            last_delta, = struct.unpack_from(">i", data, pos + 23)
            out.append((base, base + last_delta, crc))
            pos += 12 + length
    return out


def checkpointed_hw(data_dir: Path, partition: int) -> int:
    lines = (data_dir / "replication-offset-checkpoint").read_text().split("\n")
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == TOPIC and int(parts[1]) == partition:
            return int(parts[2])
    return 0


def check_replicas_identical(brokers):
    """Stop every broker cleanly (the HW checkpoint is written at shutdown), then compare."""
    for b in brokers:
        b.stop()
    for p in range(PARTITIONS):
        hw = min(checkpointed_hw(b.data_dir, p) for b in brokers)
        assert hw > 0, f"partition {p}: nothing committed"
        logs = [[x for x in batches(b.data_dir, p) if x[1] < hw] for b in brokers]
        assert logs[0] == logs[1] == logs[2], f"partition {p}: replicas differ below HW {hw}"
        assert logs[0] and logs[0][-1][1] == hw - 1, f"partition {p}: batches end at {logs[0][-1:]}, HW {hw}"


def leader_of(brokers, partition):
    for b in brokers:
        if b.is_running():
            p = placement_seen_by(b)
            if p:
                return p[partition][0]
    return -1


def controller_of(brokers):
    for b in brokers:
        if b.is_running():
            try:
                c = cluster_view(b)[1]
            except Exception:
                continue
            if c > 0:
                return c
    return -1


def setup(broker_factory):
    brokers = start_cluster(broker_factory)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    create_replicated(brokers[0])
    wait_for("the ISR full", lambda: full_isr(brokers[0]))
    return brokers, ",".join(b.bootstrap for b in brokers)


def test_acks_all_replicates_and_leader_and_controller_kills_lose_nothing(broker_factory):
    brokers, bootstrap = setup(broker_factory)
    rng = random.Random(int(os.environ.get("SF_CHAOS_SEED", "7")))
    kills = int(os.environ.get("SF_CHAOS_KILLS", "20"))
    with Checker(bootstrap) as checker:
        wait_for("first acks", lambda: checker.acked_count() > 100)
        for k in range(kills):
            victim_id = controller_of(brokers) if k % 4 == 3 else leader_of(brokers, rng.randrange(PARTITIONS))
            assert victim_id > 0
            victim = brokers[victim_id - 1]
            before = checker.acked_count()
            victim.kill()
            alive = [b for b in brokers if b is not victim]
            # A new leader for whatever it led, elected from the ISR.
            wait_for("leaders off the killed broker", lambda: (lambda p: p and all(
                v[0] not in (-1, victim_id) for v in p.values()))(placement_seen_by(alive[0])))
            wait_for("acks without the killed broker", lambda: checker.acked_count() > before + 50)
            victim.start(timeout_s=WAIT_S)
            wait_full_isr(brokers, alive[0])
            print(f"kill {k + 1}/{kills}: broker {victim_id}, {checker.acked_count()} acked")
        checker.finish()
    got = read_all(bootstrap)
    check_acknowledged(checker, got)
    print(f"{checker.acked_count()} acknowledged of {checker.sent} sent; all present once, in order")
    check_replicas_identical(brokers)


def test_a_paused_leader_is_replaced_and_rejoins_as_a_follower(broker_factory):
    brokers, bootstrap = setup(broker_factory)
    with Checker(bootstrap) as checker:
        wait_for("first acks", lambda: checker.acked_count() > 100)
        for round_ in range(2):
            victim_id = leader_of(brokers, round_ % PARTITIONS)
            victim = brokers[victim_id - 1]
            alive = [b for b in brokers if b is not victim]
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                # Longer than the session timeout (3 s): the controller fences it.
                wait_for("a new leader while paused", lambda: (lambda p: p and all(
                    v[0] not in (-1, victim_id) for v in p.values()))(placement_seen_by(alive[0])))
                before = checker.acked_count()
                wait_for("acks while it is paused", lambda: checker.acked_count() > before + 50)
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            wait_full_isr(brokers, alive[0])
        checker.finish()
    check_acknowledged(checker, read_all(bootstrap))
    check_replicas_identical(brokers)


def test_a_rolling_restart_under_load_loses_nothing(broker_factory):
    brokers, bootstrap = setup(broker_factory)
    with Checker(bootstrap) as checker:
        wait_for("first acks", lambda: checker.acked_count() > 100)
        for b in brokers:
            before = checker.acked_count()
            b.stop()  # SIGTERM: a controlled shutdown moves its leaderships first
            b.start(timeout_s=WAIT_S)
            wait_for("the ISR full again", lambda: full_isr(brokers[0]) if brokers[0].is_running() else None)
            wait_for("acks after the restart", lambda: checker.acked_count() > before + 50)
        checker.finish()
    check_acknowledged(checker, read_all(bootstrap))
    check_replicas_identical(brokers)


def consume_some(client: str, bootstrap: str, group: str, want: int) -> list[int]:
    """Consume up to `want` values in `group` from its committed offsets, commit them
    synchronously, and leave the group."""
    got: list[int] = []
    deadline = time.monotonic() + WAIT_S
    if client == "confluent":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.subscribe([TOPIC])
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        c.commit(asynchronous=False)
        c.close()
    else:
        from kafka import KafkaConsumer
        c = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap.split(","), group_id=group,
                          enable_auto_commit=False, auto_offset_reset="earliest")
        while len(got) < want and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500, max_records=want - len(got)).values():
                got.extend(int(r.value) for r in records)
        c.commit()
        c.close()
    return got


def test_committed_offsets_survive_group_coordinator_failovers(broker_factory):
    """confluent-kafka and kafka-python commit, the coordinator is killed -9, and the group
    resumes at its committed offsets on the new coordinator: every message once."""
    brokers, bootstrap = setup(broker_factory)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    total = 300
    for i in range(total):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    for client in ("confluent", "kafka-python"):
        group = f"failover-{client}"
        first = consume_some(client, bootstrap, group, 100)
        assert len(first) == 100, first
        described = admin(brokers[0]).describe_consumer_groups([group])[group].result(20)
        victim = brokers[described.coordinator.id - 1]
        victim.kill()
        alive = [b for b in brokers if b is not victim]
        wait_for("leaders off the coordinator", lambda: (lambda p: p and all(
            v[0] not in (-1, described.coordinator.id) for v in p.values()))(placement_seen_by(alive[0])))
        rest = consume_some(client, ",".join(b.bootstrap for b in alive), group, total - len(first))
        seen = sorted(first + rest)
        assert seen == list(range(total)), f"{client}: {len(first)} + {len(rest)}, duplicates or gaps"
        victim.start(timeout_s=WAIT_S)
        wait_full_isr(brokers, alive[0])

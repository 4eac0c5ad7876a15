"""kafka-python across a 3-broker cluster: an idempotent acks=all KafkaProducer and a KafkaConsumer
group keep working through kill -9 of a partition leader, with no application error: every send()
future succeeds, and every acknowledged value is stored once, at the offset send() returned, and
consumed by the group. The killed broker restarts and rejoins every ISR.
"""

from __future__ import annotations

import threading
import time

from kafka import KafkaConsumer, KafkaProducer

from test_cluster import wait_for
from test_replication_cluster import (
    PARTITIONS,
    TOPIC,
    leader_of,
    placement_seen_by,
    read_all,
    setup,
    wait_full_isr,
)

WAIT_S = 60


class Produced:
    """Sends value n to partition n % PARTITIONS from a thread until stopped; records each
    acknowledged (partition, offset) -> value and every error send() reported."""

    def __init__(self, bootstrap: str):
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
            linger_ms=5, retries=1_000_000, delivery_timeout_ms=120_000, request_timeout_ms=10_000,
            metadata_max_age_ms=1000, retry_backoff_ms=100)
        self.acked: dict[tuple[int, int], int] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        n = 0
        while not self.stop.is_set():
            fut = self.producer.send(TOPIC, value=str(n).encode(), partition=n % PARTITIONS)
            fut.add_callback(self.ok, n)
            fut.add_errback(self.err)
            n += 1
            time.sleep(0.002)

    def ok(self, value, meta):
        with self.lock:
            self.acked[(meta.partition, meta.offset)] = value

    def err(self, e):
        with self.lock:
            self.errors.append(repr(e))

    def count(self):
        with self.lock:
            return len(self.acked)

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        self.producer.flush(timeout=120)
        self.producer.close(timeout=30)


def test_kafka_python_producer_and_group_survive_a_leader_kill(broker_factory):
    brokers, bootstrap = setup(broker_factory)
    produced = Produced(bootstrap)
    consumed: list[int] = []
    stop = threading.Event()
    consumer_errors: list[str] = []

    def consume():
        c = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap.split(","), group_id="kp-failover",
                          auto_offset_reset="earliest", enable_auto_commit=True,
                          auto_commit_interval_ms=500, metadata_max_age_ms=1000)
        try:
            while not stop.is_set():
                for records in c.poll(timeout_ms=200).values():
                    consumed.extend(int(r.value) for r in records)
        except Exception as e:  # an application-visible error fails the test
            consumer_errors.append(repr(e))
        finally:
            c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        wait_for("first acks", lambda: produced.count() > 100)
        victim_id = leader_of(brokers, 0)
        victim = brokers[victim_id - 1]
        killed_at = time.monotonic()
        victim.kill()
        alive = [b for b in brokers if b is not victim]
        wait_for("a new leader for partition 0", lambda: (lambda p: p and p[0][0] not in (-1, victim_id))(
            placement_seen_by(alive[0])))
        print(f"new leader of partition 0 after {time.monotonic() - killed_at:.2f} s")
        before = produced.count()
        wait_for("acks after the kill", lambda: produced.count() > before + 200)
        victim.start(timeout_s=WAIT_S)
        wait_full_isr(brokers, alive[0])
        before = produced.count()
        wait_for("acks after the rejoin", lambda: produced.count() > before + 100)
    finally:
        produced.finish()
    assert produced.errors == [], produced.errors[:5]
    stored = read_all(bootstrap)
    for p in range(PARTITIONS):
        values = [v for _, v in stored[p]]
        assert len(set(values)) == len(values), f"partition {p} holds a duplicate"
        assert values == sorted(values), f"partition {p} is out of order"
        at = dict(stored[p])
        lost = {o: v for (q, o), v in produced.acked.items() if q == p and at.get(o) != v}
        assert not lost, f"partition {p}: acknowledged and not at their offset: {list(lost.items())[:5]}"
    want = set(produced.acked.values())
    wait_for("the group to consume every acknowledged value", lambda: want <= set(consumed) or None)
    stop.set()
    reader.join(30)
    assert consumer_errors == [], consumer_errors

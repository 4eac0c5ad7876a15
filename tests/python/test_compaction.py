"""Log compaction through the real broker and confluent-kafka (docs/STORAGE.md, "Compaction"):

- a compacted topic keeps only the latest value per key, at its original offset, in offset order;
- tombstones vanish once delete.retention.ms has passed;
- `compact` alone deletes nothing by retention.ms;
- SIGKILL of the broker while it cleans loses no latest value (several cycles);
- a consumer reading from offset 0 while the cleaner runs sees offsets only go forward and every
  key's latest value.

Segments are small, segment.ms rolls the active segment, min.cleanable.dirty.ratio is 0.01 and the
cleaner's backoff is 100 ms, so passes happen within seconds.
"""

from __future__ import annotations

import random
import re
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from dataset import create_topic

CLEANER_ARGS = ["--log-cleaner-backoff-ms", "100"]
COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "segment.ms": "500",
    "min.cleanable.dirty.ratio": "0.01",
}
WAIT_S = 60


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    """Produce `records` in order; returns key -> (offset, value) of each key's last record."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            key = msg.key()
            if key not in latest or latest[key][0] < msg.offset():
                latest[key] = (msg.offset(), msg.value())

    for key, value in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0, "undelivered messages"
    assert not errors, errors[:3]
    return latest


def read_all(bootstrap: str, topic: str, timeout_s: float = 30) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from offset 0 to the end, as (offset, key, value)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{random.random()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    raise AssertionError(f"no end of partition within {timeout_s}s ({len(out)} records)")


def wait_until_compacted(bootstrap: str, topic: str, expected_count: int) -> list:
    deadline = time.monotonic() + WAIT_S
    records = []
    while time.monotonic() < deadline:
        records = read_all(bootstrap, topic)
        if len(records) <= expected_count:
            return records
        time.sleep(0.5)
    raise AssertionError(f"still {len(records)} records after {WAIT_S}s, want {expected_count}")


def check_latest(records, latest: dict[bytes, tuple[int, bytes | None]]) -> None:
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets go forward, no repeats"
    got = {k: (o, v) for o, k, v in records}
    for key, (offset, value) in latest.items():
        assert got.get(key) == (offset, value), f"{key!r}: want {(offset, value)}, got {got.get(key)}"


def overwrites(keys: int, versions: int, size: int = 100) -> list[tuple[bytes, bytes]]:
    return [
        (f"key-{k:04}".encode(), f"v{v:05}-{k:04}-".encode().ljust(size, b"x"))
        for v in range(versions)
        for k in range(keys)
    ]


def test_compacted_topic_keeps_the_latest_value_per_key(broker_factory, topic_name):
    broker = broker_factory(extra_args=CLEANER_ARGS)
    create_topic(broker.bootstrap, topic_name, partitions=1, config=COMPACT)
    latest = produce(broker.bootstrap, topic_name, overwrites(keys=50, versions=40))
    records = wait_until_compacted(broker.bootstrap, topic_name, expected_count=50)
    assert len(records) == 50
    check_latest(records, latest)
    assert "cleaned log" in broker.log_text()
    # After a restart the next pass starts at cleaner-offset-checkpoint, not at offset 0.
    assert (broker.data_dir / "cleaner-offset-checkpoint").exists()
    broker.restart()
    latest.update(produce(broker.bootstrap, topic_name, overwrites(keys=50, versions=5)))
    check_latest(wait_until_compacted(broker.bootstrap, topic_name, expected_count=50), latest)
    after_restart = broker.log_text().split("===== start #2", 1)[1]
    assert re.search(r"cleaned log .*first_dirty=[1-9]", after_restart), "the checkpoint was not used"


def test_tombstones_vanish_after_delete_retention(broker_factory, topic_name):
    broker = broker_factory(extra_args=CLEANER_ARGS)
    config = dict(COMPACT, **{"delete.retention.ms": "3000"})
    create_topic(broker.bootstrap, topic_name, partitions=1, config=config)
    records = overwrites(keys=40, versions=5)
    records += [(f"key-{k:04}".encode(), None) for k in range(0, 40, 2)]
    latest = produce(broker.bootstrap, topic_name, records)
    live = {k: v for k, v in latest.items() if v[1] is not None}
    # First the tombstones are kept (a consumer that saw a key must learn it was deleted)...
    seen_tombstone = False
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = read_all(broker.bootstrap, topic_name)
        if len(got) == len(latest):
            seen_tombstone = any(v is None for _, _, v in got)
            break
        time.sleep(0.2)
    assert seen_tombstone, "the cleaner kept no tombstone before delete.retention.ms"
    # ...then they go: only the live keys remain.
    got = wait_until_compacted(broker.bootstrap, topic_name, expected_count=len(live))
    assert all(v is not None for _, _, v in got)
    check_latest(got, live)


def test_compact_alone_does_not_delete_by_retention(broker_factory, topic_name):
    broker = broker_factory(extra_args=CLEANER_ARGS + ["--log-retention-check-interval-ms", "200"])
    config = dict(COMPACT, **{"retention.ms": "500"})
    create_topic(broker.bootstrap, topic_name, partitions=1, config=config)
    latest = produce(broker.bootstrap, topic_name, overwrites(keys=20, versions=20))
    time.sleep(3)
    records = wait_until_compacted(broker.bootstrap, topic_name, expected_count=20)
    check_latest(records, latest)


def test_sigkill_while_cleaning_loses_no_latest_value(broker_factory, topic_name):
    # The I/O limit stretches each pass over a second or two, so kills land inside passes.
    broker = broker_factory(extra_args=CLEANER_ARGS + ["--log-cleaner-io-max-bytes-per-second", "400000"])
    create_topic(broker.bootstrap, topic_name, partitions=1, config=COMPACT)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    rng = random.Random(17)
    for cycle in range(4):
        batch = overwrites(keys=300, versions=10, size=200)
        batch = [(k, v.replace(b"-x", f"-c{cycle}".encode(), 1)) for k, v in batch]
        latest.update(produce(broker.bootstrap, topic_name, batch))
        # Segments roll after segment.ms; the cleaner starts on them within its backoff.
        time.sleep(1.0 + rng.random() * 2.0)
        broker.restart(hard=True)
    records = wait_until_compacted(broker.bootstrap, topic_name, expected_count=300)
    check_latest(records, latest)
    interrupted = broker.log_text().count("removing an unfinished cleaned segment")
    completed = broker.log_text().count("completed an interrupted cleaner swap")
    print(f"kills inside a pass: {interrupted} while writing, {completed} inside a swap")


def test_consumer_from_zero_sees_a_consistent_view_while_cleaning(broker_factory, topic_name):
    broker = broker_factory(extra_args=CLEANER_ARGS)
    create_topic(broker.bootstrap, topic_name, partitions=1, config=COMPACT)
    keys = 100
    done_rounds: list[int] = []
    stop = threading.Event()
    failures: list[str] = []

    def writer():
        try:
            for r in range(30):
                if stop.is_set():
                    return
                produce(broker.bootstrap, topic_name, [(f"key-{k:04}".encode(), f"round={r:03}".encode().ljust(150, b".")) for k in range(keys)])
                done_rounds.append(r)
        except Exception as e:  # reported by the main thread
            failures.append(repr(e))

    t = threading.Thread(target=writer)
    t.start()
    reads = 0
    try:
        while t.is_alive():
            before = done_rounds[-1] if done_rounds else -1
            records = read_all(broker.bootstrap, topic_name)
            offsets = [o for o, _, _ in records]
            assert offsets == sorted(set(offsets)), "an offset went backwards or repeated"
            last: dict[bytes, int] = {}
            for _, k, v in records:
                last[k] = int(v[6:9])
            if before >= 0:
                assert len(last) == keys, f"keys missing from a read: {keys - len(last)}"
                stale = [k for k, r in last.items() if r < before]
                assert not stale, f"{len(stale)} keys older than round {before}"
            reads += 1
    finally:
        stop.set()
        t.join(60)
    assert not failures, failures
    assert reads >= 3
    assert "cleaned log" in broker.log_text()


def test_group_offsets_replay_from_a_cleaned_consumer_offsets(broker_factory, topic_name):
    """`__consumer_offsets` is compacted: after the cleaner ran over it, a restarted broker
    replays the cleaned log to the same committed offsets, and a deleted group stays deleted."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    broker = broker_factory(extra_args=CLEANER_ARGS)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # Small, quickly rolled segments for the offsets topic too (it exists once a group coordinates).
    Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "warmup"}).close()
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in COMPACT.items()]
    resource = ConfigResource("topic", "__consumer_offsets", incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    def commit_many(group: str, count: int) -> None:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        for i in range(1, count + 1):
            c.commit(offsets=[TopicPartition(topic_name, 0, i)], asynchronous=False)
        c.close()

    commit_many("gone", 50)
    admin.delete_consumer_groups(["gone"])["gone"].result(timeout=30)
    commit_many("keep", 400)
    deadline = time.monotonic() + WAIT_S
    while "__consumer_offsets" not in "".join(
        line for line in broker.log_text().splitlines() if "cleaned log" in line
    ):
        assert time.monotonic() < deadline, "the cleaner never cleaned __consumer_offsets"
        time.sleep(0.5)
    time.sleep(2)  # a pass or two more, past the rolls of the last commits
    broker.restart(hard=True)

    def committed(group: str) -> int:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            return c.committed([TopicPartition(topic_name, 0)], timeout=30)[0].offset
        finally:
            c.close()

    assert committed("keep") == 400
    assert committed("gone") < 0, "a deleted group's offsets came back"

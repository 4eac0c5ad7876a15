"""Restart: produce, stop (SIGTERM and, separately, SIGKILL), start again on the same data dir:
everything acknowledged is still there at the offset it was acknowledged with, topics and their
configs survive, and new messages continue the offsets."""

from __future__ import annotations

import re
import threading
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from clients import confluent_consume, confluent_produce
from dataset import PARTITIONS, create_topic, headers_of, key_of, value_of, verify_round_trip

FIRST = 3000
SECOND = 2000
T_S = 30


def log_ends(acked: dict[int, tuple[int, int]]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for part, off in acked.values():
        ends[part] = max(ends.get(part, 0), off + 1)
    return ends


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_acknowledged_messages_survive_restart_and_offsets_continue(broker, topic_name, how):
    create_topic(broker.bootstrap, topic_name, config={"retention.ms": "86400000"})
    acked = confluent_produce(broker.bootstrap, topic_name, "lz4", n=FIRST)

    if how == "sigterm":
        assert broker.stop() == 0, "SIGTERM must lead to a clean exit (code 0)"
    else:
        broker.kill()
    broker.start()

    # Everything acknowledged before the stop is there, where it was acknowledged.
    consumed = confluent_consume(broker.bootstrap, topic_name, PARTITIONS, FIRST)
    verify_round_trip(consumed, "lz4", n=FIRST, acked=acked)

    # The topic and its config survived.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(topic=topic_name, timeout=T_S).topics[topic_name]
    assert len(md.partitions) == PARTITIONS
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    cfg = admin.describe_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
    assert cfg["retention.ms"].value == "86400000"

    # High watermarks are where they were; new messages continue the offsets.
    ends = log_ends(acked)
    latest = admin.list_offsets(
        {TopicPartition(topic_name, p): OffsetSpec.latest() for p in range(PARTITIONS)}, request_timeout=T_S
    )
    for tp, fut in latest.items():
        assert fut.result(timeout=T_S).offset == ends.get(tp.partition, 0)

    acked2 = confluent_produce(broker.bootstrap, topic_name, "lz4", n=SECOND, first_seq=FIRST)
    for seq, (part, off) in acked2.items():
        assert off >= ends.get(part, 0), f"seq {seq} got offset {off} below the old end of partition {part}"
    consumed2 = confluent_consume(broker.bootstrap, topic_name, PARTITIONS, SECOND, start_offsets=ends)
    verify_round_trip(consumed2, "lz4", n=SECOND, acked=acked2, first_seq=FIRST, base_offsets=ends)


def test_restart_twice_and_restart_empty_topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    empty = topic_name + "-empty"
    create_topic(broker.bootstrap, empty, partitions=2)
    acked = confluent_produce(broker.bootstrap, topic_name, "zstd", n=1000)
    broker.restart(hard=False)
    broker.restart(hard=True)
    consumed = confluent_consume(broker.bootstrap, topic_name, PARTITIONS, 1000)
    verify_round_trip(consumed, "zstd", n=1000, acked=acked)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=T_S).topics
    assert empty in md and len(md[empty].partitions) == 2


def test_sigkill_during_production_keeps_everything_acknowledged(broker, topic_name):
    """Kill -9 while a producer is sending; after the restart the producer (retrying) finishes.
    Every message that was ever acknowledged must be found at its acknowledged offset.
    Unacknowledged messages may be retried, so duplicates are allowed here (no idempotence)."""
    n = 20_000
    create_topic(broker.bootstrap, topic_name)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 200,
            "enable.idempotence": False,
            "message.timeout.ms": 90000,
            "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
        }
    )
    acked: dict[int, tuple[int, int]] = {}
    errors: list[str] = []
    half_acked = threading.Event()

    def on_delivery(err, msg, seq):
        if err is not None:
            errors.append(f"seq {seq}: {err}")
            return
        acked[seq] = (msg.partition(), msg.offset())
        if len(acked) >= n // 4:
            half_acked.set()

    for i in range(n):
        while True:
            try:
                producer.produce(topic_name, key=key_of(i), value=value_of(i, "none"), headers=headers_of(i, "none"),
                                 on_delivery=lambda e, m, s=i: on_delivery(e, m, s))  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if i == n // 2:
            # Wait until a good part is acknowledged, then pull the plug mid-stream.
            for _ in range(600):
                if half_acked.is_set():
                    break
                producer.poll(0.05)
            assert half_acked.is_set(), "producer made no progress before the kill"
            acked_before_kill = dict(acked)
            broker.kill()
            broker.start()
    assert producer.flush(120) == 0
    assert not errors, errors[:3]
    assert len(acked) == n

    # Retried duplicates can make the logs longer than n: read up to the high watermarks.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    latest = admin.list_offsets(
        {TopicPartition(topic_name, p): OffsetSpec.latest() for p in range(PARTITIONS)}, request_timeout=T_S
    )
    total = sum(f.result(timeout=T_S).offset for f in latest.values())
    assert total >= n
    consumer_msgs = confluent_consume(broker.bootstrap, topic_name, PARTITIONS, total)
    assert len(consumer_msgs) == total
    at = {(m.partition, m.offset): m for m in consumer_msgs}
    for seq, pos in acked_before_kill.items():
        assert acked[seq] == pos
    for seq, pos in acked.items():
        m = at.get(pos)
        assert m is not None, f"seq {seq} acknowledged at {pos} is missing after kill -9"
        assert int(m.headers["seq"]) == seq and m.value == value_of(seq, "none")
    for p in {m.partition for m in consumer_msgs}:
        offsets = sorted(o for (pp, o) in at if pp == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets have holes"


def _checkpoint(path) -> int | None:
    try:
        lines = path.read_text().splitlines()
        return int(lines[2])
    except (OSError, IndexError, ValueError):
        return None


def _log_bytes(data_dir, topic: str) -> int:
    return sum(f.stat().st_size for d in data_dir.glob(f"{topic}-*") for f in d.glob("*.log"))


def test_sigkill_rechecks_only_the_unflushed_tail(broker_factory, topic_name):
    """acks=1 (no group commit): the background flush alone must move each partition's recovery
    point to its log end within a few intervals; after a kill -9 every acknowledged message is
    served and the restart CRC-checks only what was written after that, not the whole log."""
    interval_ms = 200
    broker = broker_factory(extra_args=["--log-flush-background-ms", str(interval_ms)])
    create_topic(broker.bootstrap, topic_name)
    first, second = 20_000, 2_000
    acked = confluent_produce(broker.bootstrap, topic_name, "none", n=first, extra={"acks": "1"})
    ends = log_ends(acked)
    assert len(ends) == PARTITIONS

    # The recovery points reach the log ends by background flushing alone (bounded wait).
    deadline = time.monotonic() + 20 * interval_ms / 1000 + 10
    ckpts: dict[int, int | None] = {}
    while time.monotonic() < deadline:
        ckpts = {
            p: _checkpoint(broker.data_dir / f"{topic_name}-{p}" / "recovery-point-offset-checkpoint")
            for p in range(PARTITIONS)
        }
        if all(ckpts[p] == ends[p] for p in range(PARTITIONS)):
            break
        time.sleep(interval_ms / 1000)
    assert all(ckpts[p] == ends[p] for p in range(PARTITIONS)), f"checkpoints {ckpts}, log ends {ends}"
    flushed_bytes = _log_bytes(broker.data_dir, topic_name)

    # More data, then kill -9 at once: only this tail may need re-checking.
    acked.update(confluent_produce(broker.bootstrap, topic_name, "none", n=second, first_seq=first,
                                   extra={"acks": "1"}))  # fmt: skip
    broker.kill()
    tail_bytes = _log_bytes(broker.data_dir, topic_name) - flushed_bytes
    assert tail_bytes > 0
    broker.start()

    start_log = broker.log_text().rsplit("===== start #2", 1)[1]
    found = re.search(r"recovery_checked_bytes=(\d+).*loaded logs|loaded logs.*recovery_checked_bytes=(\d+)", start_log)
    assert found, f"no 'loaded logs' line in\n{start_log[-3000:]}"
    checked = int(found.group(1) or found.group(2))
    assert checked <= tail_bytes, f"re-checked {checked} bytes, unflushed tail was {tail_bytes}"
    assert checked < flushed_bytes, f"re-checked {checked} of {flushed_bytes + tail_bytes} bytes"

    consumed = confluent_consume(broker.bootstrap, topic_name, PARTITIONS, first + second)
    verify_round_trip(consumed, "none", n=first + second, acked=acked)

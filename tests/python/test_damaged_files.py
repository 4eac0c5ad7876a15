"""Damaged files: with the broker stopped, flip bytes in or truncate every kind of file a partition
keeps (segment, offset index, time index, checkpoints, producer snapshot) and the broker-wide
files, then start it again.

What must hold, for every damage:
- a damaged partition file never stops the broker: it starts, and every other partition serves
  all its data;
- the damaged partition never serves wrong data and never skips silently: a consumer reading it
  from offset 0 gets dense offsets with the values that were written, up to either the end or
  an error it is told about (a storage/corruption error from the broker, or the client's own CRC
  check on a batch the broker returned as stored);
- a damaged broker-wide file (topics.json, meta.properties) stops the start-up with a message
  that names the file, never a panic.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from dataset import create_topic

SEGMENT_BYTES = 64 * 1024
VICTIM_MESSAGES = 1500
BYSTANDER_MESSAGES = 600
CONSUME_TIMEOUT_S = 30


def value_of(topic: str, partition: int, i: int) -> bytes:
    rng = random.Random(f"{topic}/{partition}/{i}")
    return f"{partition}:{i}:".encode() + rng.randbytes(100 + i % 200)


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 37, "acks": "all"}
    )
    errors = []
    for p in range(partitions):
        for i in range(n):
            producer.produce(topic, value=value_of(topic, p, i), partition=p,
                             on_delivery=lambda err, msg: err and errors.append(err))
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]


def consume(bootstrap: str, topic: str, partition: int) -> tuple[list[tuple[int, bytes]], list[str], int]:
    """(records from offset 0, errors the client reported, high watermark)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"damage-{topic}-{partition}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
            "fetch.error.backoff.ms": 50,
        }
    )
    tp = TopicPartition(topic, partition, 0)
    records: list[tuple[int, bytes]] = []
    errors: list[str] = []
    try:
        # An offline partition (its log cannot be opened) is reported in Metadata, as Kafka
        # does: that is the client being told, and there is nothing to read.
        meta = consumer.list_topics(topic, timeout=20).topics[topic].partitions[partition]
        if meta.error is not None:
            return records, [f"metadata: {meta.error} (leader {meta.leader})"], -1
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
        consumer.assign([tp])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if errors:
                    break  # told about a problem and nothing more arrives
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high:
                        break
                    continue
                errors.append(str(msg.error()))
                if len(errors) > 20:
                    break
                continue
            records.append((msg.offset(), msg.value()))
            if msg.offset() >= high - 1:
                break
    finally:
        consumer.close()
    return records, errors, high


def check_bystander(bootstrap: str, topic: str, partitions: int) -> None:
    for p in range(partitions):
        records, errors, high = consume(bootstrap, topic, p)
        assert not errors, f"{topic}/{p}: untouched partition reports {errors[:3]}"
        assert high == BYSTANDER_MESSAGES
        assert [o for o, _ in records] == list(range(BYSTANDER_MESSAGES))
        assert all(v == value_of(topic, p, o) for o, v in records)


def segments(part_dir: Path, suffix: str) -> list[Path]:
    return sorted(part_dir.glob(f"*{suffix}"))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    at = min(at, len(data) - 1)
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def batch_starts(log: Path) -> list[int]:
    data = log.read_bytes()
    pos, starts = 0, []
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if length <= 0:
            break
        starts.append(pos)
        pos += 12 + length
    return starts


def damage_length_field(d: Path) -> None:
    log = segments(d, ".log")[0]
    starts = batch_starts(log)
    flip(log, starts[len(starts) // 2] + 10)


def damage_payload(d: Path) -> None:
    log = segments(d, ".log")[0]
    starts = batch_starts(log)
    flip(log, starts[len(starts) // 3] + 61 + 20)


def damage_truncate_sealed(d: Path) -> None:
    log = segments(d, ".log")[0]
    os.truncate(log, log.stat().st_size // 2 + 3)


def damage_truncate_active(d: Path) -> None:
    log = segments(d, ".log")[-1]
    os.truncate(log, max(0, log.stat().st_size - 50))


def garbage(path: Path, size: int | None = None) -> None:
    # After SIGKILL a checkpoint may not have been written yet (log-start-offset-checkpoint
    # only is at close or DeleteRecords): a garbage file where none was is damage too.
    if size is None:
        size = path.stat().st_size if path.exists() else 64
    path.write_bytes(random.Random(str(path)).randbytes(max(size, 16)))


DAMAGES = {
    "log-length-field": damage_length_field,
    "log-payload-byte": damage_payload,
    "log-truncated-sealed": damage_truncate_sealed,
    "log-truncated-active-tail": damage_truncate_active,
    "index-garbage": lambda d: garbage(segments(d, ".index")[0], 4096),
    "index-truncated": lambda d: os.truncate(segments(d, ".index")[0], 13),
    "index-missing": lambda d: segments(d, ".index")[0].unlink(),
    "timeindex-garbage": lambda d: garbage(segments(d, ".timeindex")[0], 4096),
    "snapshot-garbage": lambda d: [garbage(p) for p in segments(d, ".snapshot")],
    "leader-epoch-checkpoint-garbage": lambda d: garbage(d / "leader-epoch-checkpoint"),
    "recovery-point-checkpoint-garbage": lambda d: garbage(d / "recovery-point-offset-checkpoint"),
    "log-start-checkpoint-garbage": lambda d: garbage(d / "log-start-offset-checkpoint"),
}


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_partition_file_never_stops_the_broker_nor_skips_silently(broker_factory, topic_name, damage, how):
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)])
    victim, bystander = topic_name[:100] + "-v", topic_name[:100] + "-b"
    create_topic(broker.bootstrap, victim, partitions=1)
    create_topic(broker.bootstrap, bystander, partitions=2)
    produce(broker.bootstrap, victim, 1, VICTIM_MESSAGES)
    produce(broker.bootstrap, bystander, 2, BYSTANDER_MESSAGES)
    part_dir = broker.data_dir / f"{victim}-0"
    assert len(segments(part_dir, ".log")) >= 3, "the test needs sealed segments"
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()

    DAMAGES[damage](part_dir)
    broker.start()
    check_bystander(broker.bootstrap, bystander, 2)

    records, errors, high = consume(broker.bootstrap, victim, 0)
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(offsets))), f"offsets not dense from 0: gap near {len(offsets)}"
    for o, v in records:
        assert v == value_of(victim, 0, o), f"offset {o}: wrong data served"
    if len(records) < high:
        assert errors, (
            f"{damage}: served {len(records)} of {high} records and stopped without telling the client"
        )
    assert broker.is_running()
    assert "panicked" not in broker.log_text()


@pytest.mark.parametrize("name", ["__cluster_metadata-0/snapshot", "meta.properties"])
def test_a_damaged_broker_file_stops_start_up_with_a_message_naming_it(broker_factory, topic_name, name):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, partitions=1)
    assert broker.stop() == 0
    garbage(broker.data_dir / name, 200)
    with pytest.raises(RuntimeError, match="exited"):
        broker.start(timeout_s=20)
    log = broker.log_text().split("===== start #2")[-1]
    assert name in log, f"the start-up error does not name {name}:\n{log[-2000:]}"
    assert "panicked" not in log


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_damaged_high_watermark_checkpoint_is_reported_and_replaced(broker_factory, topic_name, how):
    # replication-offset-checkpoint: the broker starts (Kafka would fail the log dir), says so
    # at ERROR naming the file, serves everything (partitions alone in their ISR start at their
    # log end), and the next write replaces the file.
    broker = broker_factory(extra_args=["--replica-high-watermark-checkpoint-interval-ms", "100"])
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, 2, BYSTANDER_MESSAGES)
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    path = broker.data_dir / "replication-offset-checkpoint"
    garbage(path, 200)
    broker.start()
    check_bystander(broker.bootstrap, topic_name, 2)
    log = broker.log_text().split("===== start #2")[-1]
    assert "replication-offset-checkpoint" in log and "ERROR" in log, log[-2000:]
    assert broker.stop() == 0
    text = path.read_text()
    assert text.startswith("0\n"), text
    assert f"{topic_name} 0 " in text and f"{topic_name} 1 " in text, text
    assert "panicked" not in broker.log_text()

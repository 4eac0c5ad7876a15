"""Damaged segment files seen through the real broker and a real client (docs/STORAGE.md,
"Damaged data"): a flipped byte in a sealed batch's length field is an error for the consumer
(CORRUPT_MESSAGE), never a silent end of the segment."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from dataset import create_topic

SEGMENT_BYTES = 64 * 1024
RECORDS = 600
VALUE = b"d" * 500
CORRUPT_MESSAGE = 2
CONSUME_TIMEOUT_S = 30


def produce(bootstrap: str, topic: str, n: int = RECORDS) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 20,
            "enable.idempotence": False,
        }
    )
    for i in range(n):
        producer.produce(topic, value=VALUE, key=str(i).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def batches_in(path: Path) -> list[tuple[int, int]]:
    """(byte position, base offset) of each batch in a `.log` file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack(">qi", data[pos : pos + 12])
        out.append((pos, base))
        pos += 12 + length
    return out


def flip_byte(path: Path, at: int, mask: int) -> None:
    """In place, without truncating (the broker may have the file mapped)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


def consume_until_error(bootstrap: str, topic: str) -> tuple[list[int], list]:
    """Offsets delivered, and the first partition error, within CONSUME_TIMEOUT_S."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sf-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 16 * 1024,
        }
    )
    offsets: list[int] = []
    errors: list = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.3)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
            else:
                offsets.append(msg.offset())
    finally:
        consumer.close()
    return offsets, errors


def test_flipped_length_byte_in_a_sealed_segment_is_a_client_error(broker_factory, topic_name):
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)])
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name)
    part_dir = broker.data_dir / f"{topic_name}-0"
    segments = sorted(part_dir.glob("*.log"))
    assert len(segments) >= 3, "want sealed segments"
    sealed = segments[0]
    batches = batches_in(sealed)
    pos, base = batches[len(batches) // 2]

    # While the broker runs: the sealed segment is mapped; flip the length's low byte.
    flip_byte(sealed, pos + 11, 0x04)
    offsets, errors = consume_until_error(broker.bootstrap, topic_name)
    assert errors, f"no error: consumer silently stopped at {offsets[-1] if offsets else None}"
    assert errors[0].code() == CORRUPT_MESSAGE, errors[0]
    assert offsets == list(range(base)), "every offset before the damage, nothing past it"
    assert "damaged record batch" in broker.log_path.read_text()

    # After a clean restart (a clean open does not re-check sealed segments): still an error.
    assert broker.stop() == 0
    broker.start()
    offsets, errors = consume_until_error(broker.bootstrap, topic_name)
    assert errors and errors[0].code() == CORRUPT_MESSAGE, errors
    assert offsets == list(range(base))

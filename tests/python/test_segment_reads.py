"""Reads across segment boundaries with a real client: a Fetch whose byte budget runs out partway
through a segment must not go on into the next segment (that silently skipped the rest of the
first one: consumers jumped over records with no error). docs/STORAGE.md, "Reads"."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from dataset import create_topic

SEGMENT_BYTES = 120_000
VALUE = b"v" * 1000
# Alternating big batches of varying size and small ones, so segments fill unevenly and many a
# read that the budget stops inside a segment still has room for the next segment's first batch
# (which the old read appended, skipping the rest of the segment).
SMALL_BATCH = 2
CYCLES = 60


def big_batch(cycle: int) -> int:
    return 10 + (cycle * 7) % 25
PARTITION_FETCH_BYTES = 100_000
CONSUME_TIMEOUT_S = 60


def produce_straddling_batches(bootstrap: str, topic: str) -> int:
    """Produce CYCLES pairs of a big and a small batch (one batch per flush). Returns N."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 1000,  # flush() decides where each batch ends
            "batch.size": 1_000_000,
            "enable.idempotence": False,
            "compression.type": "none",
        }
    )
    errors: list[str] = []
    n = 0
    for cycle in range(CYCLES):
        for count in (big_batch(cycle), SMALL_BATCH):
            for _ in range(count):
                producer.produce(
                    topic,
                    value=VALUE,
                    key=str(n).encode(),
                    partition=0,
                    on_delivery=lambda err, msg: err and errors.append(str(err)),
                )
                n += 1
            assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return n


def consume_offsets(bootstrap: str, topic: str, n: int) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sf-{topic}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            "fetch.wait.max.ms": 100,
        }
    )
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            offsets.append(msg.offset())
            if msg.offset() >= n - 1:
                break
    finally:
        consumer.close()
    return offsets


def test_consumer_receives_every_offset_once_when_batches_straddle_segments(broker_factory, topic_name):
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)])
    create_topic(broker.bootstrap, topic_name, partitions=1)
    n = produce_straddling_batches(broker.bootstrap, topic_name)
    segments = sorted((broker.data_dir / f"{topic_name}-0").glob("*.log"))
    assert len(segments) >= 8, f"want many segments, got {len(segments)}"

    offsets = consume_offsets(broker.bootstrap, topic_name, n)
    missing = sorted(set(range(n)) - set(offsets))
    assert not missing, f"{len(missing)} of {n} offsets never delivered, first {missing[:5]}"
    assert offsets == list(range(n)), "offsets delivered out of order or more than once"

"""Time retention through the real broker (docs/STORAGE.md, "Offsets, truncation, retention"):
records without a timestamp (-1) age from their segment file's modification time, not from the
epoch, and retention runs every `--log-retention-check-interval-ms` (default 5 minutes), as in
Kafka. Before the fix such records were deleted about a second after they were written
(librdkafka's test 0053), and 1970-dated ones too (0052) whatever the check interval."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

import wire
from dataset import create_topic

BATCHES = 30
WAIT_S = 3.0
T_S = 10


def produce_raw(port: int, topic: str, timestamp_ms: int) -> None:
    with wire.connect(port) as sock:
        for i in range(BATCHES):
            batch = wire.record_batch([(None, b"r" * 200)], timestamp_ms=timestamp_ms)
            result = wire.produce_v3(sock, topic, 0, batch, correlation_id=100 + i)
            assert result[(topic, 0)][0] == 0, result


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T_S, cached=False)
    finally:
        c.close()


def test_records_without_timestamps_survive_and_1970_records_go_at_the_check_interval(
    broker_factory, topic_name
):
    broker = broker_factory(
        extra_args=[
            "--retention-ms", "60000",
            "--log-retention-check-interval-ms", "300",
            "--segment-bytes", "4096",
        ]
    )
    no_ts, old = f"{topic_name}-nots", f"{topic_name}-1970"
    for t in (no_ts, old):
        create_topic(broker.bootstrap, t, partitions=1)
    produce_raw(broker.port, no_ts, -1)
    produce_raw(broker.port, old, 0)
    time.sleep(WAIT_S)  # ten retention checks
    assert watermarks(broker.bootstrap, no_ts) == (0, BATCHES), "records without timestamps were deleted"
    # Kafka deletes records whose largest timestamp is past retention, the active segment too
    # (after rolling): the 1970 records are gone.
    assert watermarks(broker.bootstrap, old) == (BATCHES, BATCHES)


def test_retention_waits_for_the_default_check_interval(broker_factory, topic_name):
    broker = broker_factory(extra_args=["--retention-ms", "1000", "--segment-bytes", "4096"])
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_raw(broker.port, topic_name, 0)
    time.sleep(WAIT_S)
    # 1970 records are past retention.ms, but the first check is 5 minutes after start-up.
    assert watermarks(broker.bootstrap, topic_name) == (0, BATCHES)

"""Produce/consume the matrix dataset with each Python client, returning `dataset.Msg` lists."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from dataset import MESSAGES, Msg, headers_of, key_of, value_of

CONSUME_TIMEOUT_S = 120
FLUSH_TIMEOUT_S = 120


# -- confluent-kafka (current librdkafka) ----------------------------------------------------
def confluent_produce(
    bootstrap: str, topic: str, codec: str, n: int = MESSAGES, first_seq: int = 0, extra: dict | None = None
) -> dict[int, tuple[int, int]]:
    """Produce seqs first_seq..first_seq+n; returns seq -> (partition, offset) from delivery reports."""
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 1000,
        "enable.idempotence": False,
        "message.timeout.ms": 60000,
    }
    conf.update(extra or {})
    producer = Producer(conf)
    acked: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err, msg, seq):
        if err is not None:
            errors.append(f"seq {seq}: {err}")
        else:
            acked[seq] = (msg.partition(), msg.offset())

    for i in range(first_seq, first_seq + n):
        while True:
            try:
                producer.produce(
                    topic,
                    key=key_of(i),
                    value=value_of(i, codec),
                    headers=headers_of(i, codec),
                    on_delivery=lambda err, msg, seq=i: on_delivery(err, msg, seq),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages not delivered after {FLUSH_TIMEOUT_S}s"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    assert len(acked) == n
    return acked


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, n: int, start_offsets: dict[int, int] | None = None
) -> list[Msg]:
    """Assign every partition (no group management) from `start_offsets` (default: beginning)
    and read until `n` messages arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sf-verify-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 200,
        }
    )
    try:
        consumer.assign(
            [
                TopicPartition(topic, p, (start_offsets or {}).get(p, OFFSET_BEGINNING))
                for p in range(partitions)
            ]
        )
        out: list[Msg] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < n and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {m.error()}")
                out.append(Msg(m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or [])))
        # Give the broker a moment to show anything beyond n (duplicates would fail the checks).
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            if m.error() is None:
                out.append(Msg(m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or [])))
        return out
    finally:
        consumer.close()


# -- kafka-python (independent pure-Python implementation) -----------------------------------
def kafka_python_produce(bootstrap: str, topic: str, codec: str, n: int = MESSAGES) -> dict[int, tuple[int, int]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
        batch_size=64 * 1024,
        enable_idempotence=False,
        request_timeout_ms=30000,
    )
    try:
        futures = []
        for i in range(n):
            futures.append(
                (
                    i,
                    producer.send(
                        topic,
                        key=key_of(i),
                        value=value_of(i, codec),
                        headers=headers_of(i, codec),
                    ),
                )
            )
        producer.flush(timeout=FLUSH_TIMEOUT_S)
        acked = {}
        for i, f in futures:
            md = f.get(timeout=FLUSH_TIMEOUT_S)
            acked[i] = (md.partition, md.offset)
        return acked
    finally:
        producer.close(timeout=30)


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, n: int) -> list[Msg]:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
    )
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[Msg] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < n and time.monotonic() < deadline:
            for _tp, records in consumer.poll(timeout_ms=500, max_records=2000).items():
                for r in records:
                    out.append(Msg(r.partition, r.offset, r.key, r.value, dict(r.headers or [])))
        for _tp, records in consumer.poll(timeout_ms=500).items():
            for r in records:
                out.append(Msg(r.partition, r.offset, r.key, r.value, dict(r.headers or [])))
        return out
    finally:
        consumer.close()

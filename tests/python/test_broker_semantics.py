"""Kafka semantics that real clients depend on (KAFKA-NOTES.md): auto topic creation with
num.partitions, max.message.bytes, fetching from the middle of a batch, and a long-poll fetch
that wakes up when data arrives."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import wire
from dataset import create_topic

T_S = 30


def produce_one(bootstrap: str, topic: str, value: bytes, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **conf})
    out = []
    p.produce(topic, value=value, on_delivery=lambda e, m: out.append((e, m)))
    assert p.flush(T_S) == 0
    return out[0]


def test_metadata_auto_creates_topic_with_num_partitions(broker_factory):
    broker = broker_factory(extra_args=["--num-partitions", "3"])
    err, msg = produce_one(broker.bootstrap, "auto-created", b"hello")
    assert err is None, err
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=T_S).topics
    assert len(md["auto-created"].partitions) == 3


def test_auto_create_disabled_gives_unknown_topic(broker_factory):
    broker = broker_factory(extra_args=["--auto-create-topics", "false"])
    with wire.connect(broker.port) as sock:
        md = wire.metadata_v1(sock, ["never-created"])
    err, parts = md["topics"]["never-created"]
    assert err == 3, f"want UNKNOWN_TOPIC_OR_PARTITION (3), got {err}"
    assert parts == []
    names = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=T_S).topics
    assert "never-created" not in names


def test_batch_over_max_message_bytes_is_rejected(shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1, config={"max.message.bytes": "2000"})
    err, _ = produce_one(shared_broker.bootstrap, topic_name, b"x" * 10_000, **{"compression.type": "none"})
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    err, msg = produce_one(shared_broker.bootstrap, topic_name, b"small")
    assert err is None and msg.offset() == 0, "the rejected batch must not take an offset"


def test_fetch_from_the_middle_of_a_batch(shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    batch = wire.record_batch([(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
    with wire.connect(shared_broker.port) as sock:
        assert wire.produce_v3(sock, topic_name, 0, batch)[(topic_name, 0)] == (0, 0)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "mid-" + topic_name,
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.assign([TopicPartition(topic_name, 0, 6)])
        got = []
        deadline = time.monotonic() + T_S
        while len(got) < 4 and time.monotonic() < deadline:
            for m in c.consume(10, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        assert got == [(i, f"v{i}".encode()) for i in range(6, 10)]
    finally:
        c.close()


def test_long_poll_fetch_returns_when_data_arrives(shared_broker, topic_name):
    """A consumer waiting with a long fetch.wait.max.ms gets a new message well before the wait
    ends: the broker wakes parked fetches on append instead of sleeping out max_wait_ms."""
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "lp-" + topic_name,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10_000,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        c.consume(1, timeout=2.0)  # connected and parked in a long poll on an empty partition
        sent_at = []

        def send_later():
            time.sleep(1.0)
            sent_at.append(time.monotonic())
            produce_one(shared_broker.bootstrap, topic_name, b"wake-up")

        t = threading.Thread(target=send_later)
        t.start()
        got = None
        deadline = time.monotonic() + T_S
        while got is None and time.monotonic() < deadline:
            for m in c.consume(1, timeout=0.5):
                if m.error() is None:
                    got = (time.monotonic(), m.value())
        t.join(T_S)
        assert got is not None and got[1] == b"wake-up"
        latency_s = got[0] - sent_at[0]
        assert latency_s < 5.0, f"message arrived {latency_s:.1f}s after produce: the fetch slept out its max wait"
    finally:
        c.close()

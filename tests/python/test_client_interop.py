"""Interop between the project's Rust client (through the `streamforge produce` / `consume`
tools) and real Kafka clients (confluent-kafka / librdkafka and kafka-python), both ways:
keys, values, headers, compression codecs and timestamps must survive unchanged."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from harness import find_binary

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
RECORDS = 60
TIMEOUT_S = 30


def sf(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        [str(find_binary()), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, f"streamforge {args} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def create_topic(broker, topic: str, partitions: int = 2) -> None:
    sf("topics", "create", topic, "--partitions", str(partitions), "--bootstrap", broker.bootstrap)


def rust_produce(broker, topic: str, codec: str) -> tuple[list[str], int, int]:
    lines = [f"k{i % 5}|v{i}-{'x' * (i % 13)}" for i in range(RECORDS)]
    before = int(time.time() * 1000)
    sf(
        "produce", topic, "--key-separator", "|", "--header", "origin=rust", "--header", "codec=" + codec,
        "--compression", codec, "--bootstrap", broker.bootstrap, stdin="\n".join(lines) + "\n",
    )
    after = int(time.time() * 1000)
    return lines, before, after


def rust_consume(broker, topic: str, n: int) -> list[dict]:
    out = sf(
        "consume", topic, "--from", "beginning", "-n", str(n), "--json", "--idle-timeout-ms", str(TIMEOUT_S * 1000),
        "--bootstrap", broker.bootstrap,
    )
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("codec", CODECS)
def test_rust_client_to_confluent_kafka(broker, topic_name, codec):
    create_topic(broker, topic_name)
    lines, before, after = rust_produce(broker, topic_name, codec)
    c = CKConsumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": f"g-{topic_name}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        c.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
        got = []
        deadline = time.time() + TIMEOUT_S
        while len(got) < RECORDS and time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m)
    finally:
        c.close()
    assert len(got) == RECORDS
    seen = sorted(f"{m.key().decode()}|{m.value().decode()}" for m in got)
    assert seen == sorted(lines)
    for m in got:
        assert dict(m.headers()) == {"origin": b"rust", "codec": codec.encode()}
        ts_type, ts = m.timestamp()
        assert ts_type == 1  # CreateTime
        assert before - 1000 <= ts <= after + 1000


@pytest.mark.parametrize("codec", CODECS)
def test_rust_client_to_kafka_python(broker, topic_name, codec):
    create_topic(broker, topic_name)
    lines, before, after = rust_produce(broker, topic_name, codec)
    c = KafkaConsumer(
        topic_name,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=TIMEOUT_S * 1000,
    )
    got = []
    try:
        for m in c:
            got.append(m)
            if len(got) == RECORDS:
                break
    finally:
        c.close()
    assert len(got) == RECORDS
    assert sorted(f"{m.key.decode()}|{m.value.decode()}" for m in got) == sorted(lines)
    for m in got:
        assert dict(m.headers) == {"origin": b"rust", "codec": codec.encode()}
        assert before - 1000 <= m.timestamp <= after + 1000


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_to_rust_client(broker, topic_name, codec):
    create_topic(broker, topic_name)
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic_name, key=f"key-{i}", value=f"value-{i}", headers=[("n", str(i).encode())], timestamp=1_600_000_000_000 + i)
    assert p.flush(TIMEOUT_S) == 0
    got = rust_consume(broker, topic_name, RECORDS)
    assert len(got) == RECORDS
    for r in got:
        i = int(r["value"].split("-")[1])
        assert r["key"] == f"key-{i}"
        assert r["headers"] == {"n": str(i)}
        assert r["timestamp"] == 1_600_000_000_000 + i


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_to_rust_client(broker, topic_name, codec):
    create_topic(broker, topic_name)
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        # Records are what this test is about; idempotence has its own tests.
        enable_idempotence=False,
    )
    for i in range(RECORDS):
        p.send(topic_name, key=f"key-{i}".encode(), value=f"value-{i}".encode(), headers=[("n", str(i).encode())], timestamp_ms=1_600_000_000_000 + i)
    p.flush(TIMEOUT_S)
    p.close()
    got = rust_consume(broker, topic_name, RECORDS)
    assert len(got) == RECORDS
    for r in got:
        i = int(r["value"].split("-")[1])
        assert r["key"] == f"key-{i}"
        assert r["headers"] == {"n": str(i)}
        assert r["timestamp"] == 1_600_000_000_000 + i

"""Damaged segment files seen through the real broker and a real client (docs/STORAGE.md,
"Damaged data is an error, never silence" and "Recovery"): a flipped byte in a sealed batch's
length field is an error for the consumer (CORRUPT_MESSAGE), never a silent end of the segment;
a flushed segment that cannot be loaded makes its partition offline (KAFKA_STORAGE_ERROR), not
the broker."""

from __future__ import annotations

import struct
import time
import urllib.request
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

import wire
from dataset import create_topic
from test_metadata_topic_id import metadata_v12

SEGMENT_BYTES = 64 * 1024
RECORDS = 600
VALUE = b"d" * 500
CORRUPT_MESSAGE = 2
KAFKA_STORAGE_ERROR = 56
API_LIST_OFFSETS = 2
API_FETCH = 1
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


def consume_until_error(bootstrap: str, topic: str, want: int | None = None) -> tuple[list[int], list]:
    """Offsets delivered, and the first partition error, within CONSUME_TIMEOUT_S (or until
    `want` offsets arrived)."""
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
        while time.monotonic() < deadline and not errors and (want is None or len(offsets) < want):
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


def fetch_error_v4(port: int, topic: str, partition: int = 0, offset: int = 0) -> int:
    """The partition error code of a raw Fetch v4."""
    body = (
        wire.i32(-1)  # replica id
        + wire.i32(100)  # max wait ms
        + wire.i32(1)  # min bytes
        + wire.i32(1 << 20)  # max bytes
        + wire.i8(0)  # isolation level
        + wire.i32(1)
        + wire.string(topic)
        + wire.i32(1)
        + wire.i32(partition)
        + wire.i64(offset)
        + wire.i32(1 << 20)
    )
    with wire.connect(port) as sock:
        wire.send_request(sock, API_FETCH, 4, body, correlation_id=41)
        r = wire.Reader(wire.recv_frame(sock))
    assert r.i32() == 41
    r.i32()  # throttle time
    assert r.i32() == 1 and r.string() == topic and r.i32() == 1
    assert r.i32() == partition
    return r.i16()


def produce_error(port: int, topic: str) -> int:
    with wire.connect(port) as sock:
        return wire.produce_v3(sock, topic, 0, wire.record_batch([(None, b"x")]))[(topic, 0)][0]


def list_offsets_error(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=10)
    try:
        fut[TopicPartition(topic, 0)].result(timeout=15)
    except KafkaException as e:
        return e.args[0].code()
    return 0


def test_unloadable_flushed_segment_makes_only_its_partition_offline(broker_factory, topic_name):
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)], http=True)
    bad, good = f"{topic_name}-bad", f"{topic_name}-good"
    for t in (bad, good):
        create_topic(broker.bootstrap, t, partitions=1)
        produce(broker.bootstrap, t)
    assert broker.stop() == 0
    # Damage a flushed (sealed, below the recovery point) segment beyond what recovery may cut:
    # a batch length smaller than a header, and its index gone so the open must walk it.
    part_dir = broker.data_dir / f"{bad}-0"
    sealed = sorted(part_dir.glob("*.log"))[0]
    pos, _ = batches_in(sealed)[len(batches_in(sealed)) // 2]
    with open(sealed, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", 7))
    sealed.with_suffix(".index").unlink()

    broker.start()  # used to exit 1 here
    log = broker.log_path.read_text()
    assert "the partition is offline" in log and str(part_dir) in log, broker.log_tail()
    # The damaged partition answers KAFKA_STORAGE_ERROR to produce, fetch and list offsets ...
    assert produce_error(broker.port, bad) == KAFKA_STORAGE_ERROR
    assert fetch_error_v4(broker.port, bad) == KAFKA_STORAGE_ERROR
    # Metadata reports it as Kafka reports a partition whose only replica is on a failed log
    # dir: LEADER_NOT_AVAILABLE, no leader, this broker offline (so clients do not send it
    # ListOffsets: confluent-kafka's admin answers _NOENT locally).
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m"})
    try:
        p = meta.list_topics(bad, timeout=10).topics[bad].partitions[0]
    finally:
        meta.close()
    assert p.error is not None and p.error.code() == KafkaError.LEADER_NOT_AVAILABLE, p.error
    assert p.leader == -1
    [raw] = metadata_v12(broker.port, [(bytes(16), bad)])
    [rp] = raw["partitions"]
    assert rp["error"] == 5 and rp["leader"] == -1 and rp["offline"] == rp["replicas"] != [], rp
    # ... every other partition serves, with a real client.
    assert produce_error(broker.port, good) == 0
    assert list_offsets_error(broker.bootstrap, good) == 0
    offsets, errors = consume_until_error(broker.bootstrap, good, want=RECORDS + 1)
    assert not errors and offsets == list(range(RECORDS + 1))
    metrics = urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10).read().decode()
    assert "streamforge_offline_partitions 1" in metrics


def test_a_damaged_batch_is_logged_once_per_ten_seconds_not_per_fetch(broker_factory, topic_name):
    """Every fetch retry of a consumer stuck at a damaged batch used to log the warning again."""
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)])
    create_topic(broker.bootstrap, topic_name, partitions=1)
    produce(broker.bootstrap, topic_name)
    sealed = sorted((broker.data_dir / f"{topic_name}-0").glob("*.log"))[0]
    pos, base = batches_in(sealed)[len(batches_in(sealed)) // 2]
    flip_byte(sealed, pos + 11, 0x04)
    for _ in range(30):
        assert fetch_error_v4(broker.port, topic_name, offset=base) == CORRUPT_MESSAGE
    lines = [l for l in broker.log_path.read_text().splitlines() if "damaged record batch" in l]
    assert len(lines) == 1, lines
    assert "suppressed=0" in lines[0] and sealed.name in lines[0]

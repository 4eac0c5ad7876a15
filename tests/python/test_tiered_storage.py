"""Tiered storage (issue 8) end to end: the real broker, real clients, a real object store.

Every test runs against an S3-compatible server (`moto_server`, started here on a free
loopback port, buckets created by the test) and against the local-directory store; the round
trip, corruption and compaction tests also against SeaweedFS (`weed server` with its S3
gateway, built by scripts/setup; absent = the test fails and says so), a real object store on
disk. The outage and crash tests stay with moto and the local directory (same proxy, same
broker code path: SeaweedFS would add minutes, not coverage).
"""

from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from tiered_store import LocalStore, MotoStore, SeaweedStore

MESSAGES = 3000
SEGMENT_BYTES = 16384
TASK_INTERVAL_MS = 200
WAIT_S = 90.0
T0_MS = int(time.time() * 1000) - 600_000


STORES = {"s3": MotoStore, "seaweedfs": SeaweedStore, "local": LocalStore}
# Tests parametrized with this run against every store; the others against moto and local.
ALL_STORES = pytest.mark.parametrize("store", list(STORES), indirect=True)


@pytest.fixture(params=["s3", "local"])
def store(request, tmp_path):
    s = STORES[request.param](tmp_path)
    try:
        yield s
    finally:
        s.close()


def start_broker(broker_factory, store, env=None):
    return broker_factory(
        extra_args=store.broker_args() + ["--remote-task-interval-ms", str(TASK_INTERVAL_MS)],
        env={**store.broker_env(), **(env or {})},
    )


def create_topic(broker, topic, **configs):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cfg = {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": "0",
    }
    cfg.update({k.replace("_", "."): v for k, v in configs.items()})
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=cfg)])
    fut[topic].result(timeout=30)


def message(i: int) -> tuple[bytes, bytes]:
    return f"key-{i}".encode(), (f"value-{i}-".encode() * (1 + i % 13)) + bytes([i % 256])


def produce(broker, topic, start: int, count: int, strict: bool = True) -> dict[int, tuple]:
    """Produce messages start..start+count with timestamps T0 + 10*i; returns acked
    offset -> (key, value, timestamp)."""
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 40,
            "message.timeout.ms": 15000,
        }
    )
    acked: dict[int, tuple] = {}
    errors: list[str] = []

    def cb(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.offset()] = (msg.key(), msg.value(), msg.timestamp()[1])

    for i in range(start, start + count):
        k, v = message(i)
        for _ in range(1000):
            try:
                p.produce(topic, key=k, value=v, partition=0, timestamp=T0_MS + 10 * i, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(30)
    if strict:
        assert not errors, errors[:5]
        assert len(acked) == count
    return acked


def consume(broker, topic, from_offset: int, count: int, timeout_s: float = 60.0) -> list:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"tiered-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 1 << 20,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, from_offset)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
        return out
    finally:
        c.close()


def partition_prefix(store, topic) -> str:
    for k in store.keys():
        m = re.match(rf"^({re.escape(topic)}-[0-9a-f]{{32}}/0)/", k)
        if m:
            return m.group(1)
    return ""


def manifest(store, topic) -> dict | None:
    prefix = partition_prefix(store, topic)
    if not prefix or f"{prefix}/manifest.json" not in store.keys():
        return None
    return json.loads(store.get(f"{prefix}/manifest.json"))


def local_segments(broker, topic) -> list[int]:
    d = Path(broker.data_dir) / f"{topic}-0"
    return sorted(int(p.name[:20]) for p in d.glob("*.log"))


def wait_tiered(broker, store, topic, end_offset: int) -> dict:
    """Until every sealed segment is uploaded and the local copies are gone."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        m = manifest(store, topic)
        local = local_segments(broker, topic)
        if m and m["segments"] and len(local) == 1 and m["segments"][-1]["last_offset"] + 1 == local[0]:
            assert local[0] <= end_offset
            return m
        time.sleep(0.2)
    raise AssertionError(f"not tiered in time: manifest={manifest(store, topic)} local={local_segments(broker, topic)}")


def check_all(got, expected: dict[int, tuple]):
    assert [g[0] for g in got] == sorted(expected), "offsets dense and in order"
    for off, key, value, ts in got:
        assert (key, value, ts) == expected[off], f"offset {off} differs"


def first_offset_at_or_after(expected: dict[int, tuple], ts: int) -> int:
    """Kafka's ListOffsets-by-time answer: the smallest offset with timestamp >= ts."""
    return min(o for o, m in expected.items() if m[2] >= ts)


def fetch_v4(port: int, topic: str, offset: int, max_bytes: int = 1 << 20) -> tuple[int, int, bytes]:
    """A raw Fetch v4: (error code, log start offset unknown in v4 -> high watermark, records)."""
    body = (
        wire.i32(-1) + wire.i32(500) + wire.i32(1) + wire.i32(max_bytes) + wire.i8(0)
        + wire.i32(1) + wire.string(topic)
        + wire.i32(1) + wire.i32(0) + wire.i64(offset) + wire.i32(max_bytes)
    )
    s = wire.connect(port)
    try:
        wire.send_request(s, 1, 4, body, correlation_id=42)
        r = wire.Reader(wire.recv_frame(s))
        assert r.i32() == 42
        r.i32()  # throttle
        assert r.i32() == 1
        r.string()
        assert r.i32() == 1
        r.i32()  # partition
        err = r.i16()
        hw = r.i64()
        r.i64()  # last stable offset
        n = r.i32()
        for _ in range(max(n, 0)):
            r.i64(), r.i64()
        size = r.i32()
        records = r.take(size) if size > 0 else b""
        return err, hw, records
    finally:
        s.close()


@ALL_STORES
def test_tiered_roundtrip_restart_and_timestamps(broker_factory, store, topic_name):
    b = start_broker(broker_factory, store)
    create_topic(b, topic_name)
    expected = produce(b, topic_name, 0, MESSAGES)
    m = wait_tiered(b, store, topic_name, MESSAGES)

    # Objects and manifest: deterministic layout, contiguous segments from offset 0.
    prefix = partition_prefix(store, topic_name)
    keys = set(store.keys())
    segs = m["segments"]
    assert len(segs) >= 10, f"expected many small segments, got {len(segs)}"
    assert segs[0]["base_offset"] == 0 and m["log_start_offset"] == 0
    for a, c in zip(segs, segs[1:]):
        assert c["base_offset"] == a["last_offset"] + 1
    for s in segs:
        for suffix in ("log", "rindex"):
            assert f"{prefix}/{s['base_offset']:020d}.{s['segment_id']}.{suffix}" in keys
        assert len(store.get(f"{prefix}/{s['base_offset']:020d}.{s['segment_id']}.log")) == s["size_bytes"]
    local_start = local_segments(b, topic_name)[0]
    assert local_start > 0

    # Consume everything from offset 0: remote first, then local.
    check_all(consume(b, topic_name, 0, MESSAGES), expected)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
    assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, MESSAGES)
    # ListOffsets by timestamp over remote data (record level).
    for target in (T0_MS, T0_MS + 10 * 1234 - 5, T0_MS + 10 * (local_start // 2)):
        want = first_offset_at_or_after(expected, target)
        assert want < local_start, "the answer lies in remote data"
        tps = c.offsets_for_times([TopicPartition(topic_name, 0, target)], timeout=10)
        assert tps[0].offset == want, (target, tps[0].offset, want)
    c.close()

    # Restart (clean, then kill -9) and read again.
    b.restart()
    check_all(consume(b, topic_name, 0, MESSAGES), expected)
    b.restart(hard=True)
    check_all(consume(b, topic_name, 0, MESSAGES), expected)
    more = produce(b, topic_name, MESSAGES, 500)
    expected.update(more)
    check_all(consume(b, topic_name, 0, MESSAGES + 500), expected)


def test_store_down_during_uploads(broker_factory, store, topic_name):
    b = start_broker(broker_factory, store)
    create_topic(b, topic_name)
    expected = produce(b, topic_name, 0, 1000)
    before = wait_tiered(b, store, topic_name, 1000)
    store.set_available(False)
    try:
        expected.update(produce(b, topic_name, 1000, MESSAGES - 1000))  # produce is unaffected
        time.sleep(10 * TASK_INTERVAL_MS / 1000)
        local = local_segments(b, topic_name)
        remote_end = before["segments"][-1]["last_offset"] + 1
        assert local[0] == remote_end, "nothing not uploaded is deleted locally"
        assert len(local) >= 5, local
        assert manifest(store, topic_name) == before, "no manifest change while the store is down"
        # Local fetch keeps working.
        tail = consume(b, topic_name, MESSAGES - 20, 20)
        assert [t[0] for t in tail] == list(range(MESSAGES - 20, MESSAGES))
        # An upload gives up only after its retries (each with backoff): wait for that, bounded.
        deadline = time.monotonic() + WAIT_S
        while "segment upload failed" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "segment upload failed" in b.log_text()
    finally:
        store.set_available(True)
    after = wait_tiered(b, store, topic_name, MESSAGES)
    assert after["segments"][: len(before["segments"])] == before["segments"]
    check_all(consume(b, topic_name, 0, MESSAGES), expected)


def test_broker_killed_between_upload_and_manifest(broker_factory, store, topic_name):
    b = start_broker(broker_factory, store, env={"STREAMFORGE_TIERED_FAILPOINT": "crash-before-manifest"})
    create_topic(b, topic_name)
    acked = produce(b, topic_name, 0, MESSAGES, strict=False)
    deadline = time.monotonic() + WAIT_S
    while b.is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not b.is_running(), "the fail point should have stopped the broker"
    assert "fail point crash-before-manifest" in b.log_text()
    # The leader claimed the manifest (its leader epoch, no segment) before the first upload;
    # the crash came before the manifest named the uploaded segment.
    m = manifest(store, topic_name)
    assert m is None or not m["segments"], m
    orphans = [k for k in store.keys() if k.startswith(partition_prefix(store, topic_name) + "/")]
    orphans = [k for k in orphans if not k.endswith("manifest.json")]
    assert orphans, "the upload's objects are in the store"
    assert len(acked) > 0

    b.env.pop("STREAMFORGE_TIERED_FAILPOINT")
    b.start()
    end = max(acked) + 1
    m = wait_tiered(b, store, topic_name, end)
    live_ids = {s["segment_id"] for s in m["segments"]}
    keys = set(store.keys())
    for k in orphans:
        assert k not in keys, f"orphan {k} not reconciled"
        assert k.split("/")[-1].split(".")[1] not in live_ids
    # Indexes rebuilt by the unclean restart's recovery are trimmed like any sealed segment's,
    # so what goes up is whole entries, not the 10 MiB preallocation.
    for k in keys:
        if k.endswith((".index", ".timeindex")) and k.startswith(partition_prefix(store, topic_name) + "/"):
            size = len(store.get(k))
            entry = 12 if k.endswith(".timeindex") else 8
            assert size % entry == 0 and size < SEGMENT_BYTES, f"{k}: {size} bytes uploaded"
    got = consume(b, topic_name, 0, end)
    got_by_offset = {g[0]: (g[1], g[2]) for g in got}
    assert len(got_by_offset) >= len(acked)
    for off, msg in acked.items():
        assert got_by_offset.get(off) == msg[:2], f"acked offset {off} lost or changed"


@ALL_STORES
def test_corrupted_remote_object_is_detected_not_served(broker_factory, store, topic_name):
    b = start_broker(broker_factory, store)
    create_topic(b, topic_name)
    expected = produce(b, topic_name, 0, MESSAGES)
    m = wait_tiered(b, store, topic_name, MESSAGES)
    prefix = partition_prefix(store, topic_name)
    first, second = m["segments"][0], m["segments"][1]
    key = f"{prefix}/{first['base_offset']:020d}.{first['segment_id']}.log"
    data = bytearray(store.get(key))
    data[len(data) // 2] ^= 0x5A
    store.put(key, bytes(data))
    b.restart()  # cold cache

    err, _, records = fetch_v4(b.port, topic_name, 0)
    assert err == 56 and records == b"", "KAFKA_STORAGE_ERROR, nothing served"
    assert "corrupt remote segment data detected" in b.log_text()
    # Other segments are still served, byte-exact.
    err, hw, records = fetch_v4(b.port, topic_name, second["base_offset"])
    assert err == 0 and hw == MESSAGES and records
    (base,) = struct.unpack(">q", records[:8])
    assert base == second["base_offset"]
    got = consume(b, topic_name, second["base_offset"], 100)
    check_all(got, {o: expected[o] for o in range(second["base_offset"], second["base_offset"] + len(got))})


@ALL_STORES
def test_compacted_topics_cannot_tier(broker_factory, store, topic_name):
    """As Kafka: remote storage keeps whole segments by offset, compaction rewrites them."""
    from confluent_kafka import KafkaException

    b = start_broker(broker_factory, store)
    with pytest.raises(KafkaException) as e:
        create_topic(b, topic_name, cleanup_policy="compact")
    assert e.value.args[0].code() == 40, e.value  # INVALID_CONFIG
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_read_committed_of_remote_only_transactions(broker_factory, store, topic_name):
    """Issue 17: a transactional topic whose old segments (and ABORT markers) moved to object
    storage. Each upload carries the segment's transaction index, so a read_committed
    consumer from the beginning sees exactly the committed records (the broker returns the
    aborted transactions of remote data) and a read_uncommitted one sees everything."""
    from test_transactions import read_all, txn_producer

    b = start_broker(broker_factory, store)
    create_topic(b, topic_name)
    p = txn_producer(b.bootstrap, f"tx-{topic_name}")
    committed: list[str] = []
    everything: list[str] = []
    aborts = 0
    # About 10 KB per transaction, 16 KB segments: the markers spread over many segments.
    for t in range(16):
        values = [f"t{t}-{i}-" + "x" * 1000 for i in range(10)]
        p.begin_transaction()
        for v in values:
            p.produce(topic_name, v.encode(), partition=0)
        p.flush(30)  # aborted records must reach the log before their marker
        if t % 3 == 1 and t < 12:
            p.abort_transaction(30)
            aborts += 1
        else:
            p.commit_transaction(30)
            committed += values
        everything += values
    del p  # the broker restarts below: no client left reconnecting
    m = wait_tiered(b, store, topic_name, 1 << 30)
    assert sum(s.get("txn_index_entries", 0) for s in m["segments"]) == aborts, m
    assert sum("txn_index" in s["objects"] for s in m["segments"]) >= 2, "aborts in several segments"
    prefix = partition_prefix(store, topic_name)
    assert any(k.startswith(prefix) and k.endswith(".txnindex") for k in store.keys())
    b.restart()  # cold cache: the indexes come from the store
    assert read_all(b.bootstrap, topic_name, "read_committed") == committed
    assert read_all(b.bootstrap, topic_name, "read_uncommitted") == everything

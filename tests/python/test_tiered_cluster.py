"""Tiered storage with replicas (issue 15, KIP-405's shape) across three real broker processes
sharing one S3-compatible bucket (`moto_server` on a free loopback port), through
confluent-kafka.

An RF=3 tiered topic with small segments: only the leader uploads (exactly one object per
remote segment in the bucket, listed with boto3), the followers delete their local copies too;
kill -9 of the leader, more produce, and the new leader continues the uploads where the old one
stopped (segments contiguous from offset 0, no overlap, no object twice, the manifest claimed
under a newer leader epoch); a consumer from offset 0 reads every message through the new
leader, most of them from remote data, and ListOffsets earliest still answers 0. The killed
broker restarts below the new leader's local log start and rejoins the ISR from there
(OFFSET_MOVED_TO_TIERED_STORAGE) without copying remote data.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from test_cluster import admin, cluster_view, placement, start_cluster, wait_for, watermarks
from tiered_store import MotoStore

TOPIC = "tiered-replicated"
SEGMENT_BYTES = 16384
TASK_INTERVAL_MS = 200
BEFORE_KILL = 2000
AFTER_KILL = 1500
WAIT_S = 60


def start_tiered_cluster(broker_factory, store):
    return start_cluster(
        broker_factory, offsets_partitions=1,
        extra_args=["--remote-task-interval-ms", str(TASK_INTERVAL_MS), *store.broker_args()],
        env=store.broker_env())


def message(i: int) -> tuple[bytes, bytes]:
    return f"key-{i}".encode(), (f"value-{i}-".encode() * (1 + i % 13)) + bytes([i % 256])


def produce(bootstrap: str, start: int, count: int) -> dict[int, tuple[bytes, bytes]]:
    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 40,
        "message.timeout.ms": 30000,
    })
    acked: dict[int, tuple[bytes, bytes]] = {}
    errors: list[str] = []

    def cb(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    for i in range(start, start + count):
        k, v = message(i)
        while True:
            try:
                p.produce(TOPIC, key=k, value=v, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(40) == 0, "produce did not finish"
    assert not errors, errors[:5]
    assert len(acked) == count
    return acked


def manifest(store) -> dict | None:
    keys = [k for k in store.keys() if re.match(rf"^{re.escape(TOPIC)}-[0-9a-f]{{32}}/0/manifest\.json$", k)]
    return json.loads(store.get(keys[0])) if keys else None


def log_objects(store) -> list[int]:
    """Base offsets of the `.log` objects in the bucket (one per uploaded segment copy)."""
    out = []
    for k in store.keys():
        m = re.match(rf"^{re.escape(TOPIC)}-[0-9a-f]{{32}}/0/(\d{{20}})\.[0-9a-f]+\.log$", k)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def local_bases(b) -> list[int]:
    return sorted(int(p.name[:20]) for p in (Path(b.data_dir) / f"{TOPIC}-0").glob("*.log"))


def wholly_remote_local_segments(b, remote_end: int) -> int:
    """Local segments of `b` whose whole range is below the remote end (should be deleted)."""
    bases = local_bases(b)
    return sum(1 for i in range(len(bases) - 1) if bases[i + 1] <= remote_end)


def check_contiguous(m: dict) -> None:
    segs = m["segments"]
    assert segs and segs[0]["base_offset"] == 0, segs[:1]
    for a, b in zip(segs, segs[1:]):
        assert b["base_offset"] == a["last_offset"] + 1, f"gap or overlap: {a} then {b}"


def check_one_copy_each(store) -> dict:
    """Exactly one `.log` object per manifest segment. An upload in flight puts its objects
    before the manifest names them, so this waits (bounded) for the store to be quiet; a
    duplicate or an orphan would stay and fail it."""
    def settled():
        m = manifest(store)
        return m if log_objects(store) == [s["base_offset"] for s in m["segments"]] else None

    return wait_for("exactly one object per manifest segment", settled, timeout_s=15)


def leader(brokers) -> int:
    for b in brokers:
        if b.is_running():
            try:
                p = placement(b, TOPIC)
            except Exception:
                continue
            if p and p[0][0] > 0:
                return p[0][0]
    return -1


def isr(b) -> list[int]:
    try:
        p = placement(b, TOPIC)
    except Exception:
        return []
    return sorted(p[0][2]) if p else []


def consume_all(bootstrap: str, count: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"tiered-cluster-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 1 << 20,
    })
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
        low, _ = watermarks(c, TopicPartition(TOPIC, 0))
        return out, low
    finally:
        c.close()


def test_only_the_leader_uploads_and_a_new_leader_continues_with_no_duplicate_or_gap(broker_factory, tmp_path):
    store = MotoStore(tmp_path)
    try:
        run(broker_factory, store)
    finally:
        store.close()


def run(broker_factory, store):
    started = time.monotonic()
    brokers = start_tiered_cluster(broker_factory, store)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    fs = admin(brokers[0]).create_topics([NewTopic(TOPIC, 1, 3, config={
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": "0",
        "min.insync.replicas": "2",
    })], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the ISR full", lambda: isr(brokers[0]) == [1, 2, 3])
    bootstrap = ",".join(b.bootstrap for b in brokers)

    expected = produce(bootstrap, 0, BEFORE_KILL)
    first = leader(brokers)
    old = brokers[first - 1]
    followers = [b for b in brokers if b is not old]

    # The leader uploads every sealed segment and deletes its local copies; the followers only
    # learn the manifest and delete theirs.
    def tiered_everywhere():
        m = manifest(store)
        if not m or not m["segments"]:
            return None
        end = m["segments"][-1]["last_offset"] + 1
        if local_bases(old) != [end]:
            return None  # all sealed segments uploaded, only the active one left
        if any(wholly_remote_local_segments(f, end) or local_bases(f)[0] == 0 for f in followers):
            return None
        return m

    wait_for("segments remote, local copies gone on all replicas", tiered_everywhere)
    m1 = check_one_copy_each(store)
    end1 = m1["segments"][-1]["last_offset"] + 1
    check_contiguous(m1)
    assert len(m1["segments"]) >= 5, f"only {len(m1['segments'])} segments uploaded"
    print(f"before kill: {len(m1['segments'])} segments remote up to {end1}, leader {first}, "
          f"follower local starts {[local_bases(f)[0] for f in followers]}")

    # kill -9 the leader; the new leader continues.
    old.kill()
    new = wait_for("a new leader", lambda: (lambda l: l if l > 0 and l != first else None)(leader(followers)))
    survivors = ",".join(f.bootstrap for f in followers)
    expected.update(produce(survivors, BEFORE_KILL, AFTER_KILL))
    total = BEFORE_KILL + AFTER_KILL
    assert sorted(expected) == list(range(total)), "offsets dense"
    new_leader = brokers[new - 1]

    def continued():
        m = manifest(store)
        if not m or m["leader_epoch"] <= m1["leader_epoch"]:
            return None
        end = m["segments"][-1]["last_offset"] + 1
        if end <= end1 + 5 or local_bases(new_leader) != [end]:
            return None
        return m

    wait_for("the new leader uploads the continuation", continued)
    m2 = check_one_copy_each(store)
    check_contiguous(m2)
    assert m2["segments"][: len(m1["segments"])] == m1["segments"], "the old leader's segments kept as they were"
    end2 = m2["segments"][-1]["last_offset"] + 1
    print(f"after failover: leader {new}, manifest epoch {m1['leader_epoch']} -> {m2['leader_epoch']}, "
          f"{len(m2['segments'])} segments up to {end2}")

    # Everything through the new leader from offset 0 (remote below its local log start).
    got, low = consume_all(survivors, total)
    assert [g[0] for g in got] == list(range(total)), "every offset once, in order"
    for off, k, v in got:
        assert (k, v) == expected[off], f"offset {off} differs"
    assert low == 0, f"ListOffsets earliest on the new leader answered {low}"

    # The killed broker restarts below the leader's local log start: it starts there, with the
    # remote part from the manifest, and rejoins the ISR without copying remote data.
    leader_local_start = local_bases(new_leader)[0]
    assert leader_local_start > BEFORE_KILL, leader_local_start
    old.start(timeout_s=WAIT_S)
    wait_for("the restarted broker back in the ISR", lambda: isr(new_leader) == [1, 2, 3])
    bases = local_bases(old)
    assert bases and bases[0] >= leader_local_start and bases[0] > end1, (
        f"restarted broker's local log starts at {bases[:1]}, leader's local start {leader_local_start}")
    check_one_copy_each(store)
    elapsed = time.monotonic() - started
    print(f"restarted broker local start {bases[0]}; test took {elapsed:.1f} s")

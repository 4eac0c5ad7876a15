"""A full disk through the real broker (docs/STORAGE.md, "A full disk"): producers get
KAFKA_STORAGE_ERROR, the broker stays up, and once space returns it serves again without a
restart. Before the fix the broker died of SIGBUS, with no log line: the first store into a
not-yet-allocated page of a sparse, memory-mapped index file has no disk block behind it.

Needs root (mount); runs on a 64 MB ext4 image on a loop device and on a small tmpfs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

import wire
from dataset import create_topic
from harness import BrokerProcess

IMAGE_BYTES = 64 << 20
BATCH_RECORDS = 4
VALUE = b"f" * 1100  # ~4.5 KB batches: an index entry per batch, a new index page every ~2 MB
PRODUCE_MAX = 20_000  # bounds the fill loop (far more than 64 MB of batches)
KAFKA_STORAGE_ERROR = 56
REFUSED_IN_A_ROW = 5
T_S = 20


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def mount_fs(kind: str, tmp: Path) -> Path:
    """Mount a small file system at tmp/mnt, or skip saying why it cannot be done here."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a file system")
    mnt = tmp / "mnt"
    mnt.mkdir()
    if kind == "ext4":
        image = tmp / "disk.img"
        with open(image, "wb") as f:
            f.truncate(IMAGE_BYTES)
        r = run(["mkfs.ext4", "-q", "-F", str(image)])
        if r.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed: {r.stderr.strip()}")
        r = run(["mount", "-o", "loop", str(image), str(mnt)])
    else:
        r = run(["mount", "-t", "tmpfs", "-o", f"size={IMAGE_BYTES}", "tmpfs", str(mnt)])
    if r.returncode != 0:
        pytest.skip(f"cannot mount {kind}: {r.stderr.strip()}")
    print(f"mounted {kind} at {mnt}")
    return mnt


def fill(path: Path) -> None:
    """Write zeros until the file system is full."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        # Fill the last partial chunk too.
        for size in (1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def produce_raw(sock, topic: str, cid: int) -> int:
    batch = wire.record_batch([(None, VALUE)] * BATCH_RECORDS)
    return wire.produce_v3(sock, topic, 0, batch, correlation_id=cid)[(topic, 0)][0]


def produce_until_refused(broker: BrokerProcess, topic: str) -> tuple[int, set[int]]:
    """Produce until the broker refuses REFUSED_IN_A_ROW batches in a row (a failed append
    gives back the blocks reserved past its segment's end, so a few more may fit first).
    Returns (batches acknowledged, error codes seen)."""
    acked, in_a_row, codes = 0, 0, set()
    with wire.connect(broker.port, timeout_s=T_S) as sock:
        for i in range(PRODUCE_MAX):
            code = produce_raw(sock, topic, 1000 + i)
            if code == 0:
                acked += 1
                in_a_row = 0
                continue
            codes.add(code)
            in_a_row += 1
            if in_a_row == REFUSED_IN_A_ROW:
                break
    return acked, codes


def consume_count(bootstrap: str, topic: str, want: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"df-{topic}", "enable.auto.commit": False})
    got = 0
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + T_S
        while got < want and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                got += 1
    finally:
        c.close()
    return got


@pytest.mark.parametrize("kind", ["ext4", "tmpfs"])
def test_full_disk_gives_storage_errors_and_serving_resumes_when_space_returns(tmp_path, broker_bin, kind):
    mnt = mount_fs(kind, tmp_path)
    broker = None
    try:
        work = mnt / "work"
        work.mkdir()
        broker = BrokerProcess(work, extra_args=["--segment-bytes", str(8 << 20)])
        # The broker's own log file lives off the full disk.
        broker.log_path = tmp_path / "broker.log"
        broker.start()
        topic = "diskfull"
        create_topic(broker.bootstrap, topic, partitions=1)
        with wire.connect(broker.port, timeout_s=T_S) as sock:
            # The active segment now has blocks reserved ahead of its end (on ext4).
            assert produce_raw(sock, topic, 1) == 0
        filler = mnt / "filler"
        fill(filler)

        acked, codes = produce_until_refused(broker, topic)
        assert broker.is_running(), f"broker died (exit {broker.proc.returncode}) after {acked} batches"
        assert codes == {KAFKA_STORAGE_ERROR}, f"after {acked} batches: errors {codes}"
        print(f"{kind}: {acked} batches acknowledged after the fill, then KAFKA_STORAGE_ERROR")
        # What was acknowledged is readable meanwhile.
        total = (1 + acked) * BATCH_RECORDS
        assert consume_count(broker.bootstrap, topic, total) == total
        assert broker.is_running()

        filler.unlink()
        # Space is back: the next appends work, with a real client too, and nothing is lost.
        with wire.connect(broker.port, timeout_s=T_S) as sock:
            assert produce_raw(sock, topic, 3) == 0
        total += BATCH_RECORDS
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": T_S * 1000})
        errors: list = []
        for i in range(100):
            p.produce(topic, value=b"after-%d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(T_S) == 0 and not errors, errors[:3]
        del p
        total += 100
        assert consume_count(broker.bootstrap, topic, total) == total
    finally:
        if broker is not None:
            broker.stop()
        run(["umount", "-l", str(mnt)])

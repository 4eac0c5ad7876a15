"""A full disk on a follower, across three real broker processes (docs/REPLICATION.md, "A
follower's full disk"): the follower's appends fail with a storage error, its fetcher backs the
partitions off (`replica.fetch.backoff.ms`) instead of asking the leader for the same records
again at once, the leaders drop it from the ISR after `replica.lag.time.max.ms`, and acks=all
writes go on with the ISR at 2 (min.insync.replicas=2: no NOT_ENOUGH_REPLICAS), with at most a
pause while the ISR shrinks. Once the space is back the follower, which never stopped, continues
where its log ends and rejoins the ISR, with no restart (Kafka takes the log dir offline and
needs one). Afterwards every acknowledged message is there once, in order, and the three
replicas hold the same batches, the follower's bytes equal to the leader's, up to the high
watermark.

Broker 3's whole data dir (its partitions and its copy of the metadata log) is on a 64 MB tmpfs
that the test fills. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import NewTopic

import test_replication_cluster as rc
from test_cluster import admin, cluster_view, metric, start_cluster, wait_for
from test_disk_full import fill, mount_fs

FOLLOWER = 3
METADATA_DIR = "__cluster_metadata-0"
# Leaders 1, 2, 1: broker 3 only follows (a full disk on a leader is test_disk_full.py's case).
ASSIGNMENT = [[1, 3, 2], [2, 3, 1], [1, 2, 3]]
LAG_MS = 3000
BACKOFF_S = 1.0  # the fetcher's replica.fetch.backoff.ms
FULL_FOR_S = 4.0  # produced with the follower out of the ISR before the space returns
# Longest wait for an acknowledgement: the lag time while the follower is still in the ISR, the
# AlterPartition round trip, and the idempotent producer's retry backoff.
ACK_GAP_MAX_S = LAG_MS / 1000 + 4
# A follower whose disk is full fetches once a second per partition: little CPU (asking the
# leader again at once for the same records kept it busy).
CPU_MAX = 0.2


class TimedChecker(rc.Checker):
    """The replication checker, also noting when each acknowledgement arrived."""

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self.ack_times: list[float] = []

    def on_delivery(self, err, msg):
        if err is None:
            self.ack_times.append(time.monotonic())
        super().on_delivery(err, msg)


def isrs(b):
    p = rc.placement_seen_by(b)
    return {k: sorted(v[2]) for k, v in p.items()} if p else None


def storage_errors(b) -> float:
    return metric(b, "streamforge_storage_errors_total", f'topic="{rc.TOPIC}"')


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch_bytes(data_dir: Path, partition: int, hw: int) -> bytes:
    """The bytes of the partition's batches below `hw`, segment after segment."""
    out = []
    for seg in sorted((data_dir / f"{rc.TOPIC}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            last_delta, = struct.unpack_from(">i", data, pos + 23)
            if length <= 0 or pos + 12 + length > len(data) or base + last_delta >= hw:
                break
            out.append(data[pos:pos + 12 + length])
            pos += 12 + length
    return b"".join(out)


def test_a_follower_with_a_full_disk_leaves_the_isr_and_rejoins_when_space_returns(broker_factory, tmp_path):
    mnt = mount_fs("tmpfs", tmp_path)
    created = []

    def factory(**kw):
        b = broker_factory(**kw)
        created.append(b)
        if len(created) == FOLLOWER:
            # Its data dir on the small file system, but its copy of the metadata log off it,
            # as Kafka's `metadata.log.dir` on another disk (see the module doc); its log file
            # off it too.
            b.data_dir = mnt / "data"
            b.data_dir.mkdir()
            (tmp_path / "metadata-log").mkdir()
            (b.data_dir / METADATA_DIR).symlink_to(tmp_path / "metadata-log")
        return b

    try:
        brokers = start_cluster(factory, http=True, extra_args=["--replica-lag-time-max-ms", str(LAG_MS)])
        leader, follower = brokers[0], brokers[FOLLOWER - 1]
        wait_for("the cluster", lambda: cluster_view(leader)[0] == [1, 2, 3])
        fs = admin(leader).create_topics([NewTopic(rc.TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT,
                                                   config={"min.insync.replicas": "2"})], operation_timeout=15)
        for f in fs.values():
            f.result(20)
        rc.wait_full_isr(brokers, leader, "the ISR full")
        bootstrap = ",".join(b.bootstrap for b in brokers)

        with TimedChecker(bootstrap) as checker:
            wait_for("acknowledged writes", lambda: checker.acked_count() >= 500)
            filled_at = time.monotonic()
            fill(mnt / "filler")
            print(f"filled at {checker.acked_count()} acknowledged")
            # The leaders drop broker 3 from every ISR; the others stay.
            wait_for("broker 3 out of every ISR",
                     lambda: isrs(leader) and all(v == [1, 2] for v in isrs(leader).values()), timeout_s=30)
            out_after = time.monotonic() - filled_at
            assert follower.is_running(), "the follower died on a full disk"

            # With the follower out, acks=all goes on (min ISR 2), and the follower's fetcher
            # backs off: about one failed append per partition per replica.fetch.backoff.ms.
            acked, errors_before = checker.acked_count(), storage_errors(follower)
            t0, cpu0 = time.monotonic(), cpu_seconds(follower.pid)
            time.sleep(FULL_FOR_S)
            acked_full = checker.acked_count() - acked
            failed_appends = storage_errors(follower) - errors_before
            elapsed = time.monotonic() - t0
            cpu = (cpu_seconds(follower.pid) - cpu0) / elapsed
            print(f"with the disk full: {failed_appends:.0f} failed appends counted in {elapsed:.1f} s "
                  f"({errors_before:.0f} before), the follower busy {cpu:.0%} of a core")
            assert acked_full > 0, "no acks=all write acknowledged with the follower out of the ISR"
            assert errors_before > 0, "the follower counted no failed append"
            most = len(ASSIGNMENT) * (elapsed / BACKOFF_S + 2)
            assert failed_appends <= most, f"{failed_appends} failed appends in {elapsed:.1f} s: no backoff"
            assert cpu < CPU_MAX, f"the follower is busy {cpu:.0%} of a core with nothing to do"
            assert follower.is_running(), "the follower died on a full disk"

            (mnt / "filler").unlink()
            freed_at = time.monotonic()
            rc.wait_full_isr(brokers, leader, "broker 3 back in every ISR")
            back_after = time.monotonic() - freed_at
            settled = checker.acked_count()
            wait_for("more acknowledged writes", lambda: checker.acked_count() >= settled + 200)
            checker.finish()

        gaps = [b - a for a, b in zip(checker.ack_times, checker.ack_times[1:])]
        gap = max(gaps)
        print(f"out of the ISR {out_after:.1f} s after the fill; {acked_full} acknowledged in "
              f"{elapsed:.1f} s with it out, {failed_appends:.0f} failed appends there; back in the ISR "
              f"{back_after:.1f} s after the space returned; longest wait between acks {gap:.2f} s; "
              f"{checker.acked_count()} acknowledged of {checker.sent} sent")
        assert gap < ACK_GAP_MAX_S, f"acks stalled for {gap:.1f} s"
        assert follower.is_running() and follower.starts == 1, "the follower was restarted or died"

        rc.check_acknowledged(checker, rc.read_all(bootstrap))
        rc.check_replicas_identical(brokers)
        for p in range(rc.PARTITIONS):
            hw = min(rc.checkpointed_hw(b.data_dir, p) for b in brokers)
            lead = brokers[ASSIGNMENT[p][0] - 1]
            assert batch_bytes(follower.data_dir, p, hw) == batch_bytes(lead.data_dir, p, hw), \
                f"partition {p}: the follower's bytes differ from the leader's below HW {hw}"
    finally:
        for b in created:
            b.stop()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60, check=False)

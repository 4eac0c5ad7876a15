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

Broker 3's data dir is on a 64 MB tmpfs that the test fills; its copy of the metadata log is
on another disk in the first test and on the full one in the second, where the broker halts
(exit status 1) at the first metadata record it cannot write, as Kafka halts a broker whose
metadata log dir failed, and recovers when restarted. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

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


class Cluster:
    """Three brokers, broker 3's data dir on a 64 MB tmpfs (its log file off it); with
    `metadata_off_disk`, its copy of the metadata log on another disk (a symlinked
    `__cluster_metadata-0`, as Kafka's `metadata.log.dir`). The topic is created, the ISR full."""

    def __init__(self, broker_factory, tmp_path, metadata_off_disk: bool):
        self.mnt = mount_fs("tmpfs", tmp_path)
        self.created = []

        def factory(**kw):
            b = broker_factory(**kw)
            self.created.append(b)
            if len(self.created) == FOLLOWER:
                b.data_dir = self.mnt / "data"
                if metadata_off_disk:
                    b.data_dir.mkdir()
                    (tmp_path / "metadata-log").mkdir()
                    (b.data_dir / METADATA_DIR).symlink_to(tmp_path / "metadata-log")
            return b

        self.brokers = start_cluster(factory, http=True, extra_args=["--replica-lag-time-max-ms", str(LAG_MS)])
        self.leader, self.follower = self.brokers[0], self.brokers[FOLLOWER - 1]
        wait_for("the cluster", lambda: cluster_view(self.leader)[0] == [1, 2, 3])
        fs = admin(self.leader).create_topics([NewTopic(
            rc.TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT,
            config={"min.insync.replicas": "2"})], operation_timeout=15)
        for f in fs.values():
            f.result(20)
        rc.wait_full_isr(self.brokers, self.leader, "the ISR full")
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)

    def follower_out_of_every_isr(self):
        i = isrs(self.leader)
        return i and all(v == [1, 2] for v in i.values())

    def close(self):
        for b in self.created:
            b.stop()
        subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=60, check=False)

    def check(self, checker):
        """Every acknowledged message once, in order; the same batches on the three replicas
        and the follower's bytes equal to each leader's, up to the high watermark."""
        gaps = [b - a for a, b in zip(checker.ack_times, checker.ack_times[1:])]
        rc.check_acknowledged(checker, rc.read_all(self.bootstrap))
        rc.check_replicas_identical(self.brokers)
        for p in range(rc.PARTITIONS):
            hw = min(rc.checkpointed_hw(b.data_dir, p) for b in self.brokers)
            lead = self.brokers[ASSIGNMENT[p][0] - 1]
            assert batch_bytes(self.follower.data_dir, p, hw) == batch_bytes(lead.data_dir, p, hw), \
                f"partition {p}: the follower's bytes differ from the leader's below HW {hw}"
        return max(gaps)


def test_a_follower_with_a_full_disk_leaves_the_isr_and_rejoins_when_space_returns(broker_factory, tmp_path):
    cluster = Cluster(broker_factory, tmp_path, metadata_off_disk=True)
    try:
        follower, filler = cluster.follower, cluster.mnt / "filler"
        with TimedChecker(cluster.bootstrap) as checker:
            wait_for("acknowledged writes", lambda: checker.acked_count() >= 500)
            filled_at = time.monotonic()
            fill(filler)
            print(f"filled at {checker.acked_count()} acknowledged")
            # The leaders drop broker 3 from every ISR; the others stay.
            wait_for("broker 3 out of every ISR", cluster.follower_out_of_every_isr, timeout_s=30)
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

            filler.unlink()
            freed_at = time.monotonic()
            rc.wait_full_isr(cluster.brokers, cluster.leader, "broker 3 back in every ISR")
            back_after = time.monotonic() - freed_at
            settled = checker.acked_count()
            wait_for("more acknowledged writes", lambda: checker.acked_count() >= settled + 200)
            checker.finish()
        assert follower.is_running() and follower.starts == 1, "the follower was restarted or died"
        gap = cluster.check(checker)
        print(f"out of the ISR {out_after:.1f} s after the fill; {acked_full} acknowledged in "
              f"{elapsed:.1f} s with it out, {failed_appends:.0f} failed appends there; back in the ISR "
              f"{back_after:.1f} s after the space returned; longest wait between acks {gap:.2f} s; "
              f"{checker.acked_count()} acknowledged of {checker.sent} sent")
        assert gap < ACK_GAP_MAX_S, f"acks stalled for {gap:.1f} s"
    finally:
        cluster.close()


def test_a_follower_whose_metadata_log_is_on_the_full_disk_halts_and_recovers_on_restart(broker_factory, tmp_path):
    """The whole data dir on the small file system: the first metadata record the follower
    cannot write stops its Raft core, and the broker halts (exit status 1), as Kafka halts a
    broker whose metadata log dir failed; it would otherwise serve on with a metadata image
    that never moves. The others go on; restarted once space is back, it recovers and rejoins."""
    cluster = Cluster(broker_factory, tmp_path, metadata_off_disk=False)
    try:
        follower, filler = cluster.follower, cluster.mnt / "filler"
        with TimedChecker(cluster.bootstrap) as checker:
            wait_for("acknowledged writes", lambda: checker.acked_count() >= 500)
            fill(filler)
            filled_at = time.monotonic()
            # Metadata records until broker 3 cannot append one (a page of its metadata log
            # may still hold a few): the ISR shrinks, and topic config changes.
            n = 0
            deadline = time.monotonic() + 30
            while follower.proc.poll() is None:
                assert time.monotonic() < deadline, "the follower did not halt"
                n += 1
                resource = ConfigResource(ConfigResource.Type.TOPIC, rc.TOPIC, incremental_configs=[
                    ConfigEntry("retention.ms", str(3_600_000 + n), incremental_operation=AlterConfigOpType.SET)])
                try:
                    for f in admin(cluster.leader).incremental_alter_configs([resource]).values():
                        f.result(20)
                except KafkaException:
                    pass  # sent to broker 3 as it halted: the loop sends another
                time.sleep(0.2)
            halted_after = time.monotonic() - filled_at
            assert follower.proc.returncode == 1, follower.proc.returncode
            assert "halting: the metadata log cannot be written" in follower.log_path.read_text()
            wait_for("broker 3 out of every ISR", cluster.follower_out_of_every_isr, timeout_s=30)
            acked = checker.acked_count()
            wait_for("acknowledged writes without broker 3", lambda: checker.acked_count() >= acked + 500)

            filler.unlink()
            follower.start(timeout_s=60)
            restarted_at = time.monotonic()
            rc.wait_full_isr(cluster.brokers, cluster.leader, "broker 3 back in every ISR")
            back_after = time.monotonic() - restarted_at
            settled = checker.acked_count()
            wait_for("more acknowledged writes", lambda: checker.acked_count() >= settled + 200)
            checker.finish()
        gap = cluster.check(checker)
        print(f"halted {halted_after:.1f} s after the fill ({n} config changes); back in the ISR "
              f"{back_after:.1f} s after the restart; longest wait between acks {gap:.2f} s; "
              f"{checker.acked_count()} acknowledged of {checker.sent} sent")
        assert gap < ACK_GAP_MAX_S + 5, f"acks stalled for {gap:.1f} s"
    finally:
        cluster.close()

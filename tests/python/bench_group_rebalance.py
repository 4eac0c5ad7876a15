"""Rebalance benchmark with real clients: 10 confluent-kafka (librdkafka) consumers.

Measures, for a group of N consumers with the range assignor, how long after the join window
closes (the broker logs "rebalance join phase complete") every consumer has its assignment
(its on_assign callback ran), and the broker-side time to Stable ("group stable").
Scenarios: formation (N consumers start together; the window is the initial delay) and
rebalances (one consumer leaves, one joins: N stays the group size after each join).

    python3 tests/python/bench_group_rebalance.py [--members 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer

from group_helpers import create_topic
from harness import BrokerProcess

PARTITIONS = 10
WAIT_S = 60
LOG_RE = re.compile(r"^(\S+Z)\s+INFO .*(rebalance join phase complete|group stable).*generation=(\d+)")


def log_times(path: Path, group: str) -> dict[tuple[str, int], float]:
    """(event, generation) -> wall time, from the broker log."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        if f"group={group}" not in line:
            continue
        m = LOG_RE.match(line)
        if m:
            ts = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
            out[(m.group(2), int(m.group(3)))] = ts
    return out


class Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str):
        super().__init__(daemon=True)
        self.assigned_at: float | None = None
        self.assigned: list[int] = []
        self.stop_flag = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "partition.assignment.strategy": "range", "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 500,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign)

    def _on_assign(self, _c, partitions):
        self.assigned = sorted(p.partition for p in partitions)
        self.assigned_at = time.time()

    def run(self):
        while not self.stop_flag.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()


def wait(pred, what):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--initial-delay-ms", type=int, default=3000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sf-rebalance-"))
    broker = BrokerProcess(work, extra_args=["--group-initial-rebalance-delay-ms",
                                             str(args.initial_delay_ms)])
    broker.start()
    try:
        topic, group = f"bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        members = [Member(broker.bootstrap, group, topic) for _ in range(args.members)]
        for m in members:
            m.start()
        wait(lambda: all(m.assigned_at for m in members), "formation")
        generations = [1]
        client_settle, broker_settle = [], []

        def record(generation: int, group_members):
            times = log_times(broker.log_path, group)
            closed = times[("rebalance join phase complete", generation)]
            stable = times[("group stable", generation)]
            client_settle.append(max(m.assigned_at for m in group_members) - closed)
            broker_settle.append(stable - closed)

        time.sleep(0.5)  # let the log flush
        record(1, members)
        formation = (client_settle[-1], broker_settle[-1])
        for _ in range(args.rounds):
            leaving = members.pop(0)
            leaving.stop_flag.set()
            leaving.join(timeout=WAIT_S)
            wait(lambda: len({len(m.assigned) for m in members}) >= 1 and
                 sum(len(m.assigned) for m in members) == PARTITIONS and
                 all(m.assigned for m in members), "the group to shrink")
            generations.append(generations[-1] + 1)
            time.sleep(0.5)
            for m in members:
                m.assigned_at = None
            newcomer = Member(broker.bootstrap, group, topic)
            newcomer.start()
            members.append(newcomer)
            wait(lambda: all(m.assigned_at for m in members), "the rebalance after a join")
            generations.append(generations[-1] + 1)
            time.sleep(0.5)
            record(generations[-1], members)
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(timeout=WAIT_S)
        rebal_client, rebal_broker = client_settle[1:], broker_settle[1:]
        print(f"{args.members} confluent-kafka consumers, range assignor, {PARTITIONS} partitions")
        print(f"formation: window closed -> all consumers assigned {formation[0]*1000:.1f} ms "
              f"(broker: -> Stable {formation[1]*1000:.1f} ms)")
        print(f"rebalance after a join ({len(rebal_client)} rounds): window closed -> all assigned "
              f"median {statistics.median(rebal_client)*1000:.1f} ms, max {max(rebal_client)*1000:.1f} ms; "
              f"broker -> Stable median {statistics.median(rebal_broker)*1000:.1f} ms, "
              f"max {max(rebal_broker)*1000:.1f} ms")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()

"""Helpers for the consumer-group tests: member child processes and assignment checks."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
POLL_INTERVAL_S = 0.1


class Member:
    """One `group_member.py` child process and what it reported."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str = "range",
                 session_timeout_ms: int = 6000, commit: str = "none",
                 report_messages: bool = False, instance_id: str | None = None):
        cmd = [sys.executable, str(HERE / "group_member.py"), "--bootstrap", bootstrap,
               "--group", group, "--topic", topic, "--strategy", strategy,
               "--session-timeout-ms", str(session_timeout_ms), "--commit", commit]
        if report_messages:
            cmd.append("--report-messages")
        if instance_id:
            cmd += ["--instance-id", instance_id]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True)
        self.events: queue.Queue = queue.Queue()
        self.assignment: list[int] = []
        self.consumed: set[tuple[int, int]] = set()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if ev["event"] == "assigned":
                    self.assignment = ev["partitions"]
                elif ev["event"] == "consumed":
                    self.consumed.add((ev["p"], ev["o"]))
            self.events.put(ev)

    def current(self) -> list[int]:
        with self.lock:
            return list(self.assignment)

    def consumed_set(self) -> set[tuple[int, int]]:
        with self.lock:
            return set(self.consumed)

    def kill(self) -> None:
        """SIGKILL: the member vanishes without a LeaveGroup."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the member closes its consumer (commit + LeaveGroup)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def balanced(members: list[Member], partitions: int) -> bool:
    """Every member owns at least one partition, none twice, all covered."""
    owned = [m.current() for m in members]
    flat = [p for ps in owned for p in ps]
    return (all(owned) and len(flat) == len(set(flat)) and set(flat) == set(range(partitions)))


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in futures.values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"message-{i}".encode(),
                         partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "all messages delivered"

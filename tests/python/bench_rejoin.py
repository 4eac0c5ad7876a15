"""Follower catch-up: a 3-broker cluster on 127.0.0.1 with an RF=3 topic; one follower is
stopped (SIGTERM), `--megabytes` are produced to the other two (acks=all, min.insync.replicas=2),
then the follower is started again and timed until it is back in every partition's ISR. Prints
the rejoin time and the catch-up rate (MB of missed writes per second, from the start command).
Talks to 127.0.0.1 only; kills only the brokers it started.

    python3 tests/python/bench_rejoin.py --megabytes 200 [--binary target/release/streamforge]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness import free_port

TOPIC = "rejoin"
PARTITIONS = 3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--megabytes", type=int, default=200)
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[2] / "target/debug/streamforge"))
    args = ap.parse_args()
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{free_port()}" for i in range(3))
    work = Path(tempfile.mkdtemp(prefix="sf-rejoin-"))

    def start(i: int) -> subprocess.Popen:
        return subprocess.Popen(
            [args.binary, "broker", "--node-id", str(i + 1), "--listen", f"127.0.0.1:{ports[i]}",
             "--data-dir", str(work / f"b{i + 1}"), "--http-listen", "off",
             "--controller-quorum-voters", voters, "--offsets-topic-partitions", "3"],
            stdout=open(work / f"b{i + 1}.log", "ab"), stderr=subprocess.STDOUT)

    procs = [start(i) for i in range(3)]
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def isr_full() -> bool:
        try:
            t = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
        except Exception:
            return False
        return bool(t.partitions) and all(sorted(p.isrs) == [1, 2, 3] for p in t.partitions.values())

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])
                list(fs.values())[0].result(20)
                break
            except Exception:
                assert time.monotonic() < deadline, "cluster did not form"
                time.sleep(0.5)
        while not isr_full():
            time.sleep(0.1)
        follower = 2  # broker 3
        procs[follower].terminate()
        procs[follower].wait(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_000_000})
        value = b"x" * 1000
        for n in range(args.megabytes * 1000):
            while True:
                try:
                    producer.produce(TOPIC, value=value, partition=n % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(300) == 0
        while isr_full():  # the controller must have taken it out first
            time.sleep(0.1)
        started = time.monotonic()
        procs[follower] = start(follower)
        while not isr_full():
            time.sleep(0.05)
        took = time.monotonic() - started
        print(f"rejoined every ISR {took:.2f} s after its start command; "
              f"{args.megabytes} MB missed: {args.megabytes / took:.0f} MB/s catch-up")
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()

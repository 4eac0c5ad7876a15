"""Produce throughput with and without enable.idempotence, same broker, same run (issue 4).

Usage: STREAMFORGE_BIN=target/release/streamforge python3 tests/python/bench_idempotence.py \
           [--messages 200000] [--rounds 2]
Starts one broker, then alternates idempotence off/on producing `--messages` 100-byte messages
to a fresh 10-partition topic each time (confluent-kafka, acks=all, batches of up to 2000
messages), and prints msgs/s per run and the on/off ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness import BrokerProcess

PARTITIONS = 10
VALUE = b"x" * 100


def run(bootstrap: str, topic: str, messages: int, idempotence: bool) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    futures[topic].result(timeout=30)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotence,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 2000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return messages / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(Path(work)).start()
        try:
            results: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.rounds):
                for idem in (False, True):
                    rate = run(broker.bootstrap, f"bench-idem-{r}-{int(idem)}", args.messages, idem)
                    results[idem].append(rate)
                    print(f"round {r} idempotence={'on ' if idem else 'off'}: {rate:,.0f} msgs/s")
            off, on = statistics.median(results[False]), statistics.median(results[True])
            print(f"median off {off:,.0f} msgs/s, on {on:,.0f} msgs/s, ratio on/off {on / off:.3f}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()

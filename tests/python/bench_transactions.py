"""Transactional producer throughput against the idempotent producer, same broker, same run
(issue 17), and the latency of commit_transaction (EndTxn) per transaction.

Usage: STREAMFORGE_BIN=target/release/streamforge python3 tests/python/bench_transactions.py \
           [--messages 100000] [--per-txn 1000] [--rounds 2]
Starts one broker, then alternates an idempotent run and a transactional run (one transaction
per `--per-txn` messages), each producing `--messages` 100-byte messages to a fresh 10-partition
topic (confluent-kafka, acks=all). Prints msgs/s per run, the transactional/idempotent ratio of
the medians, p50/p99 of commit_transaction over every transaction, and the broker's own handling
time per request (from `/metrics`: mean, and the histogram bucket holding the p99) for EndTxn,
AddPartitionsToTxn and Produce.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness import BrokerProcess

PARTITIONS = 10
VALUE = b"x" * 100
CONF = {"acks": "all", "linger.ms": 5, "batch.num.messages": 2000, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000}


def topic(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[name].result(timeout=30)
    return name


def produce_all(p: Producer, name: str, n: int) -> None:
    for i in range(n):
        while True:
            try:
                p.produce(name, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)


def run_idempotent(bootstrap: str, name: str, messages: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **CONF})
    # Connected, with a producer id and metadata, before the clock starts (as the transactional
    # run is after init_transactions).
    produce_all(p, name, PARTITIONS)
    p.flush(30)
    start = time.perf_counter()
    produce_all(p, name, messages)
    p.flush(120)
    return messages / (time.perf_counter() - start)


def run_transactional(bootstrap: str, name: str, messages: int, per_txn: int, commits: list[float]) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{name}", **CONF})
    p.init_transactions(30)
    start = time.perf_counter()
    sent = 0
    while sent < messages:
        n = min(per_txn, messages - sent)
        p.begin_transaction()
        produce_all(p, name, n)
        p.flush(120)
        t0 = time.perf_counter()
        p.commit_transaction(60)
        commits.append(time.perf_counter() - t0)
        sent += n
    return messages / (time.perf_counter() - start)


def broker_side(http_url: str, api: str) -> str:
    """The broker's handling time of `api` from its request-duration histogram."""
    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    name = "streamforge_request_duration_seconds"
    buckets = [(float(le), int(n)) for le, n in re.findall(
        rf'{name}_bucket{{api="{api}",le="([0-9.e+-]+)"}} (\d+)', text)]
    total = re.search(rf'{name}_sum{{api="{api}"}} ([0-9.e+-]+)', text)
    count = re.search(rf'{name}_count{{api="{api}"}} (\d+)', text)
    if not buckets or not total or not count or int(count.group(1)) == 0:
        return f"{api}: no requests"
    n = int(count.group(1))
    p99 = next((le for le, c in sorted(buckets) if c >= 0.99 * n), float("inf"))
    mean_ms = float(total.group(1)) / n * 1000
    return f"{api}: {n} requests, mean {mean_ms:.3f} ms, p99 <= {p99 * 1000:g} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--per-txn", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d), http=True).start()
        try:
            idem, txn, commits = [], [], []
            for r in range(args.rounds):
                idem.append(run_idempotent(b.bootstrap, topic(b.bootstrap, f"idem-{r}"), args.messages))
                txn.append(run_transactional(b.bootstrap, topic(b.bootstrap, f"txn-{r}"), args.messages,
                                             args.per_txn, commits))
                print(f"round {r}: idempotent {idem[-1]:,.0f} msgs/s, transactional {txn[-1]:,.0f} msgs/s")
            ratio = statistics.median(txn) / statistics.median(idem)
            commits.sort()
            p50 = commits[len(commits) // 2] * 1000
            p99 = commits[min(len(commits) - 1, int(len(commits) * 0.99))] * 1000
            print(f"transactional / idempotent (medians): {ratio:.3f}")
            print(f"commit_transaction (EndTxn) over {len(commits)} transactions: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            for api in ("EndTxn", "AddPartitionsToTxn", "Produce"):
                print("broker-side", broker_side(b.http_url, api))
        finally:
            b.stop()


if __name__ == "__main__":
    main()

"""Consume-transform-produce latency on a three-broker cluster (issue 17): where a transaction's
time goes when it commits consumer offsets with `send_offsets_to_transaction`.

Usage: STREAMFORGE_BIN=target/debug/streamforge python3 tests/python/bench_send_offsets_cluster.py \
           [--transactions 200] [--per-txn 10] [--debug DIR]
Starts three brokers, an input and an output topic (3 partitions, RF=3, led by all three), feeds
the input, and runs the consume-transform-produce step of tests/python/txn_app.py with
confluent-kafka twice: once with the group's coordinator (the leader of its `__consumer_offsets`
partition) on the same broker as the transaction's coordinator (the leader of the transactional
id's `__transaction_state` partition), once on another broker. Each client call of a transaction
is timed (begin, produce, send_offsets, commit) and printed as p50/p99/max, with the number of
requests librdkafka retried, by API (from its `debug=protocol` log), and of each error the brokers
answered to AddOffsetsToTxn, TxnOffsetCommit, AddPartitionsToTxn, EndTxn and FindCoordinator
(`streamforge_request_errors_total`). `--debug DIR` keeps each run's librdkafka log there
(`debug=eos,protocol,broker,cgrp`; without librdkafka's timestamps: it reaches Python at the
client's next call. For timestamps run tests/python/txn_app.py with TXN_APP_DEBUG set, whose
librdkafka log goes to stderr). `--only same|different` runs one of the two.
"""

from __future__ import annotations

import argparse
import collections
import logging
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).parent))

from harness import BrokerProcess  # noqa: E402
from test_cluster import admin, cluster_view, placement, start_cluster, wait_for  # noqa: E402
from test_txn_cluster import partition_for  # noqa: E402

TXN_STATE_PARTITIONS = 50
OFFSETS_PARTITIONS = 3
PARTITIONS = 3
APIS = ("AddOffsetsToTxn", "TxnOffsetCommit", "AddPartitionsToTxn", "EndTxn", "FindCoordinator")


class Factory:
    def __init__(self, root: Path):
        self.root = root
        self.brokers: list[BrokerProcess] = []

    def __call__(self, start=True, **_) -> BrokerProcess:
        work = self.root / f"b{len(self.brokers)}"
        work.mkdir()
        b = BrokerProcess(work, http=True)
        self.brokers.append(b)
        if start:
            b.start()
        return b


class RetryCounter(logging.Handler):
    """Counts the requests librdkafka retried, by API (its `debug=protocol` RETRY lines), and
    keeps the log."""

    def __init__(self, path: Path | None):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.out = path.open("w") if path else None

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if self.out:
            self.out.write(f"{line}\n")
        m = re.search(r"Retrying (\w+)Request", line)
        if m:
            self.counts[m.group(1)] += 1


def broker_errors(brokers: list[BrokerProcess]) -> collections.Counter[str]:
    """`streamforge_request_errors_total` of the transactional APIs, summed over the brokers."""
    out: collections.Counter[str] = collections.Counter()
    for b in brokers:
        text = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
        for api, error, n in re.findall(
                r'^streamforge_request_errors_total{api="(\w+)",error="(\w+)"} ([0-9.e+]+)$', text, re.M):
            if api in APIS:
                out[f"{api} {error}"] += int(float(n))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def show(name: str, xs: list[float]) -> None:
    ms = [x * 1000 for x in xs]
    print(f"  {name:12} n={len(ms)} p50={statistics.median(ms):.1f} ms p99={pct(ms, 0.99):.1f} ms "
          f"max={max(ms):.1f} ms mean={statistics.mean(ms):.1f} ms")


def leader(b, topic, partition):
    return wait_for(f"{topic} placement", lambda: placement(b, topic))[partition][0]


def run(brokers: list[BrokerProcess], src: str, dst: str, group: str, tid: str, n: int, per_txn: int,
        log: Path | None) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    errors_before = broker_errors(brokers)
    counter = RetryCounter(log)
    logger = logging.getLogger(f"rdkafka-{group}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(counter)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(src, p) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2,
                         "transaction.timeout.ms": 20000, "debug": "eos,protocol,broker,cgrp"},
                        logger=logger)
    producer.init_transactions(30)
    times: dict[str, list[float]] = {k: [] for k in ("begin", "produce", "send_offsets", "commit", "cycle")}
    done = 0
    while done < n + 5:
        msgs = [m for m in consumer.consume(per_txn, 1.0) if not m.error()]
        if not msgs:
            continue
        t0 = time.perf_counter()
        producer.begin_transaction()
        t1 = time.perf_counter()
        for m in msgs:
            producer.produce(dst, m.value().upper(), partition=m.partition())
        t2 = time.perf_counter()
        last = {m.partition(): m for m in msgs}
        offsets = [TopicPartition(src, p, m.offset() + 1) for p, m in last.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        t3 = time.perf_counter()
        producer.commit_transaction(30)
        t4 = time.perf_counter()
        done += 1
        if done > 5:  # warm-up: connections, metadata, the first coordinator lookups
            for k, d in (("begin", t1 - t0), ("produce", t2 - t1), ("send_offsets", t3 - t2),
                         ("commit", t4 - t3), ("cycle", t4 - t0)):
                times[k].append(d)
        producer.poll(0)
    producer.flush(10)
    consumer.close()
    for k, xs in times.items():
        show(k, xs)
    print(f"  requests librdkafka retried: {dict(counter.counts) or 'none'}")
    errors = broker_errors(brokers)
    errors.subtract(errors_before)
    print(f"  errors the brokers answered: {dict(+errors) or 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=200)
    ap.add_argument("--per-txn", type=int, default=10)
    ap.add_argument("--debug", help="a directory to keep librdkafka's logs in")
    ap.add_argument("--keep", help="a directory to keep the brokers' data and logs in")
    ap.add_argument("--only", choices=("same", "different"), help="one of the two runs")
    args = ap.parse_args()
    debug = Path(args.debug) if args.debug else None
    if debug:
        debug.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep or scratch)
        root.mkdir(parents=True, exist_ok=True)
        factory = Factory(root)
        try:
            brokers = start_cluster(factory, offsets_partitions=OFFSETS_PARTITIONS, http=True)
            wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
            bootstrap = ",".join(b.bootstrap for b in brokers)
            fs = admin(brokers[0]).create_topics([NewTopic(t, PARTITIONS, 3) for t in ("ctp-in", "ctp-out")])
            for f in fs.values():
                f.result(20)
            for t in ("ctp-in", "ctp-out"):
                wait_for(f"{t} led by every broker",
                         lambda t=t: {v[0] for v in (placement(brokers[0], t) or {}).values()} == {1, 2, 3})
            # __transaction_state and __consumer_offsets come with their first use.
            Producer({"bootstrap.servers": bootstrap, "transactional.id": "warm-up"}).init_transactions(30)
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "warm-up"})
            c.committed([TopicPartition("ctp-in", 0)], timeout=30)
            c.close()
            feed = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            total = 2 * (args.transactions + 10) * args.per_txn
            for i in range(total):
                feed.produce("ctp-in", f"m{i}".encode(), partition=i % PARTITIONS)
            feed.flush(60)
            tid = "ctp-bench-app"
            txn_coordinator = leader(brokers[0], "__transaction_state", partition_for(tid, TXN_STATE_PARTITIONS))
            groups = [f"ctp-{i}" for i in range(100)]
            group_coordinator = {g: leader(brokers[0], "__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS))
                                 for g in groups[:12]}
            same = next(g for g in groups if group_coordinator.get(g) == txn_coordinator)
            other = next(g for g in groups if group_coordinator.get(g, txn_coordinator) != txn_coordinator)
            for name, group in (("same", same), ("different", other)):
                if args.only and args.only != name:
                    continue
                print(f"-- group coordinator {name} as the transaction's: transaction coordinator "
                      f"{txn_coordinator}, group {group} on {group_coordinator[group]}; "
                      f"{args.transactions} transactions of {args.per_txn} inputs")
                run(brokers, "ctp-in", "ctp-out", group, tid, args.transactions,
                    args.per_txn, debug / f"{name}.log" if debug else None)
        finally:
            for b in factory.brokers:
                b.stop()


if __name__ == "__main__":
    main()

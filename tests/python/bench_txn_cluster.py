"""EndTxn latency on a three-broker cluster (issue 17, markers across brokers).

Usage: STREAMFORGE_BIN=target/debug/streamforge python3 tests/python/bench_txn_cluster.py \
           [--transactions 200] [--partitions 6]
Starts three brokers, creates a topic with `--partitions` partitions (RF=3) led by all three,
and runs `--transactions` transactions with confluent-kafka: one message to every partition,
flush, commit_transaction. The transaction coordinator is one broker, so most partitions' markers
go to other brokers as WriteTxnMarkers, and every leader waits for its followers to have them.
Prints p50/p99/max of
- commit: `commit_transaction` after the flush (the EndTxn round trip: the Prepare record in the
  ISR of its `__transaction_state` partition);
- send: begin, produce and flush. Its AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS
  (librdkafka retries it) until the previous transaction's markers are all written and its
  Complete record appended, so right after the previous commit it carries the markers' time;
- cycle: one whole transaction, begin to committed.
and the coordinator's own figures from its /metrics: EndTxn handling (the Prepare record in the
ISR) and, when the broker records it, the markers (Prepare record to the last marker written).
Then the same with `--pause-ms` between transactions (`--transactions` / 4 of them): the markers
are done by then, so `send` is the produce round trip alone; the difference is the markers'.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).parent))

from harness import BrokerProcess  # noqa: E402
from test_cluster import admin, cluster_view, placement, start_cluster, wait_for  # noqa: E402


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


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def show(name: str, xs: list[float]) -> None:
    ms = [x * 1000 for x in xs]
    print(f"{name:7} n={len(ms)} p50={statistics.median(ms):.1f} ms p99={pct(ms, 0.99):.1f} ms "
          f"max={max(ms):.1f} ms mean={statistics.mean(ms):.1f} ms")


def broker_quantiles(brokers: list[BrokerProcess], name: str) -> str:
    """p50/p99 of summary `name` on the broker that recorded it (the transaction coordinator),
    over the exporter's recent window."""
    for b in brokers:
        text = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
        q = dict(re.findall(rf'^{name}{{quantile="([0-9.]+)"}} ([0-9.e+-]+)$', text, re.M))
        count = re.search(rf"^{name}_count (\d+)$", text, re.M)
        if q and count and int(count.group(1)) > 0:
            return (f"{name} (broker {b.bootstrap}): n={count.group(1)} p50={float(q['0.5']) * 1000:.1f} ms "
                    f"p99={float(q['0.99']) * 1000:.1f} ms")
    return f"{name}: not recorded"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--pause-ms", type=int, default=300)
    ap.add_argument("--keep", help="a directory to keep the brokers' data and logs in")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep or scratch)
        root.mkdir(parents=True, exist_ok=True)
        factory = Factory(root)
        try:
            brokers = start_cluster(factory)
            wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
            topic = "bench-txn"
            fs = admin(brokers[0]).create_topics([NewTopic(topic, args.partitions, 3)])
            for f in fs.values():
                f.result(20)
            wait_for("leaders on every broker",
                     lambda: {v[0] for v in (placement(brokers[0], topic) or {}).values()} == {1, 2, 3})
            bootstrap = ",".join(b.bootstrap for b in brokers)
            p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-cluster",
                          "linger.ms": 0, "acks": "all"})
            p.init_transactions(30)
            for pause_ms in (0, args.pause_ms):
                commits: list[float] = []
                sends: list[float] = []
                cycles: list[float] = []
                n = args.transactions if pause_ms == 0 else args.transactions // 4
                for i in range(n + 5):
                    time.sleep(pause_ms / 1000)
                    t0 = time.perf_counter()
                    p.begin_transaction()
                    for part in range(args.partitions):
                        p.produce(topic, f"v{i}".encode(), partition=part)
                    p.flush(30)
                    t1 = time.perf_counter()
                    p.commit_transaction(30)
                    t2 = time.perf_counter()
                    if i >= 5:  # warm-up: connections, metadata, the first coordinator lookups
                        commits.append(t2 - t1)
                        sends.append(t1 - t0)
                        cycles.append(t2 - t0)
                print(f"-- {pause_ms} ms between transactions")
                for metric in ("streamforge_end_txn_seconds", "streamforge_txn_markers_seconds"):
                    print(broker_quantiles(factory.brokers, metric))
                show("commit", commits)
                show("send", sends)
                show("cycle", cycles)
        finally:
            for b in factory.brokers:
                b.stop()


if __name__ == "__main__":
    main()

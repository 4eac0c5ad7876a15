"""Produce latency against a compacted topic with the log cleaner idle and then cleaning, same
broker, same topic, same run (issue 17; docs/BENCHMARKS.md, "Log compaction").

Usage: STREAMFORGE_BIN=.../streamforge python3 tests/python/bench_compaction.py \
           [--rate 5000] [--seconds 10] [--keys 10000]
Starts one broker (cleaner backoff 100 ms), creates a 1-partition compacted topic with 1 MiB
segments and `min.compaction.lag.ms` of a day (nothing is cleanable: the cleaner is idle), and
produces `--rate` keyed 100-byte messages per second (confluent-kafka, acks=1, linger 1 ms) for
`--seconds`, recording each message's produce-to-delivery-report latency. Then it sets
`min.compaction.lag.ms=0` and `min.cleanable.dirty.ratio=0.01` and produces the same way while
the cleaner cleans the topic, and prints p50/p99/p99.9/max for both phases and the cleaner's
passes from the broker log.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from dataset import create_topic
from harness import BrokerProcess

TOPIC = "bench-compaction"


def phase(bootstrap: str, rate: int, seconds: float, keys: int, start_seq: int) -> list[float]:
    latencies: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1})

    def report(sent_at):
        def cb(err, _msg):
            assert err is None, err
            latencies.append(time.perf_counter() - sent_at)

        return cb

    begin = time.perf_counter()
    n = 0
    while time.perf_counter() - begin < seconds:
        due = begin + n / rate
        now = time.perf_counter()
        if now < due:
            p.poll(min(due - now, 0.01))
            continue
        seq = start_seq + n
        key = f"key-{seq % keys:06}".encode()
        p.produce(TOPIC, key=key, value=f"{seq:012}".encode().ljust(100, b"v"), partition=0, on_delivery=report(time.perf_counter()))
        p.poll(0)
        n += 1
    assert p.flush(60) == 0
    return sorted(latencies)


def summary(name: str, lat: list[float]) -> str:
    def pct(q: float) -> float:
        return lat[min(int(len(lat) * q), len(lat) - 1)] * 1000

    return f"{name:>16}: {len(lat)} msgs, p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms, p99.9 {pct(0.999):.2f} ms, max {lat[-1] * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--keys", type=int, default=10000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(Path(work), extra_args=["--log-cleaner-backoff-ms", "100"])
        broker.start()
        try:
            create_topic(
                broker.bootstrap,
                TOPIC,
                partitions=1,
                config={
                    "cleanup.policy": "compact",
                    "segment.bytes": str(1 << 20),
                    "min.compaction.lag.ms": str(24 * 3600 * 1000),
                },
            )
            idle = phase(broker.bootstrap, args.rate, args.seconds, args.keys, 0)
            entries = [
                ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
            ]
            resource = ConfigResource("topic", TOPIC, incremental_configs=entries)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.incremental_alter_configs([resource])[resource].result(30)
            cleaning = phase(broker.bootstrap, args.rate, args.seconds, args.keys, len(idle))
            passes = [line for line in broker.log_text().splitlines() if "cleaned log" in line]
            print(summary("cleaner idle", idle))
            print(summary("cleaner running", cleaning))
            print(f"cleaner passes during the second phase: {len(passes)}")
            if passes:
                print("last pass:", passes[-1].split("cleaned log")[1][-400:])
        finally:
            broker.stop()


if __name__ == "__main__":
    main()

"""Producer ack latency across processes: Kafka's own `ProducerPerformance` (the Java client)
against three `streamforge broker` processes of one cluster on 127.0.0.1. Two topics of 3
partitions: RF=3 with min.insync.replicas=2 produced with acks=all, and RF=1 produced with
acks=1; the runs alternate, `--rounds` of each, each in a fresh JVM. Prints ProducerPerformance's
summary line per run (avg / p50 / p95 / p99 / p99.9 latency, send to acknowledgement, whole
milliseconds) and the `uptime` load averages around each. Kills only the brokers it started.

    cd tests/java && mvn -B -o -q test-compile   # writes target/tools.classpath
    python3 tests/python/bench_ack_latency.py --binary target/release/streamforge \\
        --classpath tests/java/target/tools.classpath --records 100000 --throughput 10000 \\
        [--props linger.ms=0]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from harness import free_port

PARTITIONS = 3
# (label, topic, replication factor, acks)
SETUPS = [("RF=1 acks=1", "acks-one", 1, "1"), ("RF=3 acks=all", "acks-all", 3, "all")]
SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[:3].__str__()


def run_java(args: argparse.Namespace, classpath: str, bootstrap: str, topic: str, acks: str) -> str:
    out = subprocess.run(
        ["java", "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance",
         "--topic", topic, "--num-records", str(args.records),
         "--record-size", str(args.record_size), "--throughput", str(args.throughput),
         "--producer-props", f"acks={acks}", f"bootstrap.servers={bootstrap}", *args.props],
        capture_output=True, text=True, timeout=600)
    if args.windows:
        print(out.stdout.strip())
    m = SUMMARY.search(out.stdout)
    if not m:
        raise SystemExit(f"no summary line:\n{out.stdout}\n{out.stderr}")
    _, rate, _, avg, mx, p50, p95, p99, p999 = m.groups()
    return (f"{float(rate):>10,.0f} rec/s  avg {avg} ms  p50 {p50}  p95 {p95}  p99 {p99}  "
            f"p99.9 {p999}  max {mx} ms")


def run_streamforge(args: argparse.Namespace, bootstrap: str, topic: str, acks: str) -> str:
    """The bench's rate-limited phase (`--throughput` records/s for records/throughput
    seconds) after a short throughput phase; its ack latency at that rate."""
    seconds = max(1, args.records // max(args.throughput, 1))
    out = subprocess.run(
        [args.binary, "bench", "--bootstrap", bootstrap, "--topic", topic, "--keep-topic",
         "--partitions", str(PARTITIONS), "--acks", acks, "--message-size", str(args.record_size),
         "--messages", "100000", "--latency-messages", "0",
         "--latency-rate", str(args.throughput), "--latency-seconds", str(seconds),
         "--json", "--quiet"],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"bench failed:\n{out.stdout}\n{out.stderr}")
    v = json.loads(out.stdout)
    a, e = v["ack_latency_at_rate_ms"], v["latency_at_rate_ms"]
    return (f"ack p50 {a['p50']:.2f}  p99 {a['p99']:.2f}  p99.9 {a['p999']:.2f}  max {a['max']:.2f} ms"
            f" | end-to-end p50 {e['p50']:.2f}  p99 {e['p99']:.2f}  p99.9 {e['p999']:.2f} ms")


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(root / "target/release/streamforge"))
    ap.add_argument("--classpath", default=str(root / "tests/java/target/tools.classpath"))
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--throughput", type=int, default=10_000, help="records/s, -1 = full speed")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--client", choices=["java", "streamforge"], default="java",
                    help="streamforge: `streamforge bench --bootstrap` (the Rust client) instead")
    ap.add_argument("--windows", action="store_true", help="print ProducerPerformance's 5 s windows")
    ap.add_argument("--props", nargs="*", default=[], help="more producer props, e.g. linger.ms=0")
    args = ap.parse_args()
    classpath = Path(args.classpath).read_text().strip()
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{free_port()}" for i in range(3))
    work = Path(tempfile.mkdtemp(prefix="sf-acklat-"))
    procs = [
        subprocess.Popen(
            [args.binary, "broker", "--node-id", str(i + 1), "--listen", f"127.0.0.1:{ports[i]}",
             "--data-dir", str(work / f"b{i + 1}"), "--http-listen", "off",
             "--controller-quorum-voters", voters, "--offsets-topic-partitions", "3"],
            stdout=open(work / f"b{i + 1}.log", "ab"), stderr=subprocess.STDOUT)
        for i in range(3)
    ]
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def isr_full(topic: str, rf: int) -> bool:
        try:
            t = admin.list_topics(topic, timeout=5).topics[topic]
        except Exception:
            return False
        return bool(t.partitions) and all(len(p.isrs) == rf for p in t.partitions.values())

    try:
        deadline = time.monotonic() + 60
        for _, topic, rf, _ in SETUPS:
            while True:
                try:
                    fs = admin.create_topics([NewTopic(topic, PARTITIONS, rf, config={"min.insync.replicas": str(min(rf, 2))})])
                    list(fs.values())[0].result(20)
                    break
                except Exception:
                    assert time.monotonic() < deadline, "cluster did not form"
                    time.sleep(0.5)
            while not isr_full(topic, rf):
                assert time.monotonic() < deadline, f"{topic}: ISR did not fill"
                time.sleep(0.1)
        print(f"{args.records} records of {args.record_size} B at "
              f"{'full speed' if args.throughput < 0 else f'{args.throughput}/s'}, "
              f"{PARTITIONS} partitions, 3 broker processes, props {args.props}")
        for r in range(args.rounds):
            for label, topic, _, acks in SETUPS:
                before = load()
                if args.client == "java":
                    line = run_java(args, classpath, bootstrap, topic, acks)
                else:
                    line = run_streamforge(args, bootstrap, topic, acks)
                print(f"round {r} {label:14} {line}  load {before} -> {load()}", flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Restart time of one broker with many partitions: create `--topics` topics of 2 partitions
(plus `__consumer_offsets`, 50), then `--restarts` times SIGTERM it, start it again and time
until a raw Metadata v1 request is answered. Several binaries alternate in the same run (compare
a previous release's binary with this one; the machine is shared and noisy, so only same-run
ratios mean anything). Talks to 127.0.0.1 only; kills only the brokers it started.

    python3 tests/python/bench_restart.py --restarts 5 --rounds 2 OLD_BINARY NEW_BINARY
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import tempfile
import time

from confluent_kafka.admin import AdminClient, NewTopic

START_TIMEOUT_S = 60


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(binary: str, data: str, port: int) -> subprocess.Popen:
    return subprocess.Popen([binary, "broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
                             "--http-listen", "off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def until_metadata(port: int, t0: float) -> float:
    """Seconds from `t0` until a Metadata v1 (all topics) is answered."""
    body = ((3).to_bytes(2, "big") + (1).to_bytes(2, "big") + (1).to_bytes(4, "big")
            + (1).to_bytes(2, "big") + b"m" + (-1).to_bytes(4, "big", signed=True))
    while time.monotonic() - t0 < START_TIMEOUT_S:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(len(body).to_bytes(4, "big") + body)
                if int.from_bytes(s.recv(4), "big") > 0:
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.005)
    raise TimeoutError(f"no Metadata answer on port {port} within {START_TIMEOUT_S} s")


def run(binary: str, topics: int, restarts: int) -> list[float]:
    data = tempfile.mkdtemp(prefix="sf-restart-")
    port = free_port()
    p = start(binary, data, port)
    try:
        until_metadata(port, time.monotonic())
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        for f in admin.create_topics([NewTopic(f"t{i}", 2, 1) for i in range(topics)]).values():
            f.result()
        times = []
        for _ in range(restarts):
            p.send_signal(signal.SIGTERM)
            p.wait(START_TIMEOUT_S)
            t0 = time.monotonic()
            p = start(binary, data, port)
            times.append(until_metadata(port, t0))
        return times
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(START_TIMEOUT_S)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    results: dict[str, list[float]] = {b: [] for b in args.binaries}
    for _ in range(args.rounds):
        for b in args.binaries:
            results[b] += run(b, args.topics, args.restarts)
    for b, t in results.items():
        t.sort()
        print(f"{b}: n={len(t)} min={t[0]:.3f} s median={t[len(t) // 2]:.3f} s max={t[-1]:.3f} s")


if __name__ == "__main__":
    main()

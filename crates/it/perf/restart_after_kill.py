#!/usr/bin/env python3
"""Restart time of a real `streamforge broker` after kill -9 (issue 6, crash recovery).

Per run: start the broker on a free loopback port with a fresh data dir, produce 1M x 100 B into
10 partitions with `rdkafka-perf --produce-only` (acks=1), wait --settle-s seconds (the background
flush interval is 1 s by default), kill -9, start it again on the same data dir and time from
exec until its log says "broker listening". Prints each run and the restart's "loaded logs" line
(logs opened, bytes CRC-checked by recovery).

    crates/it/perf/restart_after_kill.py --bin target/release/streamforge \
        --perf-bin target/release/rdkafka-perf [--runs 3] [--settle-s 3] [-- extra broker args]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

READY = "broker listening"
START_TIMEOUT_S = 60.0
POLL_S = 0.0005


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(bin_path: str, port: int, data: str, log_path: str, extra: list[str]) -> tuple[subprocess.Popen, float]:
    """Start the broker; return it and the seconds from exec until it logged READY."""
    with open(log_path, "w"):
        pass  # truncate: READY must come from this start
    log = open(log_path, "ab")
    cmd = [bin_path, "broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data, "--http-listen", "off", *extra]
    env = dict(os.environ, RUST_LOG="info")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    log.close()
    deadline = t0 + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            if READY in f.read():
                return proc, time.monotonic() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}: {open(log_path).read()[-2000:]}")
        time.sleep(POLL_S)
    proc.kill()
    raise TimeoutError(f"broker not ready within {START_TIMEOUT_S}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--perf-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("extra", nargs="*", help="extra broker args (after --)")
    a = ap.parse_args()
    for run in range(1, a.runs + 1):
        data = tempfile.mkdtemp(prefix="sf-restart-")
        log_path = data + ".log"
        port = free_port()
        proc = None
        try:
            proc, _ = start(a.bin, port, data, log_path, a.extra)
            subprocess.run(
                [a.perf_bin, "--bootstrap", f"127.0.0.1:{port}", "--messages", str(a.messages),
                 "--produce-only", "--topic", "perf"],
                check=True, stdout=subprocess.DEVNULL, timeout=600,
            )  # fmt: skip
            time.sleep(a.settle_s)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            proc, ready_s = start(a.bin, port, data, log_path, a.extra)
            loaded = re.search(r"loaded logs.*", open(log_path, errors="replace").read())
            print(f"run {run}: restart after kill -9 ready in {ready_s * 1000:.1f} ms"
                  f" ({loaded.group(0) if loaded else 'no loaded-logs line'})", flush=True)  # fmt: skip
        finally:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            shutil.rmtree(data, ignore_errors=True)
            if os.path.exists(log_path):
                os.remove(log_path)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Broker CPU seconds per million messages produced by librdkafka (issue 6).
#
# Starts a release `streamforge broker` on a free loopback port with a temporary data dir, reads
# utime+stime of the broker process from /proc/<pid>/stat, runs `rdkafka-perf --produce-only`
# (1M x 100 B, 10 partitions, batch.num.messages=2000 by default) against it, reads the counters
# again and prints the difference per million messages.
#
#   [BROKER_ARGS="--log-flush-background-ms 0"] crates/it/perf/broker_cpu.sh [STREAMFORGE_BIN] [RDKAFKA_PERF_BIN] [extra rdkafka-perf args]
set -euo pipefail
target="${CARGO_TARGET_DIR:-target}"
sf="${1:-$target/release/streamforge}"
perf_bin="${2:-$target/release/rdkafka-perf}"
shift 2 || true
messages=1000000
data="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# shellcheck disable=SC2086 # BROKER_ARGS is a list of flags
"$sf" broker --listen "127.0.0.1:$port" --data-dir "$data" --http-listen off ${BROKER_ARGS:-} >"$data.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$data.log"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz="$(getconf CLK_TCK)"
# Topic creation and connection setup are not part of the produce cost: create the topic first.
"$perf_bin" --bootstrap "127.0.0.1:$port" --messages 1 --produce-only --topic perf "$@" >/dev/null
before="$(ticks)"
"$perf_bin" --bootstrap "127.0.0.1:$port" --messages "$messages" --produce-only --topic perf "$@"
after="$(ticks)"
python3 - "$before" "$after" "$hz" "$messages" <<'PY'
import sys
before, after, hz, n = (int(x) for x in sys.argv[1:])
cpu = (after - before) / hz
print(f"broker CPU (utime+stime): {cpu:.2f} s for {n:,} messages = {cpu * 1e6 / n:.3f} s per million")
PY

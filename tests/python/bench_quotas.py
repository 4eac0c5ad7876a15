"""The producer's achieved rate against its quota (docs/BENCHMARKS.md, "Client quotas").

For each `quota.window.num` given, starts a broker, sets `producer_byte_rate` on one client id,
and runs a confluent-kafka producer sending 10 KB messages as fast as it may for `--seconds`;
prints the acknowledged bytes per second and the average from 1 s after the start, against the
quota.

    STREAMFORGE_BIN=$CARGO_TARGET_DIR/debug/streamforge \
      python tests/python/bench_quotas.py --windows 11 3 --seconds 21
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BrokerProcess  # noqa: E402
from quota_admin import QuotaAdmin  # noqa: E402
from test_quotas import MEASURE_FROM_S, create_topic, produce_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, nargs="+", default=[11, 3])
    ap.add_argument("--seconds", type=float, default=21.0)
    ap.add_argument("--quota", type=int, default=1_048_576, help="producer_byte_rate, bytes/s")
    args = ap.parse_args()
    for windows in args.windows:
        with tempfile.TemporaryDirectory() as work:
            b = BrokerProcess(Path(work), extra_args=["--quota-window-num", str(windows)])
            b.start()
            try:
                create_topic(b.bootstrap, "bench-quota")
                q = QuotaAdmin(b.bootstrap)
                q.alter([({"client-id": "bench"}, {"producer_byte_rate": args.quota})])
                q.close()
                run = produce_for(b.bootstrap, "bench-quota", "bench", args.seconds)
            finally:
                b.stop()
        per_s = [0] * int(args.seconds + 1)
        for t, n in run.events:
            i = int(t - run.t0)
            if i < len(per_s):
                per_s[i] += n
        rate = run.rate(args.seconds)
        print(f"quota.window.num={windows}: {rate / args.quota:.3f} x quota "
              f"({rate / 1e6:.3f} MB/s from {MEASURE_FROM_S:.0f} s to {args.seconds:.0f} s), "
              f"throttle max {run.throttle_ms_max} ms; MB per second: "
              + " ".join(f"{n / 1e6:.2f}" for n in per_s[: int(args.seconds)]))


if __name__ == "__main__":
    main()

"""A consume-transform-produce app with exactly-once semantics, run as a child process by
test_transactions.py (which kills it with SIGKILL at random points): reads `src` with
read_committed from the group's committed offsets, writes each value upper-cased to `dst` and
commits the input offsets in the same transaction. Exits 0 once the input is idle, 1 on error.

Usage: python3 txn_app.py BOOTSTRAP SRC DST GROUP PARTITIONS [MESSAGES_PER_TRANSACTION]
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

IDLE_EXIT_S = 4.0


def main() -> int:
    bootstrap, src, dst, group, partitions = sys.argv[1:6]
    per_txn = int(sys.argv[6]) if len(sys.argv) > 6 else 100
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    # Assigned, not subscribed: a killed instance leaves no member behind to wait for.
    c.assign([TopicPartition(src, p) for p in range(int(partitions))])
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-app", "linger.ms": 2})
    p.init_transactions(30)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < IDLE_EXIT_S:
        msgs = [m for m in c.consume(per_txn, 0.5) if not m.error()]
        if not msgs:
            continue
        idle_since = time.monotonic()
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, m.value().upper(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    c.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # any client error: exit, the test restarts the app
        print(f"txn_app: {e}", file=sys.stderr)
        sys.exit(1)

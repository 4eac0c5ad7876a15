"""A confluent-kafka consumer-group member run as a child process by the group tests.

It subscribes to one topic and prints JSON lines on stdout:
  {"event": "assigned", "partitions": [...]}   after every assignment change (full set)
  {"event": "consumed", "p": P, "o": OFFSET}    for every message (with --report-messages)
  {"event": "committed", "offsets": {P: O}}     after every successful manual commit
Running it as a process lets a test SIGKILL it: no LeaveGroup, no final commit.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException

RUN_LIMIT_S = 600  # the member exits by itself after this long (bounded tests)


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--commit", choices=["auto", "manual", "none"], default="none")
    ap.add_argument("--report-messages", action="store_true")
    args = ap.parse_args()

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "partition.assignment.strategy": args.strategy,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(500, args.session_timeout_ms // 6),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": args.commit == "auto",
        "auto.commit.interval.ms": 200,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    cooperative = args.strategy == "cooperative-sticky"
    owned: set[int] = set()

    def on_assign(c, partitions):
        owned.update(p.partition for p in partitions)
        if cooperative:
            c.incremental_assign(partitions)
        emit({"event": "assigned", "partitions": sorted(owned)})

    def on_revoke(c, partitions):
        if args.commit == "manual" and partitions:
            try:
                c.commit(asynchronous=False)
            except KafkaException:
                pass  # nothing to commit, or the generation moved on
        owned.difference_update(p.partition for p in partitions)
        if cooperative:
            c.incremental_unassign(partitions)
        emit({"event": "assigned", "partitions": sorted(owned)})

    def on_lost(c, partitions):
        owned.difference_update(p.partition for p in partitions)
        if cooperative:
            c.incremental_unassign(partitions)
        emit({"event": "assigned", "partitions": sorted(owned)})

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit({"event": "started"})
    deadline = time.monotonic() + RUN_LIMIT_S
    while not stop["now"] and time.monotonic() < deadline:
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        batch: dict[int, int] = {}
        for m in msgs:
            if m.error():
                continue
            if args.report_messages:
                emit({"event": "consumed", "p": m.partition(), "o": m.offset()})
            batch[m.partition()] = max(batch.get(m.partition(), -1), m.offset())
        if args.commit == "manual" and batch:
            try:
                consumer.commit(asynchronous=False)
                emit({"event": "committed", "offsets": {str(p): o + 1 for p, o in batch.items()}})
            except KafkaException as e:
                emit({"event": "commit_failed", "error": str(e)})
    consumer.close()
    emit({"event": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())

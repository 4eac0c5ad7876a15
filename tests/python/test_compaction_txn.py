"""Compaction of a topic written by transactions (confluent-kafka), as Kafka's log cleaner does
it: an aborted transaction's records are removed (read_uncommitted consumers stop seeing them),
committed transactional records compact like any others (the latest per key stays), and the
marker of a transaction with no data left goes once `delete.retention.ms` has passed, while
the markers of transactions that still have data stay. Markers are counted with
`streamforge dump-log --json` over the partition's segments."""

from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import Producer

from dataset import create_topic
from test_compaction import CLEANER_ARGS, read_all
from test_transactions import read_all as read_values

WAIT_S = 90
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "2000",
}


def transaction(p: Producer, topic: str, keys: range, value: str, commit: bool) -> None:
    p.begin_transaction()
    for k in keys:
        p.produce(topic, key=f"k{k:02}".encode(), value=value.encode(), partition=0)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def markers(broker_bin: str, partition_dir) -> int:
    """Control batches in the partition's segments (a segment swapped meanwhile is re-read)."""
    for _ in range(20):
        try:
            count = 0
            for seg in sorted(partition_dir.glob("*.log")):
                out = subprocess.run([broker_bin, "dump-log", str(seg), "--json"], capture_output=True,
                                     text=True, timeout=30, check=True).stdout
                count += sum(1 for line in out.splitlines() if json.loads(line).get("control"))
            return count
        except (subprocess.CalledProcessError, FileNotFoundError):
            time.sleep(0.2)
    raise AssertionError("could not read the segments")


def test_compaction_drops_aborted_data_and_idle_markers(broker_factory, broker_bin, topic_name):
    broker = broker_factory(extra_args=CLEANER_ARGS)
    create_topic(broker.bootstrap, topic_name, partitions=1, config=CONFIG)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic_name}",
                  "linger.ms": 5})
    p.init_transactions(30)
    transaction(p, topic_name, range(20), "c1", commit=True)
    transaction(p, topic_name, range(20), "aborted", commit=False)
    transaction(p, topic_name, range(10), "c3", commit=True)
    assert markers(broker_bin, broker.data_dir / f"{topic_name}-0") == 3
    # Later plain writes roll the segments (segment.ms) and give the cleaner passes to make:
    # one removes the aborted records, the next stamps the idle marker's delete horizon, a
    # forced one past delete.retention.ms removes it.
    filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    expected = {f"k{k:02}".encode(): (b"c3" if k < 10 else b"c1") for k in range(20)}
    deadline = time.monotonic() + WAIT_S
    n = 0
    while True:
        filler.produce(topic_name, key=b"filler", value=str(n).encode(), partition=0)
        filler.flush(10)
        n += 1
        records = read_all(broker.bootstrap, topic_name)
        got = {k: v for _, k, v in records if k != b"filler"}
        no_aborted = all(v != b"aborted" for _, _, v in records)
        left = markers(broker_bin, broker.data_dir / f"{topic_name}-0")
        if no_aborted and got == expected and left == 2:
            break
        assert time.monotonic() < deadline, (
            f"after {WAIT_S}s: {left} markers, aborted left: {not no_aborted}, values {got}")
        time.sleep(0.7)
    # A read_committed consumer reads the same committed values.
    committed = [v for v in read_values(broker.bootstrap, topic_name, "read_committed") if not v.isdigit()]
    assert sorted(committed) == sorted(v.decode() for v in expected.values())

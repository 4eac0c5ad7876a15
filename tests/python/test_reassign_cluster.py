"""Partition reassignment (KIP-455) across three real broker processes, driven by Kafka's own
`kafka-reassign-partitions` (its main class, from the Java tests' class path): records produced
to RF=1 partitions are moved to other brokers (`--execute`), the tool's `--verify` reports the
reassignments completed, `--list` finds none left in progress, every record is read back from
the new leaders, a second new replica holds the same bytes, and the old replicas' directories
are deleted.

Needs Java and `tests/java/target/tools.classpath` (written by `mvn -o test-compile` in
tests/java; scripts/setup runs it), or `KAFKA_TOOLS_CLASSPATH_FILE` naming such a file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from test_cluster import admin, start_cluster, wait_for, watermarks

TOPIC = "moved"
RECORDS = 2000
WAIT_S = 40
REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
# Quick start-up for a short-lived tool (as tests/java's Tool does).
JAVA_OPTS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Xmx256m"]
# Partition 0 moves off broker 1 to 2 and 3 (its leader leaves, RF 1 -> 2); partition 1 moves
# from broker 2 to 3.
BEFORE = [[1], [2]]
AFTER = [[2, 3], [3]]


def tools_classpath() -> str | None:
    default = Path(__file__).resolve().parents[1] / "java" / "target" / "tools.classpath"
    path = Path(os.environ.get("KAFKA_TOOLS_CLASSPATH_FILE", default))
    if not path.is_file() or shutil.which("java") is None:
        return None
    return path.read_text().strip()


def reassign_tool(classpath: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    cmd = ["java", *JAVA_OPTS, "-cp", classpath, REASSIGN_TOOL, "--bootstrap-server", bootstrap,
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def produce(bootstrap: str) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    for i in range(RECORDS):
        p = i % 2
        value = f"record-{i}".encode()
        producer.produce(TOPIC, value=value, partition=p)
        sent[p].append(value)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0, "records left unacknowledged"
    return sent


def read_all(bootstrap: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{partition}",
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500})
    try:
        tp = TopicPartition(TOPIC, partition)
        wait_for(f"partition {partition} readable to {expected}",
                 lambda: watermarks(consumer, tp)[1] >= expected)
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < expected and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=1.0):
                if m.error() is None:
                    values.append(m.value())
        return values
    finally:
        consumer.close()


def segment_bytes(data_dir: Path, partition: int) -> int | None:
    d = data_dir / f"{TOPIC}-{partition}"
    if not d.is_dir():
        return None
    return sum(f.stat().st_size for f in d.glob("*.log"))


def placement_of(b) -> dict[int, tuple[int, list[int]]] | None:
    t = admin(b).list_topics(TOPIC, timeout=10).topics.get(TOPIC)
    if t is None or t.error is not None:
        return None
    return {p: (m.leader, list(m.replicas)) for p, m in t.partitions.items()}


def test_kafka_reassign_partitions_moves_the_data_to_other_brokers(broker_factory, tmp_path):
    classpath = tools_classpath()
    if classpath is None:
        pytest.skip("Kafka's tools class path (tests/java/target/tools.classpath) or java missing")
    brokers = start_cluster(broker_factory, offsets_partitions=1)
    b1 = brokers[0]
    fs = admin(b1).create_topics([NewTopic(TOPIC, num_partitions=len(BEFORE), replica_assignment=BEFORE)],
                                 operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the topic led where it was placed",
             lambda: placement_of(b1) == {0: (1, [1]), 1: (2, [2])})
    sent = produce(b1.bootstrap)

    plan = {"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": r} for p, r in enumerate(AFTER)]}
    plan_file = tmp_path / "reassignment.json"
    plan_file.write_text(json.dumps(plan))
    started = time.monotonic()
    execute = reassign_tool(classpath, b1.bootstrap, "--reassignment-json-file", str(plan_file),
                            "--execute")
    assert execute.returncode == 0, execute
    assert "Successfully started partition reassignments" in execute.stdout, execute.stdout

    last = []

    def verified():
        v = reassign_tool(classpath, brokers[2].bootstrap, "--reassignment-json-file",
                          str(plan_file), "--verify")
        last[:] = [v]
        done = v.returncode == 0 and all(
            f"Reassignment of partition {TOPIC}-{p} is completed" in v.stdout for p in (0, 1))
        return v if done else None

    try:
        verify = wait_for("--verify to report both reassignments completed", verified, WAIT_S)
    except AssertionError as e:
        raise AssertionError(f"{e}; the last --verify: {last}") from None
    took = time.monotonic() - started
    print(f"reassignment of {RECORDS} records: {took:.1f} s from --execute to --verify completed")
    assert "still in progress" not in verify.stdout
    listed = reassign_tool(classpath, brokers[1].bootstrap, "--list")
    assert listed.returncode == 0, listed
    assert "No partition reassignments found" in listed.stdout, listed.stdout

    # Every broker sees the new assignment and leaders; the old replicas deleted their copy.
    for b in brokers:
        wait_for(f"the new placement seen by {b.bootstrap}",
                 lambda b=b: placement_of(b) == {0: (2, [2, 3]), 1: (3, [3])})
    wait_for("broker 1's copy of partition 0 deleted",
             lambda: segment_bytes(brokers[0].data_dir, 0) is None)
    wait_for("broker 2's copy of partition 1 deleted",
             lambda: segment_bytes(brokers[1].data_dir, 1) is None)

    # All records, from the new leaders, in order; the second new replica of partition 0 holds
    # the same bytes as its leader.
    for p in (0, 1):
        assert read_all(b1.bootstrap, p, len(sent[p])) == sent[p]
    wait_for("partition 0 identical on brokers 2 and 3",
             lambda: segment_bytes(brokers[1].data_dir, 0)
             == segment_bytes(brokers[2].data_dir, 0) > 0)


THROTTLED_TOPIC = "throttled"
# Bytes per partition: four of the follower's 1 MiB fetches (`replica.fetch.max.bytes`).
DATA_BYTES = 4 << 20
VALUE_BYTES = 10_000
REPLICA_FETCH_MAX_BYTES = 1 << 20
THROTTLE_BYTES_PER_S = 1_000_000
UNLIMITED = str(2**63 - 1)


def produce_bytes(bootstrap: str, topic: str, partitions: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(DATA_BYTES // VALUE_BYTES):
        for p in partitions:
            producer.produce(topic, value=bytes([i % 251]) * VALUE_BYTES, partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0, "records left unacknowledged"


def partition_log(data_dir: Path, topic: str, partition: int) -> bytes:
    """The partition's segments (`*.log`) on one broker, in offset order."""
    d = data_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def config_values(b, kind, name: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource
    r = ConfigResource(kind, name)
    entries = list(admin(b).describe_configs([r]).values())[0].result(20)
    return {k: e.value for k, e in entries.items()}


def log_dir_size(bootstrap: str, broker_id: int, topic: str, partition: int) -> int | None:
    """DescribeLogDirs (kafka-python) of one broker: the size of its replica, if it has one."""
    from kafka import KafkaAdminClient
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        (answer,) = client.describe_log_dirs({topic: [partition]}, brokers=[broker_id])
    finally:
        client.close()
    sizes = [q["partition_size"] for d in answer["log_dirs"] for t in d["topics"]
             for q in t["partitions"] if t["name"] == topic and q["partition_index"] == partition]
    return sizes[0] if sizes else None


def test_a_throttled_reassignment_copies_at_the_throttle_rate_and_verify_removes_it(
        broker_factory, tmp_path):
    """`--execute --throttle 1000000` sets the rates on the moving brokers and the topic's
    throttled replicas (0:1 leader side, 0:3 follower side): the new replica's copy of 4 MiB
    takes at least (4 MiB - one 1 MiB fetch) / 1 MB/s, while the same move of another
    partition without a throttle is much faster; DescribeLogDirs shows the new replica growing;
    `--verify` deletes every throttle config, and the new replica holds the leader's bytes."""
    classpath = tools_classpath()
    if classpath is None:
        pytest.skip("Kafka's tools class path (tests/java/target/tools.classpath) or java missing")
    from confluent_kafka.admin import ConfigResource
    from test_cluster import placement
    brokers = start_cluster(broker_factory, offsets_partitions=1)
    b1 = brokers[0]
    fs = admin(b1).create_topics([NewTopic(THROTTLED_TOPIC, num_partitions=2,
                                           replica_assignment=[[1], [1]])], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the topic led by broker 1", lambda: placement(b1, THROTTLED_TOPIC) is not None)
    produce_bytes(b1.bootstrap, THROTTLED_TOPIC, [0, 1])
    leader_size = log_dir_size(b1.bootstrap, 1, THROTTLED_TOPIC, 0)
    assert leader_size is not None and leader_size >= DATA_BYTES, leader_size

    def moved(p: int, replicas: list[int]):
        seen = placement(b1, THROTTLED_TOPIC)
        return seen is not None and seen[p][1] == replicas and sorted(seen[p][2]) == replicas

    def execute(p: int, replicas: list[int], *args: str) -> tuple[float, Path]:
        """Start moving partition `p` to `replicas`: the seconds until it has moved (from the
        tool's return), and the plan's file."""
        plan_file = tmp_path / f"move-{p}.json"
        plan_file.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": THROTTLED_TOPIC, "partition": p, "replicas": replicas}]}))
        run = reassign_tool(classpath, b1.bootstrap, "--reassignment-json-file", str(plan_file),
                            "--execute", *args)
        assert run.returncode == 0, run
        started = time.monotonic()
        if args:
            assert f"throttle limit was set to {THROTTLE_BYTES_PER_S} B/s" in run.stdout, run.stdout
            # Mid-copy: the rates are set on the moving brokers, the throttled replicas on the
            # topic, and the new replica (DescribeLogDirs on broker 3) holds part of the data.
            for node_id in (1, 3):
                rates = config_values(brokers[node_id - 1], ConfigResource.Type.BROKER,
                                      str(node_id))
                assert rates["leader.replication.throttled.rate"] == str(THROTTLE_BYTES_PER_S)
                assert rates["follower.replication.throttled.rate"] == str(THROTTLE_BYTES_PER_S)
            topic = config_values(b1, ConfigResource.Type.TOPIC, THROTTLED_TOPIC)
            assert topic["leader.replication.throttled.replicas"] == "0:1", topic
            assert topic["follower.replication.throttled.replicas"] == "0:3", topic
            wait_for("the new replica on broker 3",
                     lambda: log_dir_size(b1.bootstrap, 3, THROTTLED_TOPIC, 0) is not None)
            partial = log_dir_size(b1.bootstrap, 3, THROTTLED_TOPIC, 0)
            assert partial is not None and partial < leader_size, (partial, leader_size)
        wait_for(f"partition {p} moved to {replicas}", lambda: moved(p, replicas), WAIT_S)
        return time.monotonic() - started, plan_file

    free_s, _ = execute(1, [1, 2])
    throttled_s, plan_file = execute(0, [1, 3], "--throttle", str(THROTTLE_BYTES_PER_S))
    least_s = (leader_size - REPLICA_FETCH_MAX_BYTES) / THROTTLE_BYTES_PER_S
    print(f"moving {leader_size} bytes: {free_s:.2f} s without a throttle, {throttled_s:.2f} s "
          f"at {THROTTLE_BYTES_PER_S} B/s (at least {least_s:.2f} s)")
    # The timer starts after the tool returned, a little after the copy started.
    assert throttled_s >= least_s * 0.95, (throttled_s, least_s)
    assert free_s < throttled_s / 3, (free_s, throttled_s)

    verify = wait_for("--verify to report the move completed", lambda: (lambda v: v if (
        v.returncode == 0 and f"Reassignment of partition {THROTTLED_TOPIC}-0 is completed"
        in v.stdout) else None)(reassign_tool(classpath, b1.bootstrap, "--reassignment-json-file",
                                             str(plan_file), "--verify")), WAIT_S)
    assert "Clearing broker-level throttles on brokers 1,2,3" in verify.stdout, verify.stdout
    assert f"Clearing topic-level throttles on topic {THROTTLED_TOPIC}" in verify.stdout
    for node_id, b in enumerate(brokers, start=1):
        rates = config_values(b, ConfigResource.Type.BROKER, str(node_id))
        assert rates["leader.replication.throttled.rate"] == UNLIMITED, rates
        assert rates["follower.replication.throttled.rate"] == UNLIMITED, rates
    topic = config_values(b1, ConfigResource.Type.TOPIC, THROTTLED_TOPIC)
    assert topic["leader.replication.throttled.replicas"] in ("", None), topic
    assert topic["follower.replication.throttled.replicas"] in ("", None), topic

    # The new replica holds exactly the leader's bytes, and DescribeLogDirs says so.
    leader_log = partition_log(brokers[0].data_dir, THROTTLED_TOPIC, 0)
    assert len(leader_log) == leader_size
    assert partition_log(brokers[2].data_dir, THROTTLED_TOPIC, 0) == leader_log
    assert log_dir_size(b1.bootstrap, 3, THROTTLED_TOPIC, 0) == leader_size

"""A follower restarted above the remote log (OFFSET_MOVED_TO_TIERED_STORAGE) takes its producer
state from the remote producer snapshot (KIP-405), so a transaction begun below its restart point
and aborted after it is indexed there, and once that follower leads, a read_committed consumer
(confluent-kafka) does not see the aborted records.

Five brokers (three voters, two broker-only nodes 4 and 5 holding the topic, so killing one of
them keeps the controller quorum), one S3-compatible bucket (`moto_server`). Node 5 is stopped;
a transaction begins on leader 4; enough other records follow that 4 uploads the transaction's
segments and deletes them locally; node 5 restarts below 4's local log start and starts there;
the transaction is aborted (the marker reaches 5); 4 is killed, 5 leads. Reading from offset 0
through 5 (remote data below its local log start): read_committed gets every committed record
and none of the aborted ones; read_uncommitted gets both. An idempotent producer's batch written
to 4 before node 5's restart point, sent again to 5 as a retry, is answered as a duplicate (its
original offset). Before this change node 5 restarted with empty producer state, so the ABORT
ended nothing there and the aborted records were served, and the retry was appended again.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from test_cluster import admin, cluster_view, placement, start_cluster, wait_for
import wire
from tiered_store import MotoStore

TOPIC = "tiered-txn-follower"
SEGMENT_BYTES = 16384
TASK_INTERVAL_MS = 200
LEADER, FOLLOWER = 4, 5
ABORTED = 20
FILLER = 1500
WAIT_S = 90
IDEMPOTENT_PID = 424242


def idempotent_batch() -> bytes:
    """One record from idempotent producer IDEMPOTENT_PID, epoch 0, sequence 0."""
    b = bytearray(wire.record_batch([(b"i", b"idempotent-once")]))
    b[43:51] = wire.i64(IDEMPOTENT_PID)
    b[51:53] = wire.i16(0)
    b[53:57] = wire.i32(0)
    return wire.reseal(bytes(b))


def produce_raw(b, batch: bytes) -> dict:
    with wire.connect(b.port, host=b.host) as sock:
        return wire.produce_v8(sock, TOPIC, 0, batch)


def isr(b) -> list[int]:
    try:
        p = placement(b, TOPIC)
    except Exception:
        return []
    return sorted(p[0][2]) if p else []


def leader_of(b) -> int:
    try:
        p = placement(b, TOPIC)
    except Exception:
        return -1
    return p[0][0] if p else -1


def local_bases(b) -> list[int]:
    return sorted(int(p.name[:20]) for p in (Path(b.data_dir) / f"{TOPIC}-0").glob("*.log"))


def filler(bootstrap: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.num.messages": 40, "message.timeout.ms": 30000})
    errors: list[str] = []
    for i in range(start, start + count):
        while True:
            try:
                p.produce(TOPIC, key=f"k{i}".encode(), value=f"committed-{i}-".encode() * 8,
                          partition=0, on_delivery=lambda e, m: e and errors.append(str(e)))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(40) == 0, "filler not delivered"
    assert not errors, errors[:3]


def read_all(bootstrap: str, isolation: str, expect_at_least: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        eof = False
        while time.monotonic() < deadline and not (eof and len(out) >= expect_at_least):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                eof = m.error().code() == KafkaError._PARTITION_EOF
                assert eof, m.error()
                continue
            eof = False
            out.append(m.value())
        return out
    finally:
        c.close()


def test_a_follower_restarted_above_the_remote_log_indexes_an_abort_of_a_transaction_begun_below(
        broker_factory, tmp_path):
    store = MotoStore(tmp_path)
    try:
        run(broker_factory, store)
    finally:
        store.close()


def run(broker_factory, store):
    brokers = start_cluster(broker_factory, offsets_partitions=1, observers=2,
                            extra_args=["--remote-task-interval-ms", str(TASK_INTERVAL_MS),
                                        *store.broker_args()],
                            env=store.broker_env())
    for b in brokers:
        wait_for("five brokers", lambda b=b: cluster_view(b)[0] == [1, 2, 3, 4, 5])
    leader, follower = brokers[LEADER - 1], brokers[FOLLOWER - 1]
    fs = admin(brokers[0]).create_topics([NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[LEADER, FOLLOWER]], config={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "0",
            "min.insync.replicas": "1",
        })], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    wait_for("the ISR full", lambda: isr(brokers[0]) == [LEADER, FOLLOWER])
    assert leader_of(brokers[0]) == LEADER
    bootstrap = ",".join(b.bootstrap for b in brokers)

    # Node 5 goes away; the ISR shrinks to the leader (session timeout 3 s).
    filler(bootstrap, 0, 10)
    follower.kill()
    wait_for("the ISR to shrink to the leader", lambda: isr(brokers[0]) == [LEADER])

    # An idempotent producer's batch below the follower's coming restart point.
    first = produce_raw(leader, idempotent_batch())
    assert first["error_code"] == 0, first

    # A transaction begins on the leader and stays open.
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tiered-txn-follower",
                    "transaction.timeout.ms": 600000, "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(ABORTED):
        txn.produce(TOPIC, key=b"t", value=f"aborted-{i}".encode(), partition=0)
    assert txn.flush(30) == 0

    # Enough after it that the leader uploads the transaction's segments and deletes them
    # locally: its local log starts above the transaction's first offset.
    filler(bootstrap, 10, FILLER)
    wait_for("the transaction's records remote only on the leader",
             lambda: len(local_bases(leader)) == 1 and local_bases(leader)[0] > 10 + ABORTED,
             timeout_s=WAIT_S)
    leader_local_start = local_bases(leader)[0]

    # Node 5 restarts below the leader's local log start: it starts its local log there.
    follower.start(timeout_s=WAIT_S)
    wait_for("the restarted follower back in the ISR",
             lambda: isr(brokers[0]) == [LEADER, FOLLOWER], timeout_s=WAIT_S)
    bases = local_bases(follower)
    assert bases and bases[0] >= leader_local_start, (bases[:1], leader_local_start)

    # The abort lands after the follower's restart point; committed records follow it, acked
    # with acks=all by the ISR [4, 5]: node 5 holds the marker once they are acknowledged.
    txn.abort_transaction(30)
    filler(bootstrap, 10 + FILLER, 5)
    print(f"leader local start {leader_local_start}, follower local start {bases[0]}")

    # The follower leads.
    leader.kill()
    wait_for("node 5 leads", lambda: leader_of(brokers[0]) == FOLLOWER, timeout_s=WAIT_S)
    survivors = ",".join(b.bootstrap for b in brokers if b is not leader)
    committed_total = 10 + FILLER + 5 + 1

    uncommitted = read_all(survivors, "read_uncommitted", committed_total + ABORTED)
    assert sum(v.startswith(b"aborted-") for v in uncommitted) == ABORTED, "the aborted records exist"
    assert uncommitted.count(b"idempotent-once") == 1
    committed = read_all(survivors, "read_committed", committed_total)
    leaked = [v for v in committed if v.startswith(b"aborted-")]
    assert not leaked, f"read_committed served {len(leaked)} aborted records: {leaked[:3]}"
    assert len(committed) == committed_total, (len(committed), committed_total)
    # The producer's retry of its batch is a duplicate on the new leader: answered with the
    # original offset, not appended again.
    retry = wait_for("the retry answered", lambda: (
        lambda r: r if r["error_code"] == 0 else None)(produce_raw(follower, idempotent_batch())))
    assert retry["base_offset"] == first["base_offset"], (retry, first)
    log = follower.log_text()
    assert "producer state taken from the remote producer snapshot" in log


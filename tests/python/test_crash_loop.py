"""Crash loop: an idempotent librdkafka producer writes continuously while the broker is killed
with SIGKILL at random moments and restarted on the same data dir, many times. A checker records
every acknowledged message (delivery report: partition, offset) and afterwards reads every
partition from offset 0 to its end, checking:

- every acknowledged message is there, at the offset it was acknowledged with, with its value;
- offsets are dense from 0 (no gap, no repeat) and every stored record is intact;
- each partition holds its messages exactly once and in production order (idempotence).

Batches vary in size (message sizes from 10 B to 8 KiB, bursts and pauses) and segments are small,
so kills land in the middle of batches, segment rolls and index appends. Bounded: SF_CRASH_CYCLES
cycles (default 8); each kill waits until new messages were acknowledged since the restart; the seed is printed (SF_CRASH_SEED
replays it).
"""

from __future__ import annotations

import os
import random
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from dataset import create_topic

PARTITIONS = 3
CYCLES = int(os.environ.get("SF_CRASH_CYCLES", "8"))
SEGMENT_BYTES = 64 * 1024
PRODUCE_RATE_MAX = 4000  # messages per second, upper bound of the producer's pace
DRAIN_TIMEOUT_S = 60
CONSUME_TIMEOUT_S = 60
PROGRESS_TIMEOUT_S = 30


def value_of(seq: int, size: int) -> bytes:
    head = f"seq={seq};".encode()
    return head + bytes((seq + i) % 251 for i in range(max(0, size - len(head))))


def seq_of(value: bytes) -> int:
    head = value.split(b";", 1)[0]
    assert head.startswith(b"seq="), f"not one of ours: {value[:40]!r}"
    return int(head[4:])


class AckChecker:
    """Every acknowledged (seq -> partition, offset), and the value sent for each seq."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[int, tuple[int, int]] = {}
        self.values: dict[int, bytes] = {}
        self.failed: dict[int, str] = {}

    def on_delivery(self, seq: int, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[seq] = (msg.partition(), msg.offset())
            else:
                self.failed[seq] = str(err)


def produce_until(bootstrap: str, topic: str, checker: AckChecker, stop: threading.Event, rng: random.Random):
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "socket.connection.setup.timeout.ms": 2000,
        }
    )
    seq = 0
    while not stop.is_set():
        burst = rng.choice([1, 5, 50, 300])
        for _ in range(burst):
            size = rng.choice([10, 100, 1000, 8192])
            value = value_of(seq, size)
            with checker.lock:
                checker.values[seq] = value
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        partition=seq % PARTITIONS,
                        on_delivery=lambda err, msg, s=seq: checker.on_delivery(s, err, msg),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            seq += 1
        producer.poll(0)
        time.sleep(burst / PRODUCE_RATE_MAX)
    remaining = producer.flush(DRAIN_TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages still in flight {DRAIN_TIMEOUT_S}s after the last crash"
    return seq


def read_partition(bootstrap: str, topic: str, partition: int, end: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-check-{topic}-{partition}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= end:
                        break
                    continue
                raise AssertionError(f"partition {partition}: consume error {msg.error()}")
            out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def wait_for_progress(checker: AckChecker, acked_count: int) -> None:
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while time.monotonic() < deadline:
        with checker.lock:
            if len(checker.acked) > acked_count:
                return
        time.sleep(0.02)
    raise AssertionError(f"no message acknowledged within {PROGRESS_TIMEOUT_S}s after a restart")


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-hw-{topic}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def test_acknowledged_messages_survive_a_kill_loop(broker_factory, topic_name):
    seed = int(os.environ.get("SF_CRASH_SEED", str(random.randrange(1 << 30))))
    print(f"crash loop seed {seed} (SF_CRASH_SEED={seed} replays it), {CYCLES} cycles")
    rng = random.Random(seed)
    broker = broker_factory(extra_args=["--segment-bytes", str(SEGMENT_BYTES)])
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)

    checker = AckChecker()
    stop = threading.Event()
    result: dict[str, object] = {}

    def run_producer():
        try:
            result["sent"] = produce_until(broker.bootstrap, topic_name, checker, stop, random.Random(seed + 1))
        except BaseException as e:  # reported by the main thread
            result["error"] = e

    producer_thread = threading.Thread(target=run_producer, daemon=True)
    producer_thread.start()
    acked_before_kill = []
    for _ in range(CYCLES):
        # Each kill lands while messages flow: first wait (bounded) for new acknowledgements.
        wait_for_progress(checker, acked_before_kill[-1] if acked_before_kill else 0)
        time.sleep(rng.uniform(0.05, 0.8))
        with checker.lock:
            acked_before_kill.append(len(checker.acked))
        broker.kill()
        time.sleep(rng.choice([0.0, 0.05, 0.3]))
        broker.start()
    wait_for_progress(checker, acked_before_kill[-1])
    time.sleep(0.5)
    stop.set()
    producer_thread.join(DRAIN_TIMEOUT_S + 30)
    assert not producer_thread.is_alive(), "producer did not finish"
    if "error" in result:
        raise result["error"]

    with checker.lock:
        acked = dict(checker.acked)
        values = dict(checker.values)
        failed = dict(checker.failed)
    print(f"sent {result['sent']}, acknowledged {len(acked)}, failed {len(failed)}, acked at kills {acked_before_kill}")
    assert acked, "nothing was acknowledged"
    assert not failed, f"{len(failed)} messages failed delivery, e.g. {list(failed.items())[:3]}"

    ends = high_watermarks(broker.bootstrap, topic_name)
    for p in range(PARTITIONS):
        records = read_partition(broker.bootstrap, topic_name, p, ends[p])
        offsets = [o for o, _ in records]
        assert offsets == list(range(ends[p])), (
            f"partition {p}: offsets are not dense from 0 to {ends[p]}: "
            f"{len(offsets)} records, first gap near {next((i for i, o in enumerate(offsets) if o != i), None)}"
        )
        stored = {o: seq_of(v) for o, v in records}
        seqs = [stored[o] for o in offsets]
        assert len(set(seqs)) == len(seqs), f"partition {p}: a message is stored twice"
        assert seqs == sorted(seqs), f"partition {p}: messages out of production order"
        for o, v in records:
            s = seq_of(v)
            assert s % PARTITIONS == p, f"partition {p} offset {o}: seq {s} belongs to another partition"
            assert v == values[s], f"partition {p} offset {o}: value of seq {s} damaged"
        for s, (part, off) in acked.items():
            if part != p:
                continue
            assert off in stored, f"acknowledged seq {s} at {p}/{off} is missing (end {ends[p]})"
            assert stored[off] == s, f"acknowledged seq {s} at {p}/{off} holds seq {stored[off]} instead"

"""Idempotent producers with a real client (confluent-kafka, enable.idempotence=true).

1. Through a TCP proxy that sometimes cuts the connection after forwarding a Produce request but
   before returning its response (and sometimes delays responses): librdkafka retries, the broker
   recognises the retries as duplicates, and a consumer finds every message exactly once, in order.
2. The broker is killed with SIGKILL in the middle of an idempotent run and restarted: the
   producer's retries are still recognised as duplicates after the restart.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import BrokerProcess, free_port

PRODUCE_API_KEY = 0
MESSAGES = 4000
# Bound on every wait in these tests.
WAIT_S = 90.0


class CuttingProxy:
    """Forwards Kafka connections to `upstream`. Every `cut_every`-th Produce response is dropped
    and both sides closed (the request reached the broker; the client never hears back); every
    `delay_every`-th response is held back for `delay_s`."""

    def __init__(self, listen_port: int, upstream: tuple[str, int], cut_every: int = 7, delay_every: int = 5, delay_s: float = 0.3):
        self.upstream = upstream
        self.cut_every = cut_every
        self.delay_every = delay_every
        self.delay_s = delay_s
        self.produce_responses = 0
        self.cuts = 0
        self.delays = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", listen_port))
        self._server.listen(64)
        self._server.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pending: dict[int, int] = {}  # correlation id -> api key
            threading.Thread(target=self._client_to_broker, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._broker_to_client, args=(upstream, client, pending), daemon=True).start()

    @staticmethod
    def _read_frame(sock: socket.socket) -> bytes | None:
        header = b""
        while len(header) < 4:
            chunk = sock.recv(4 - len(header))
            if not chunk:
                return None
            header += chunk
        (size,) = struct.unpack(">i", header)
        if size < 0 or size > 256 << 20:
            return None
        body = bytearray()
        while len(body) < size:
            chunk = sock.recv(min(1 << 20, size - len(body)))
            if not chunk:
                return None
            body += chunk
        return header + bytes(body)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _client_to_broker(self, client, upstream, pending) -> None:
        try:
            while True:
                frame = self._read_frame(client)
                if frame is None:
                    break
                api_key, _version, correlation_id = struct.unpack(">hhi", frame[4:12])
                pending[correlation_id] = api_key
                upstream.sendall(frame)
        except OSError:
            pass
        self._close(client, upstream)

    def _broker_to_client(self, upstream, client, pending) -> None:
        try:
            while True:
                frame = self._read_frame(upstream)
                if frame is None:
                    break
                (correlation_id,) = struct.unpack(">i", frame[4:8])
                if pending.pop(correlation_id, None) == PRODUCE_API_KEY:
                    with self._lock:
                        self.produce_responses += 1
                        n = self.produce_responses
                    if n % self.cut_every == 0:
                        with self._lock:
                            self.cuts += 1
                        break  # the broker appended it; the client never hears back
                    if n % self.delay_every == 0:
                        with self._lock:
                            self.delays += 1
                        time.sleep(self.delay_s)
                client.sendall(frame)
        except OSError:
            pass
        self._close(client, upstream)


class ProxiedBroker(BrokerProcess):
    """A broker that advertises the proxy's address, so every client connection goes through it."""

    def __init__(self, work_dir, advertised_port: int):
        super().__init__(work_dir)
        self.advertised_port = advertised_port

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index("--advertised-listener")
        cmd[i + 1] = f"127.0.0.1:{self.advertised_port}"
        return cmd


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=30)


def idempotent_producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
            "retry.backoff.ms": 20,
            "message.timeout.ms": int(WAIT_S * 1000),
            "socket.timeout.ms": 3000,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 200,
        }
    )


def produce_all(producer: Producer, topic: str, count: int, on_progress=None) -> list:
    errors: list = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=f"msg-{i:06d}".encode(), partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if on_progress is not None:
            on_progress(i)
    remaining = producer.flush(WAIT_S)
    assert remaining == 0, f"{remaining} messages not delivered"
    return errors


def consume_all(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + WAIT_S
    idle_polls = 0
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            idle_polls += 1
            if len(values) >= expected and idle_polls >= 4:
                break
            continue
        if msg.error():
            raise KafkaException(msg.error())
        idle_polls = 0
        values.append(msg.value().decode())
    consumer.close()
    return values


def assert_exactly_once_in_order(values: list[str], count: int) -> None:
    expected = [f"msg-{i:06d}" for i in range(count)]
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} duplicated messages"
    assert values == expected, f"got {len(values)} messages, first mismatch at {next((i for i, (a, b) in enumerate(zip(values, expected)) if a != b), min(len(values), len(expected)))}"


def test_retries_through_a_connection_cutting_proxy_never_duplicate(tmp_path, broker_bin):
    proxy_port = free_port()
    broker = ProxiedBroker(tmp_path, advertised_port=proxy_port)
    broker.start()
    proxy = CuttingProxy(proxy_port, ("127.0.0.1", broker.port))
    try:
        bootstrap = f"127.0.0.1:{proxy_port}"
        topic = "idempotence-proxy"
        create_topic(bootstrap, topic)
        errors = produce_all(idempotent_producer(bootstrap), topic, MESSAGES)
        assert not errors, f"delivery errors: {errors[:5]}"
        assert proxy.cuts > 0, "the proxy never cut a connection: the test proved nothing"
        values = consume_all(f"127.0.0.1:{broker.port}", topic, MESSAGES)
        assert_exactly_once_in_order(values, MESSAGES)
    finally:
        proxy.close()
        broker.stop()


def test_kill_9_mid_run_retries_are_still_duplicates(broker):
    topic = "idempotence-kill9"
    create_topic(broker.bootstrap, topic)
    producer = idempotent_producer(broker.bootstrap)
    killed = threading.Event()

    def maybe_kill(i: int) -> None:
        # Mid-run, with requests in flight: kill -9 and restart on the same port.
        if i == MESSAGES // 2 and not killed.is_set():
            killed.set()
            broker.restart(hard=True)

    errors = produce_all(producer, topic, MESSAGES, on_progress=maybe_kill)
    assert killed.is_set()
    assert not errors, f"delivery errors: {errors[:5]}"
    values = consume_all(broker.bootstrap, topic, MESSAGES)
    assert_exactly_once_in_order(values, MESSAGES)

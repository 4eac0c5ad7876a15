"""Client quotas (KIP-13/55/124/219/546) with real clients: quotas set and described through
AlterClientQuotas / DescribeClientQuotas (kafka-python's protocol classes), a confluent-kafka
producer and consumer held to their byte rates with the throttle time visible in librdkafka's
statistics, and unquoted clients in the same run not slowed. See docs/SECURITY.md "Quotas".

Kafka's rate is windowed: `quota.window.num` samples of 1 s, the elapsed time padded to
`num - 1` windows for a fresh sensor. With Kafka's default of 11, a client that sends as fast as
it may gets about 10 s worth at once and is then held back until that burst's sample expires
(11 s later), when the next burst goes through: over 20 s the achieved rate depends on where the
bursts fall (0.6 to 1.2 times the quota measured; the same arithmetic in Python agrees). The
rate tests therefore run the broker with `--quota-window-num 3` (Kafka's setting, same
algorithm), where the bursts are 2 s worth and the rate over 20 s is within a few percent; the
rate arithmetic at the default is unit-tested (`cargo test -p streamforge-broker --lib quota`).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quota_admin import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, QuotaAdmin

QUOTA_BYTES_PER_S = 1_048_576
RUN_S = 21.0
WINDOWS = ["--quota-window-num", "3"]
MEASURE_FROM_S = 1.0
TOLERANCE = 0.15
VALUE = b"q" * 10_000
INVALID_REQUEST = 42


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)


class Run:
    """What one client did: (monotonic time, bytes) per acked or consumed message, and the
    largest throttle time librdkafka's statistics reported."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[tuple[float, int]] = []
        self.throttle_ms_max = 0

    def stats(self, text: str) -> None:
        for b in json.loads(text).get("brokers", {}).values():
            self.throttle_ms_max = max(self.throttle_ms_max, b.get("throttle", {}).get("max", 0))

    def rate(self, seconds: float) -> float:
        """Bytes per second from MEASURE_FROM_S after the start to `seconds` after it."""
        start, end = self.t0 + MEASURE_FROM_S, self.t0 + seconds
        counted = sum(n for t, n in self.events if start <= t <= end)
        return counted / (end - start)


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> Run:
    run = Run()
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            # A small local queue: the limited producer is meant to wait, not to buffer 1 GB.
            "queue.buffering.max.kbytes": 4096,
            # Requests of at most 256 KiB: a quarter of a second of quota each, not a whole one.
            "batch.size": 262_144,
            "statistics.interval.ms": 500,
            "stats_cb": run.stats,
        }
    )

    def acked(err, msg):
        if err is None:
            run.events.append((time.monotonic(), len(msg.value())))

    while time.monotonic() - run.t0 < seconds:
        try:
            p.produce(topic, VALUE, on_delivery=acked)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.poll(1.0)  # one more statistics callback
    p.purge(in_queue=True)  # what is still queued after `seconds` is not measured
    p.flush(30)
    return run


def consume_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> Run:
    run = Run()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"{client_id}-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # Responses of at most 128 KiB (the broker caps a quota'd fetch at one window).
            "fetch.max.bytes": 131_072,
            "max.partition.fetch.bytes": 131_072,
            "message.max.bytes": 131_072,
            "statistics.interval.ms": 500,
            "stats_cb": run.stats,
        }
    )
    c.subscribe([topic])
    try:
        while time.monotonic() - run.t0 < seconds:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is None:
                    run.events.append((time.monotonic(), len(m.value())))
    finally:
        c.close()
    return run


def in_thread(fn, *args):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("run", fn(*args)), daemon=True)
    t.start()
    return t, out


def test_alter_and_describe_client_quotas_with_kafkas_filters_and_validation(broker_factory):
    b = broker_factory()
    q = QuotaAdmin(b.bootstrap)
    try:
        set_three = q.alter(
            [
                ({"user": "alice"}, {"producer_byte_rate": 1_048_576}),
                ({"user": "alice", "client-id": None}, {"request_percentage": 25.5}),
                ({"client-id": None}, {"consumer_byte_rate": 2_000_000}),
            ]
        )
        assert [code for code, _ in set_three] == [0, 0, 0], set_three
        code, _, all_quotas = q.describe([])
        assert code == 0
        assert all_quotas == {
            frozenset({("user", "alice")}): {"producer_byte_rate": 1_048_576.0},
            frozenset({("user", "alice"), ("client-id", None)}): {"request_percentage": 25.5},
            frozenset({("client-id", None)}): {"consumer_byte_rate": 2_000_000.0},
        }
        # Strict: only entities with exactly the filter's types.
        _, _, strict = q.describe([("user", MATCH_EXACT, "alice")], strict=True)
        assert list(strict) == [frozenset({("user", "alice")})]
        _, _, loose = q.describe([("user", MATCH_EXACT, "alice")], strict=False)
        assert len(loose) == 2
        _, _, defaults = q.describe([("client-id", MATCH_DEFAULT, None)], strict=True)
        assert list(defaults) == [frozenset({("client-id", None)})]
        _, _, any_client = q.describe([("client-id", MATCH_SPECIFIED, None)])
        assert len(any_client) == 2
        code, msg, _ = q.describe([("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)])
        assert code == INVALID_REQUEST and "IP filter" in msg

        # Kafka's validation: unknown key, non-positive value, fractional byte rate, empty
        # entity, IP entities (not served); each entry fails alone.
        results = q.alter(
            [
                ({"user": "bob"}, {"bogus_rate": 1}),
                ({"user": "bob"}, {"producer_byte_rate": 0}),
                ({"user": "bob"}, {"consumer_byte_rate": 1.5}),
                ({}, {"producer_byte_rate": 1}),
                ({"ip": "127.0.0.1"}, {"connection_creation_rate": 5}),
                ({"user": "carol"}, {"producer_byte_rate": 5000}),
            ]
        )
        codes = [c for c, _ in results]
        assert codes == [INVALID_REQUEST] * 5 + [0], results
        assert "Invalid configuration key bogus_rate" in results[0][1]
        # validate_only changes nothing.
        assert q.alter([({"user": "dave"}, {"producer_byte_rate": 10})], validate_only=True)[0][0] == 0
        _, _, after = q.describe([("user", MATCH_EXACT, "dave")])
        assert after == {}
        # Removal, then persistence across a restart.
        assert q.alter([({"user": "carol"}, {"producer_byte_rate": None})])[0][0] == 0
    finally:
        q.close()
    b.restart()
    q = QuotaAdmin(b.bootstrap)
    try:
        _, _, again = q.describe([])
        assert again == all_quotas
    finally:
        q.close()


def test_producer_held_to_its_byte_rate_while_an_unquoted_one_is_not(broker_factory, topic_name):
    b = broker_factory(extra_args=WINDOWS)
    create_topic(b.bootstrap, topic_name)
    q = QuotaAdmin(b.bootstrap)
    try:
        assert q.alter([({"client-id": "limited-producer"}, {"producer_byte_rate": QUOTA_BYTES_PER_S})])[0][0] == 0
    finally:
        q.close()
    free_thread, free = in_thread(produce_for, b.bootstrap, topic_name, "free-producer", 8.0)
    limited = produce_for(b.bootstrap, topic_name, "limited-producer", RUN_S)
    free_thread.join(60)
    rate = limited.rate(RUN_S)
    print(f"limited producer: {rate / 1e6:.3f} MB/s for a quota of {QUOTA_BYTES_PER_S / 1e6:.3f} MB/s; "
          f"unquoted: {free['run'].rate(8.0) / 1e6:.1f} MB/s; throttle max {limited.throttle_ms_max} ms")
    assert abs(rate - QUOTA_BYTES_PER_S) / QUOTA_BYTES_PER_S < TOLERANCE, rate
    assert limited.throttle_ms_max > 0
    assert free["run"].throttle_ms_max == 0
    assert free["run"].rate(8.0) > 3 * QUOTA_BYTES_PER_S


def test_consumer_held_to_its_byte_rate_while_an_unquoted_one_is_not(broker_factory, topic_name):
    b = broker_factory(extra_args=WINDOWS, http=True)
    create_topic(b.bootstrap, topic_name)
    fill = produce_for(b.bootstrap, topic_name, "filler", 6.0)
    filled = sum(n for _, n in fill.events)
    assert filled > 40 * QUOTA_BYTES_PER_S, filled
    q = QuotaAdmin(b.bootstrap)
    try:
        assert q.alter([({"client-id": "limited-consumer"}, {"consumer_byte_rate": QUOTA_BYTES_PER_S})])[0][0] == 0
    finally:
        q.close()
    free = consume_for(b.bootstrap, topic_name, "free-consumer", 8.0)
    limited = consume_for(b.bootstrap, topic_name, "limited-consumer", RUN_S)
    rate = limited.rate(RUN_S)
    print(f"limited consumer: {rate / 1e6:.3f} MB/s for a quota of {QUOTA_BYTES_PER_S / 1e6:.3f} MB/s; "
          f"unquoted: {free.rate(8.0) / 1e6:.1f} MB/s; throttle max {limited.throttle_ms_max} ms")
    assert abs(rate - QUOTA_BYTES_PER_S) / QUOTA_BYTES_PER_S < TOLERANCE, rate
    assert limited.throttle_ms_max > 0
    assert free.throttle_ms_max == 0
    assert free.rate(8.0) > 3 * QUOTA_BYTES_PER_S
    # /metrics: the throttle time and the rate of the quota entity (client id only here).
    text = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
    throttle = [line for line in text.splitlines()
                if line.startswith("streamforge_quota_throttle_time_ms_total")
                and 'client_id="limited-consumer"' in line and 'quota="consumer_byte_rate"' in line]
    assert throttle and float(throttle[0].split()[-1]) > 0, throttle
    assert any(line.startswith("streamforge_quota_rate") and 'client_id="limited-consumer"' in line
               for line in text.splitlines())
    assert 'client_id="free-consumer"' not in text
    assert "# HELP streamforge_quota_throttle_time_ms_total " in text


def test_a_user_quota_follows_the_sasl_principal_not_the_client_id(broker_factory, topic_name):
    import subprocess

    from harness import find_binary, free_port

    sasl_port = free_port()
    b = broker_factory(start=False)
    b.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "--sasl-mechanisms", "SCRAM-SHA-256",
    ]
    b.start()
    subprocess.run([str(find_binary()), "users", "-b", b.bootstrap, "create", "alice", "--password",
                    "alice-secret"], check=True, capture_output=True, timeout=30)
    create_topic(b.bootstrap, topic_name)
    q = QuotaAdmin(b.bootstrap)
    try:
        assert q.alter([({"user": "alice"}, {"producer_byte_rate": 20_000})])[0][0] == 0
    finally:
        q.close()

    def produce(conf: dict) -> int:
        run = Run()
        p = Producer({**conf, "client.id": "same-client", "statistics.interval.ms": 200,
                      "stats_cb": run.stats, "linger.ms": 5})
        for _ in range(60):
            p.produce(topic_name, VALUE)
        assert p.flush(60) == 0
        p.poll(0.5)
        return run.throttle_ms_max

    alice = produce({"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "alice",
                     "sasl.password": "alice-secret"})
    anonymous = produce({"bootstrap.servers": b.bootstrap})
    assert alice > 0
    assert anonymous == 0


def test_request_percentage_delays_other_requests_of_that_client_only(broker_factory):
    b = broker_factory()
    q = QuotaAdmin(b.bootstrap)
    try:
        # 0.001 % of a thread: 10 us of handler time per second, 100 us over the 10 s window
        # (a Metadata request takes tens of microseconds in a debug build).
        assert q.alter([({"client-id": "busy"}, {"request_percentage": 0.001})])[0][0] == 0
    finally:
        q.close()

    def metadata_requests(client_id: str) -> float:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": client_id})
        admin.list_topics(timeout=30)
        started = time.monotonic()
        for _ in range(5):
            admin.list_topics(timeout=30)
        return time.monotonic() - started

    busy = metadata_requests("busy")
    idle = metadata_requests("idle")
    print(f"5 Metadata requests: busy {busy:.2f} s, idle {idle:.2f} s")
    assert busy > 2.0
    assert idle < busy / 4


def produce_throttle_ms(data: bytes, version: int) -> tuple[int, int]:
    """(first partition's error code, throttle_time_ms) of a Produce v3-v7 response."""
    import wire

    r = wire.Reader(data)
    r.i32()  # correlation id
    error = 0
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            error = r.i16()
            r.i64()  # base offset
            r.i64()  # log append time
            if version >= 5:
                r.i64()  # log start offset
    return error, r.i32()


def test_kip219_new_versions_are_answered_at_once_then_muted_old_ones_delayed(broker_factory, topic_name):
    import wire

    b = broker_factory()
    create_topic(b.bootstrap, topic_name)
    q = QuotaAdmin(b.bootstrap)
    try:
        # Each client id its own sensor: 900 KB against 75 KB/s over the 10 s minimum window is
        # 90 KB/s, so Kafka's throttle time is (90 - 75) / 75 * 10 s = 2 s.
        assert q.alter([({"client-id": None}, {"producer_byte_rate": 75_000})])[0][0] == 0
    finally:
        q.close()
    batch = wire.record_batch([(None, VALUE)] * 90)
    body = wire.produce_v3_body(topic_name, 0, batch, acks=1)
    for version, client_id in ((3, "old-client"), (7, "new-client")):
        with wire.connect(b.port, timeout_s=30) as s:
            started = time.monotonic()
            wire.send_request(s, 0, version, body, correlation_id=5, client_id=client_id)
            error, throttle_ms = produce_throttle_ms(wire.recv_frame(s), version)
            answered_s = time.monotonic() - started
            assert error == 0
            assert 1_500 <= throttle_ms <= 2_500, throttle_ms
            wire.send_request(s, 18, 0, b"", correlation_id=6, client_id=client_id)
            wire.recv_frame(s)
            next_answered_s = time.monotonic() - started - answered_s
        print(f"Produce v{version}: answered after {answered_s:.2f} s (throttle {throttle_ms} ms), "
              f"next request {next_answered_s:.2f} s later")
        if version < 6:
            # No client-side throttling before Produce v6: the broker delays the response.
            assert answered_s >= throttle_ms / 1000 * 0.9
            assert next_answered_s < 0.5
        else:
            # KIP-219: the response at once, then nothing read from the connection.
            assert answered_s < 1.0
            assert next_answered_s >= throttle_ms / 1000 * 0.9


def test_a_long_poll_is_not_request_time(broker_factory, topic_name):
    # Kafka's request quota counts the time on request threads, not the time a Fetch waits in
    # purgatory: an idle consumer long-polling (500 ms each) under 5 % is never throttled.
    b = broker_factory()
    create_topic(b.bootstrap, topic_name)
    q = QuotaAdmin(b.bootstrap)
    try:
        assert q.alter([({"client-id": "poller"}, {"request_percentage": 5})])[0][0] == 0
    finally:
        q.close()
    idle = consume_for(b.bootstrap, topic_name, "poller", 6.0)
    assert idle.events == []
    assert idle.throttle_ms_max == 0


def test_a_throttled_acks0_produce_mutes_the_connection(broker_factory, topic_name):
    import wire

    b = broker_factory()
    create_topic(b.bootstrap, topic_name)
    q = QuotaAdmin(b.bootstrap)
    try:
        assert q.alter([({"client-id": "fire-and-forget"}, {"producer_byte_rate": 75_000})])[0][0] == 0
    finally:
        q.close()
    body = wire.produce_v3_body(topic_name, 0, wire.record_batch([(None, VALUE)] * 90), acks=0)
    with wire.connect(b.port, timeout_s=30) as s:
        started = time.monotonic()
        wire.send_request(s, 0, 7, body, correlation_id=5, client_id="fire-and-forget")
        wire.send_request(s, 18, 0, b"", correlation_id=6, client_id="fire-and-forget")
        r = wire.Reader(wire.recv_frame(s))
        assert r.i32() == 6  # no Produce response: the first frame answers ApiVersions
        waited_s = time.monotonic() - started
    # 900 KB against 75 KB/s: throttled 2 s (as in the acks=1 case above).
    assert 1.8 <= waited_s < 4.0, waited_s

"""Bad input over a raw socket (issue 3's list). Each case must get the Kafka error code Kafka would
return or have that one connection closed, and afterwards the broker must still serve a normal
client. One broker takes all the module's abuse in turn; limits that need small settings get their
own brokers."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

import wire
from clients import confluent_consume
from dataset import create_topic

CLOSE_TIMEOUT_S = 10.0
DEFAULT_REQUEST_MAX_BYTES = 100 * 1024 * 1024


def assert_serves_normal_client(broker, topic: str) -> None:
    """The broker process is alive, answers ApiVersions, and a real client can produce+consume."""
    assert broker.is_running(), f"broker died\n{broker.log_tail()}"
    with wire.connect(broker.port) as sock:
        assert wire.api_versions(sock).error_code == 0
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    acked = []
    for i in range(5):
        p.produce(topic, key=b"k", value=f"ok-{i}".encode(), partition=0,
                  on_delivery=lambda e, m: acked.append((e, m.offset() if e is None else None)))  # fmt: skip
    assert p.flush(30) == 0
    assert all(e is None for e, _ in acked), acked
    end = max(o for _, o in acked) + 1
    msgs = confluent_consume(broker.bootstrap, topic, 1, end)
    assert [m.value for m in msgs[-5:]] == [f"ok-{i}".encode() for i in range(5)]


def closed_or_answered(sock: socket.socket, correlation_id: int) -> str:
    """After a malformed request: 'closed' if the broker closes the connection, 'answered' if it
    sends a response frame with our correlation id (an error response). Fails on silence."""
    sock.settimeout(CLOSE_TIMEOUT_S)
    try:
        head = sock.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        pytest.fail("broker neither answered nor closed the connection")
    if not head:
        return "closed"
    if len(head) < 4:
        head += wire.recv_exact(sock, 4 - len(head))
    (size,) = struct.unpack(">i", head)
    body = wire.recv_exact(sock, size)
    (corr,) = struct.unpack(">i", body[:4])
    assert corr == correlation_id, f"response with correlation id {corr}, want {correlation_id}"
    return "answered"


@pytest.fixture(scope="module")
def victim(shared_broker):
    topic = "bad-input-probe"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    return shared_broker, topic


def test_frame_over_socket_request_max_bytes(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        sock.sendall(wire.i32(DEFAULT_REQUEST_MAX_BYTES + 1) + b"\x00" * 64)
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S), "frame over socket.request.max.bytes must close the connection"
    assert_serves_normal_client(broker, topic)


def test_frame_over_configured_limit_is_refused_before_reading_it(broker_factory):
    broker = broker_factory(extra_args=["--socket-request-max-bytes", "65536"])
    create_topic(broker.bootstrap, "limits", partitions=1)
    with wire.connect(broker.port) as sock:
        big = wire.request_header(wire.API_METADATA, 1, 5, "big", False) + wire.i32(0) + b"\x00" * 70_000
        try:
            sock.sendall(wire.frame(big))
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S)
    with wire.connect(broker.port) as sock:  # just under the limit is fine
        md = wire.metadata_v1(sock, ["limits"])
        assert md["topics"]["limits"][0] == 0
    assert_serves_normal_client(broker, "limits")


@pytest.mark.parametrize("size", [-1, -2147483648, 0, 2147483647])
def test_negative_zero_or_absurd_frame_size(victim, size):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        sock.sendall(wire.i32(size) + b"\x00\x12\x00\x00")
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S), f"frame size {size} must close the connection"
    assert_serves_normal_client(broker, topic)


def test_truncated_frame_then_eof(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        payload = wire.request_header(wire.API_METADATA, 1, 3, "trunc", False) + wire.i32(-1)
        sock.sendall(wire.i32(len(payload) + 50) + payload)  # promise 50 bytes more than sent
        sock.shutdown(socket.SHUT_WR)
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S)
    assert_serves_normal_client(broker, topic)


def test_truncated_request_body_inside_complete_frame(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        # Metadata v1 claims 5 topics and carries none.
        wire.send_request(sock, wire.API_METADATA, 1, wire.i32(5), correlation_id=21)
        closed_or_answered(sock, 21)
    assert_serves_normal_client(broker, topic)


def test_header_too_short(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        sock.sendall(wire.frame(b"\x00\x03\x00"))  # 3 bytes: not even api key + version
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S)
    assert_serves_normal_client(broker, topic)


def test_garbage_http_request(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S), "an HTTP request is not Kafka: close"
    assert_serves_normal_client(broker, topic)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_garbage_in_a_valid_frame(victim, seed):
    broker, topic = victim
    rng = random.Random(seed)
    with wire.connect(broker.port) as sock:
        for _ in range(20):
            body = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2000)))
            try:
                sock.sendall(wire.frame(body))
            except (ConnectionResetError, BrokenPipeError):
                break
        # Whatever the broker made of it (errors or a close), it must end the exchange promptly.
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already closed by the broker
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S)
    assert_serves_normal_client(broker, topic)


@pytest.mark.parametrize("api_key", [9999, 32767, -1, 1000])
def test_unknown_api_key_closes_connection(victim, api_key):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        wire.send_request(sock, api_key, 0, b"\x00" * 16, correlation_id=33)
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S), "Kafka closes the connection on an unknown api key"
    assert_serves_normal_client(broker, topic)


def test_unsupported_api_versions_version_gets_v0_error_with_range(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        wire.send_request(sock, wire.API_VERSIONS, 999, b"\x00" * 8, correlation_id=44, flexible=True)
        resp = wire.parse_api_versions_v0(wire.recv_frame(sock))
        assert resp.correlation_id == 44
        assert resp.error_code == wire.ERR_UNSUPPORTED_VERSION
        assert wire.API_VERSIONS in resp.api_keys
        lo, hi = resp.api_keys[wire.API_VERSIONS]
        assert lo == 0 and hi >= 3
        # The connection stays usable: the client retries with a version we serve.
        assert wire.api_versions(sock).error_code == 0
    assert_serves_normal_client(broker, topic)


def test_unsupported_version_of_other_api(victim):
    broker, topic = victim
    with wire.connect(broker.port) as sock:
        wire.send_request(sock, wire.API_METADATA, 999, wire.i32(-1), correlation_id=45)
        closed_or_answered(sock, 45)
    assert_serves_normal_client(broker, topic)


def test_bad_crc_batch_is_corrupt_message_and_not_stored(victim):
    broker, _ = victim
    topic = "bad-crc"
    create_topic(broker.bootstrap, topic, partitions=1)
    good = wire.record_batch([(b"k1", b"good-1"), (b"k2", b"good-2")])
    bad = wire.corrupt_crc(wire.record_batch([(b"k3", b"bad-3")]))
    with wire.connect(broker.port) as sock:
        assert wire.produce_v3(sock, topic, 0, good, correlation_id=51)[(topic, 0)] == (0, 0)
        err, _ = wire.produce_v3(sock, topic, 0, bad, correlation_id=52)[(topic, 0)]
        assert err == wire.ERR_CORRUPT_MESSAGE
        # The connection stays usable and the bad batch took no offsets.
        assert wire.produce_v3(sock, topic, 0, good, correlation_id=53)[(topic, 0)] == (0, 2)
    msgs = confluent_consume(broker.bootstrap, topic, 1, 4)
    assert [(m.offset, m.value) for m in msgs] == [(0, b"good-1"), (1, b"good-2"), (2, b"good-1"), (3, b"good-2")]
    assert_serves_normal_client(broker, topic)


def test_batch_with_flipped_payload_byte_is_corrupt_message(victim):
    broker, topic = victim
    batch = bytearray(wire.record_batch([(b"k", b"payload-that-will-be-damaged")]))
    batch[-5] ^= 0x01  # damage a record byte; the CRC no longer matches
    with wire.connect(broker.port) as sock:
        err, _ = wire.produce_v3(sock, topic, 0, bytes(batch), correlation_id=54)[(topic, 0)]
        assert err == wire.ERR_CORRUPT_MESSAGE
    assert_serves_normal_client(broker, topic)


def test_absurd_sizes_inside_requests(victim):
    broker, topic = victim
    cases = {
        # records length far beyond the frame
        "records_len": wire.string(None) + wire.i16(-1) + wire.i32(1000) + wire.i32(1) + wire.string(topic)
        + wire.i32(1) + wire.i32(0) + wire.i32(0x7FFFFFFF) + b"\x00" * 16,
        # topic array count of 2^31-1 with nothing behind it
        "array_count": wire.string(None) + wire.i16(-1) + wire.i32(1000) + wire.i32(0x7FFFFFFF),
        # a negative string length that is not the null marker
        "string_len": wire.string(None) + wire.i16(-1) + wire.i32(1000) + wire.i32(1) + wire.i16(-7) + b"abc",
    }
    for i, (name, body) in enumerate(cases.items()):
        with wire.connect(broker.port) as sock:
            wire.send_request(sock, wire.API_PRODUCE, 3, body, correlation_id=60 + i)
            closed_or_answered(sock, 60 + i)
        assert broker.is_running(), f"case {name} killed the broker"
    # A batch whose own length field is absurd.
    batch = bytearray(wire.record_batch([(b"k", b"v")]))
    batch[8:12] = wire.i32(0x7FFFFFF0)
    with wire.connect(broker.port) as sock:
        wire.send_request(sock, wire.API_PRODUCE, 3, wire.produce_v3_body(topic, 0, bytes(batch)), correlation_id=70)
        if closed_or_answered(sock, 70) == "answered":
            pass  # a per-partition error (CORRUPT_MESSAGE) is what Kafka returns; the close is also fine
    assert_serves_normal_client(broker, topic)


def test_slow_client_that_never_finishes_a_frame(broker_factory):
    broker = broker_factory(extra_args=["--request-read-timeout-ms", "1500", "--connections-max-idle-ms", "4000"])
    create_topic(broker.bootstrap, "slow", partitions=1)
    slow = wire.connect(broker.port)
    idle = wire.connect(broker.port)
    try:
        started = time.monotonic()
        slow.sendall(b"\x00\x00")  # half a length prefix, then nothing
        # While the slow client hangs, everyone else is served.
        assert_serves_normal_client(broker, "slow")
        assert wire.wait_closed(slow, 15.0), "a frame that never completes must time out"
        assert time.monotonic() - started < 15.0
        # A connection that sends nothing at all is closed after connections.max.idle.ms.
        assert wire.wait_closed(idle, 15.0), "an idle connection must be closed"
    finally:
        slow.close()
        idle.close()
    assert_serves_normal_client(broker, "slow")


def test_connection_limit(broker_factory):
    broker = broker_factory(extra_args=["--max-connections", "4"])
    held = []
    try:
        deadline = time.monotonic() + 10
        # Fill the broker up with 4 working connections (the readiness probe may still be closing).
        while len(held) < 4 and time.monotonic() < deadline:
            s = wire.connect(broker.port)
            try:
                wire.api_versions(s)
                held.append(s)
            except (wire.WireError, OSError):
                s.close()
                time.sleep(0.2)
        assert len(held) == 4
        extra = wire.connect(broker.port)
        with extra:
            assert wire.wait_closed(extra, CLOSE_TIMEOUT_S), "connection over the limit must be closed"
        for s in held:
            assert wire.api_versions(s).error_code == 0, "existing connections keep working"
    finally:
        for s in held:
            s.close()
    # Once the held connections are gone, new clients get in again.
    deadline = time.monotonic() + 10
    while True:
        try:
            with wire.connect(broker.port) as s:
                assert wire.api_versions(s).error_code == 0
            break
        except (wire.WireError, OSError):
            assert time.monotonic() < deadline, "broker did not accept connections after the held ones closed"
            time.sleep(0.2)
    create_topic(broker.bootstrap, "conn-limit", partitions=1)
    assert_serves_normal_client(broker, "conn-limit")


def _log_end_offset(broker, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "leo-probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def _bad_record_batches() -> dict[str, tuple[bytes, int]]:
    """Batches with a valid header and CRC whose records are wrong (issue D3): (batch, error code)."""
    import gzip

    three = wire.record_batch([(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")])
    one = wire.record_batch([(b"k", b"v")])
    garbage = random.Random(87).randbytes(400)
    member = gzip.compress(bytes(1 << 20), 9)  # 1 MiB of zeros in ~1 KB
    cases = {
        "count below records": (wire.with_counts(three, 2, 1), wire.ERR_INVALID_RECORD),
        "count above records": (wire.with_counts(three, 4, 3), wire.ERR_INVALID_RECORD),
        "lastOffsetDelta mismatch": (wire.with_counts(three, 3, 7), wire.ERR_INVALID_RECORD),
        "one record claiming 2^31-1": (wire.with_counts(one, 2**31 - 1, 2**31 - 2), wire.ERR_INVALID_RECORD),
        "random bytes as records": (wire.with_records(three, 0, garbage), wire.ERR_INVALID_RECORD),
        "1 GiB gzip bomb": (wire.with_records(one, 1, member * 1024), wire.ERR_INVALID_RECORD),
    }
    for codec, name in [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")]:
        cases[f"{name} flag over garbage"] = (wire.with_records(three, codec, garbage), wire.ERR_CORRUPT_MESSAGE)
    return cases


@pytest.mark.parametrize("case", sorted(_bad_record_batches()))
def test_batch_with_bad_records_is_refused_and_not_stored(shared_broker, case):
    broker = shared_broker
    topic = "bad-records-" + "".join(ch if ch.isalnum() else "-" for ch in case)
    create_topic(broker.bootstrap, topic, partitions=1, config={"max.message.bytes": "2097152"})
    good = wire.record_batch([(b"k1", b"good-1"), (b"k2", b"good-2")])
    batch, code = _bad_record_batches()[case]
    with wire.connect(broker.port) as sock:
        assert wire.produce_v3(sock, topic, 0, good, correlation_id=81)[(topic, 0)] == (0, 0)
        r = wire.produce_v8(sock, topic, 0, batch, correlation_id=82)
        assert r["error_code"] == code, r
        assert r["base_offset"] == -1
        assert r["error_message"], r
        assert len(r["record_errors"]) == 1 and r["record_errors"][0][1], r
    assert _log_end_offset(broker, topic) == 2, "the refused batch took no offsets"
    assert_serves_normal_client(broker, topic)

"""Minimal raw Kafka wire-protocol helpers for readiness checks and bad-input tests.

Only what the tests need: framing, request header v1/v2, ApiVersions v0/v3, Metadata v1,
Produce v3 with a hand-built RecordBatch (magic 2, CRC-32C). Written from the Kafka protocol
guide; no client library involved so the tests control every byte.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

FRAME_BYTES_MAX = 128 * 1024 * 1024  # refuse to read absurd frames from the broker in tests

API_PRODUCE = 0
API_METADATA = 3
API_VERSIONS = 18

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_INVALID_RECORD = 87
ERR_UNSUPPORTED_VERSION = 35


class WireError(Exception):
    """The broker closed the connection or sent something unparseable."""


class ConnectionClosed(WireError):
    pass


def connect(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# -- primitive encoders ----------------------------------------------------------------------
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v: int) -> bytes:
    return uvarint((v << 1) ^ (v >> 63))


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    hdr = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)
    if flexible:
        hdr += uvarint(0)  # empty tagged fields
    return hdr


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


# -- framing ---------------------------------------------------------------------------------
def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(buf)}/{n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    if size < 0 or size > FRAME_BYTES_MAX:
        raise WireError(f"bad response frame size {size}")
    return recv_exact(sock, size)


def send_request(
    sock: socket.socket,
    api_key: int,
    api_version: int,
    body: bytes,
    correlation_id: int = 1,
    client_id: str | None = "sf-wire-test",
    flexible: bool = False,
) -> None:
    sock.sendall(frame(request_header(api_key, api_version, correlation_id, client_id, flexible) + body))


def wait_closed(sock: socket.socket, timeout_s: float) -> bool:
    """True if the peer closes (EOF or reset) within `timeout_s`; data received is discarded."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
        if not chunk:
            return True


# -- parsing ---------------------------------------------------------------------------------
class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireError(f"short response: want {n} at {self.pos} of {len(self.data)}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        shift = 0
        out = 0
        for _ in range(10):
            b = self.take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
        raise WireError("varint too long")

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


@dataclass
class ApiVersionsResponse:
    correlation_id: int
    error_code: int
    api_keys: dict[int, tuple[int, int]] = field(default_factory=dict)


def parse_api_versions_v0(data: bytes) -> ApiVersionsResponse:
    r = Reader(data)
    corr = r.i32()
    err = r.i16()
    keys = {}
    n = r.i32()
    if n < 0 or n > 1000:
        raise WireError(f"bad api_keys count {n}")
    for _ in range(n):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        keys[k] = (lo, hi)
    return ApiVersionsResponse(corr, err, keys)


def api_versions(sock: socket.socket, correlation_id: int = 7) -> ApiVersionsResponse:
    """ApiVersions v0 round trip."""
    send_request(sock, API_VERSIONS, 0, b"", correlation_id=correlation_id)
    resp = parse_api_versions_v0(recv_frame(sock))
    if resp.correlation_id != correlation_id:
        raise WireError(f"correlation id {resp.correlation_id} != {correlation_id}")
    return resp


def api_versions_v3(sock: socket.socket, correlation_id: int = 8) -> ApiVersionsResponse:
    """ApiVersions v3 (flexible request header v2; the response header is always v0)."""
    body = compact_string("sf-wire-test") + compact_string("1.0") + uvarint(0)
    send_request(sock, API_VERSIONS, 3, body, correlation_id=correlation_id, flexible=True)
    r = Reader(recv_frame(sock))
    corr = r.i32()
    err = r.i16()
    keys = {}
    n = r.uvarint() - 1
    for _ in range(max(n, 0)):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        r.skip_tags()
        keys[k] = (lo, hi)
    return ApiVersionsResponse(corr, err, keys)


def metadata_v1(sock: socket.socket, topics: list[str] | None, correlation_id: int = 9) -> dict:
    """Metadata v1; returns {"brokers": [(id, host, port)], "controller": id,
    "topics": {name: (err, [partition ids])}, "leaders": {name: {partition: leader id}},
    "partitions": {name: {partition: (leader, [replicas], [isr])}}}."""
    if topics is None:
        body = i32(-1)
    else:
        body = i32(len(topics)) + b"".join(string(t) for t in topics)
    send_request(sock, API_METADATA, 1, body, correlation_id=correlation_id)
    r = Reader(recv_frame(sock))
    if r.i32() != correlation_id:
        raise WireError("correlation id mismatch")
    brokers = []
    for _ in range(r.i32()):
        node = r.i32()
        host = r.string()
        port = r.i32()
        r.string()  # rack
        brokers.append((node, host, port))
    controller = r.i32()
    out_topics = {}
    leaders = {}
    placement = {}
    for _ in range(r.i32()):
        err = r.i16()
        name = r.string()
        r.take(1)  # is_internal
        parts = []
        leaders[name] = {}
        placement[name] = {}
        for _ in range(r.i32()):
            r.i16()
            pid = r.i32()
            leader = r.i32()
            replicas = [r.i32() for _ in range(r.i32())]
            isr = [r.i32() for _ in range(r.i32())]
            leaders[name][pid] = leader
            placement[name][pid] = (leader, replicas, isr)
            parts.append(pid)
        out_topics[name] = (err, sorted(parts))
    return {"brokers": brokers, "controller": controller, "topics": out_topics, "leaders": leaders,
            "partitions": placement}


# -- record batches --------------------------------------------------------------------------
def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def record(offset_delta: int, key: bytes | None, value: bytes | None, headers=()) -> bytes:
    body = i8(0) + varint(0) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += varint(len(hkb)) + hkb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def record_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int | None = None) -> bytes:
    """An uncompressed magic-2 RecordBatch with a correct CRC-32C."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    recs = b"".join(record(i, k, v) for i, (k, v) in enumerate(records))
    after_crc = (
        i16(0)  # attributes: no compression, create time
        + i32(len(records) - 1)  # last offset delta
        + i64(ts)
        + i64(ts)
        + i64(-1)  # producer id
        + i16(-1)  # producer epoch
        + i32(-1)  # base sequence
        + i32(len(records))
        + recs
    )
    crc = crc32c(after_crc)
    # batch_length counts from partition_leader_epoch (4) + magic (1) + crc (4) + the rest.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return i64(0) + i32(batch_length) + i32(-1) + i8(2) + u32(crc) + after_crc


def corrupt_crc(batch: bytes) -> bytes:
    """Flip bits in the CRC field (bytes 17..21 of a v2 batch)."""
    b = bytearray(batch)
    b[17] ^= 0xFF
    return bytes(b)


def produce_v3_body(topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 10000) -> bytes:
    return (
        string(None)  # transactional id
        + i16(acks)
        + i32(timeout_ms)
        + i32(1)
        + string(topic)
        + i32(1)
        + i32(partition)
        + i32(len(records))
        + records
    )


def parse_produce_v3(data: bytes, correlation_id: int) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (error_code, base_offset)}"""
    r = Reader(data)
    if r.i32() != correlation_id:
        raise WireError("correlation id mismatch")
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            err = r.i16()
            base = r.i64()
            r.i64()  # log append time
            out[(name, p)] = (err, base)
    return out


def produce_v3(sock: socket.socket, topic: str, partition: int, batch: bytes, correlation_id: int = 11):
    send_request(sock, API_PRODUCE, 3, produce_v3_body(topic, partition, batch), correlation_id=correlation_id)
    return parse_produce_v3(recv_frame(sock), correlation_id)



def parse_produce_v8(data: bytes, correlation_id: int) -> dict[tuple[str, int], dict]:
    """{(topic, partition): {error_code, base_offset, record_errors: [(index, message)], error_message}}"""
    r = Reader(data)
    if r.i32() != correlation_id:
        raise WireError("correlation id mismatch")
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            part = {"error_code": r.i16(), "base_offset": r.i64()}
            r.i64()  # log append time
            r.i64()  # log start offset
            part["record_errors"] = [(r.i32(), r.string()) for _ in range(r.i32())]
            part["error_message"] = r.string()
            out[(name, p)] = part
    return out


def produce_v8(sock: socket.socket, topic: str, partition: int, batch: bytes, correlation_id: int = 12):
    """Produce v8 (same request body as v3; the response adds record_errors and error_message)."""
    send_request(sock, API_PRODUCE, 8, produce_v3_body(topic, partition, batch), correlation_id=correlation_id)
    return parse_produce_v8(recv_frame(sock), correlation_id)[(topic, partition)]


def reseal(batch: bytes) -> bytes:
    """Recompute batch_length and the CRC-32C of a v2 batch after an edit."""
    b = bytearray(batch)
    b[8:12] = i32(len(b) - 12)
    b[17:21] = u32(crc32c(bytes(b[21:])))
    return bytes(b)


def with_counts(batch: bytes, record_count: int, last_offset_delta: int) -> bytes:
    """The same batch claiming other recordCount / lastOffsetDelta (valid CRC)."""
    b = bytearray(batch)
    b[23:27] = i32(last_offset_delta)
    b[57:61] = i32(record_count)
    return reseal(bytes(b))


def with_records(batch: bytes, codec: int, records: bytes) -> bytes:
    """The batch's header (codec bits set to `codec`) over other records bytes (valid CRC)."""
    b = bytearray(batch[:61]) + records
    b[21:23] = i16((int.from_bytes(b[21:23], "big") & ~0x07) | codec)
    return reseal(bytes(b))

"""The compatibility-matrix dataset and its checks, shared by every Python client test.

N keyed messages with headers; after a round trip every message must come back exactly once with
its key, value and headers, offsets must be contiguous from 0 in each partition (fresh topic),
production order must hold within each partition, a key must live in one partition, and the
producer's acknowledged offsets must match where the consumer found each message.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, NewTopic

MESSAGES = 10_000
PARTITIONS = 4
KEYS = 97
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ADMIN_TIMEOUT_S = 30


@dataclass
class Msg:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def key_of(i: int) -> bytes:
    return f"key-{i % KEYS}".encode()


def value_of(i: int, codec: str) -> bytes:
    return f"value-{i}-{codec}-".encode() + b"x" * (20 + i % 40)


def headers_of(i: int, codec: str) -> list[tuple[str, bytes]]:
    return [("seq", str(i).encode()), ("codec", codec.encode()), ("bin", bytes([0, 1, 2, 255 - i % 256]))]


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=ADMIN_TIMEOUT_S,
        request_timeout=ADMIN_TIMEOUT_S,
    )
    futures[name].result(timeout=ADMIN_TIMEOUT_S)


def verify_round_trip(
    consumed: list[Msg],
    codec: str,
    n: int = MESSAGES,
    acked: dict[int, tuple[int, int]] | None = None,
    first_seq: int = 0,
    base_offsets: dict[int, int] | None = None,
    seq_of=None,
    expected_headers=None,
) -> dict[int, list[tuple[int, int]]]:
    """Check `consumed` against messages first_seq..first_seq+n; `acked` maps seq -> (partition, offset)
    from delivery reports; `base_offsets` is the expected first offset per partition (default 0).
    `seq_of(msg)` and `expected_headers(seq)` override how a message's seq is found and which
    headers it must carry (for tools that cannot set per-message headers).
    Returns {partition: [(offset, seq)]}."""
    seq_of = seq_of or (lambda m: int(m.headers["seq"]))
    expected_headers = expected_headers or (lambda seq: dict(headers_of(seq, codec)))
    assert len(consumed) == n, f"consumed {len(consumed)} messages, want {n}"
    seen: set[int] = set()
    key_partition: dict[bytes, int] = {}
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for m in consumed:
        seq = seq_of(m)
        assert first_seq <= seq < first_seq + n, f"unexpected seq {seq}"
        assert seq not in seen, f"duplicate seq {seq}"
        seen.add(seq)
        assert m.key == key_of(seq), f"seq {seq}: key {m.key!r}"
        assert m.value == value_of(seq, codec), f"seq {seq}: value {m.value!r}"
        want_headers = expected_headers(seq)
        assert m.headers == want_headers, f"seq {seq}: headers {m.headers!r}"
        assert key_partition.setdefault(m.key, m.partition) == m.partition, f"key {m.key!r} in two partitions"
        if acked is not None:
            assert acked[seq] == (m.partition, m.offset), f"seq {seq}: acked at {acked[seq]}, found at {(m.partition, m.offset)}"
        by_partition.setdefault(m.partition, []).append((m.offset, seq))
    assert len(by_partition) >= 2, f"only {len(by_partition)} partition(s) used"
    for p, entries in by_partition.items():
        entries.sort()
        start = (base_offsets or {}).get(p, 0)
        for idx, (offset, seq) in enumerate(entries):
            assert offset == start + idx, f"partition {p}: offset {offset} at index {idx}, want {start + idx}"
            if idx:
                assert seq > entries[idx - 1][1], f"partition {p}: order broken at offset {offset}"
    return by_partition

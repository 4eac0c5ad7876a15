"""Metadata v12 by topic id, as the Java client (4.1.1) sends it for
Admin.describeTopics(TopicCollection.ofTopicIds(..)): the topic id with name "" (not null).
Kafka resolves the entry by its id; the broker used to look up the name "" and answer
UNKNOWN_TOPIC_OR_PARTITION with a zero id, so describeTopics by id threw."""

from __future__ import annotations

import uuid

import wire
from dataset import create_topic

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100


def metadata_v12(port: int, topics: list[tuple[bytes, str | None]]) -> list[dict]:
    """Raw Metadata v12 with (topic id, name) entries; the topics of the response."""
    body = wire.uvarint(len(topics) + 1)
    for topic_id, name in topics:
        body += topic_id + wire.compact_string(name) + wire.uvarint(0)
    body += wire.i8(0) + wire.i8(0) + wire.uvarint(0)  # no auto-create, no authorized ops
    with wire.connect(port) as sock:
        wire.send_request(sock, wire.API_METADATA, 12, body, correlation_id=77, flexible=True)
        r = wire.Reader(wire.recv_frame(sock))
    assert r.i32() == 77
    r.skip_tags()
    r.i32()  # throttle
    for _ in range(r.uvarint() - 1):  # brokers
        r.i32(), compact_str(r), r.i32(), compact_str(r)
        r.skip_tags()
    compact_str(r)  # cluster id
    r.i32()  # controller
    out = []
    for _ in range(r.uvarint() - 1):
        t = {"error": r.i16(), "name": compact_str(r), "id": r.take(16)}
        r.take(1)  # is_internal
        parts = []
        for _ in range(r.uvarint() - 1):
            p = {"error": r.i16(), "index": r.i32(), "leader": r.i32()}
            r.i32()  # leader epoch
            for key in ("replicas", "isr", "offline"):
                p[key] = [r.i32() for _ in range(r.uvarint() - 1)]
            r.skip_tags()
            parts.append(p)
        t["partitions"] = parts
        r.i32()  # authorized operations
        r.skip_tags()
        out.append(t)
    return out


def compact_str(r: wire.Reader) -> str | None:
    n = r.uvarint()
    return None if n == 0 else r.take(n - 1).decode()


def test_metadata_v12_by_topic_id_with_empty_or_null_name(shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=2)
    port = shared_broker.port
    zero = bytes(16)
    [by_name] = metadata_v12(port, [(zero, topic_name)])
    assert by_name["error"] == 0 and by_name["id"] != zero
    topic_id = by_name["id"]
    for name in ("", None):  # Java 4.1.1 sends "", the protocol's intent is null
        [t] = metadata_v12(port, [(topic_id, name)])
        assert t["error"] == 0, (name, t)
        assert t["name"] == topic_name and t["id"] == topic_id
        assert [p["index"] for p in t["partitions"]] == [0, 1]
        assert all(p["error"] == 0 and p["offline"] == [] for p in t["partitions"])
    unknown = uuid.uuid4().bytes
    for name in ("", None):
        [t] = metadata_v12(port, [(unknown, name)])
        assert t["error"] == UNKNOWN_TOPIC_ID, t
        assert t["id"] == unknown and t["name"] is None and t["partitions"] == []
    # A name with a zero id is still looked up by name.
    [t] = metadata_v12(port, [(zero, topic_name + "-nope")])
    assert t["error"] == UNKNOWN_TOPIC_OR_PARTITION and t["id"] == zero

"""/metrics as an operator alerts on it: errors answered by API and Kafka error name, failed
produce / fetch / offset-commit counters, the build-info gauge, `# HELP` on every family, and
internal topics folded into one series each (bounded cardinality)."""

from __future__ import annotations

import re
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import wire
from dataset import create_topic

T_S = 10


def scrape(broker) -> str:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=T_S) as r:
        return r.read().decode()


def value(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_errors_are_counted_by_api_and_error_name(broker_factory, topic_name):
    b = broker_factory(http=True)
    create_topic(b.bootstrap, topic_name, partitions=1)
    before = scrape(b)
    assert value(before, "streamforge_failed_produce_requests_total") == 0

    # Produce to a partition the topic does not have: UNKNOWN_TOPIC_OR_PARTITION (3).
    sock = wire.connect(b.port)
    try:
        got = wire.produce_v3(sock, topic_name, 7, wire.record_batch([(None, b"x")]))
        assert got[(topic_name, 7)][0] == 3, got
    finally:
        sock.close()
    # An offset commit for a partition that does not exist either.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "metrics-g", "enable.auto.commit": False})
    try:
        try:
            c.commit(offsets=[TopicPartition(topic_name, 9, 1)], asynchronous=False)
        except Exception:  # noqa: BLE001 - the commit is meant to fail; the counter is checked
            pass
    finally:
        c.close()

    # A read-only broker config: INVALID_REQUEST, counted under IncrementalAlterConfigs.
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
        raise AssertionError("num.partitions is read-only")
    except KafkaException:
        pass

    deadline = time.monotonic() + T_S
    while True:
        text = scrape(b)
        produce = value(text, 'streamforge_request_errors_total{api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION"}')
        commit = value(text, 'streamforge_request_errors_total{api="OffsetCommit",error="UNKNOWN_TOPIC_OR_PARTITION"}')
        if produce is not None and commit is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert produce == 1, text
    assert commit is not None and commit >= 1, text
    assert value(text, "streamforge_failed_produce_requests_total") == 1
    assert value(text, "streamforge_failed_offset_commit_requests_total") >= 1
    assert value(text, "streamforge_failed_fetch_requests_total") == 0
    assert value(text, 'streamforge_request_errors_total{api="IncrementalAlterConfigs",error="INVALID_REQUEST"}') == 1

    assert re.search(r'^streamforge_build_info\{version="[^"]+",profile="(debug|release)"\} 1$', text, re.M), text


def test_every_family_has_help_and_internal_topics_are_one_series(broker_factory):
    b = broker_factory(http=True)
    text = scrape(b)
    typed = re.findall(r"^# TYPE (\S+) ", text, re.M)
    helped = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    assert typed, text
    assert [t for t in typed if t not in helped] == [], "families without # HELP"
    offsets = [l for l in text.splitlines() if "__consumer_offsets" in l and not l.startswith("#")]
    # One series per per-partition family (size, start, end, high watermark, ISR size,
    # under-replicated, under/at min ISR), not 50 each.
    assert offsets and all('partition="all"' in l or "partition=" not in l for l in offsets), offsets
    assert len(offsets) <= 12, offsets


def test_errors_of_every_api_family_are_counted(broker_factory, topic_name):
    """Every routed API counts its error codes (top level, per resource, per partition) under
    its own name: topic admin, configs, offsets, groups; each error once (no double count)."""
    from confluent_kafka.admin import NewTopic

    b = broker_factory(http=True)
    create_topic(b.bootstrap, topic_name, partitions=1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    # CreateTopics with an illegal name: INVALID_TOPIC_EXCEPTION (17).
    fut = admin.create_topics([NewTopic("bad name!", 1, 1)], request_timeout=T_S)["bad name!"]
    try:
        fut.result(timeout=T_S)
        raise AssertionError("an illegal topic name was accepted")
    except KafkaException:
        pass
    # DeleteTopics of a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3).
    missing = topic_name + "-missing"
    try:
        admin.delete_topics([missing], request_timeout=T_S)[missing].result(timeout=T_S)
        raise AssertionError("deleted a topic that does not exist")
    except KafkaException:
        pass

    # DescribeConfigs of a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION, per resource.
    res = ConfigResource(ConfigResource.Type.TOPIC, missing)
    try:
        admin.describe_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
        raise AssertionError("described a topic that does not exist")
    except KafkaException:
        pass

    sock = wire.connect(b.port)
    try:
        # ListOffsets v1 of a partition the topic does not have: UNKNOWN_TOPIC_OR_PARTITION.
        body = wire.i32(-1) + wire.i32(1) + wire.string(topic_name) + wire.i32(1) + wire.i32(5) + wire.i64(-1)
        wire.send_request(sock, 2, 1, body, correlation_id=21)
        wire.recv_frame(sock)
        # JoinGroup v0 with a session timeout below group.min.session.timeout.ms:
        # INVALID_SESSION_TIMEOUT (26).
        body = (wire.string("metrics-join") + wire.i32(1) + wire.string("") + wire.string("consumer")
                + wire.i32(1) + wire.string("range") + wire.i32(0))
        wire.send_request(sock, 11, 0, body, correlation_id=22)
        wire.recv_frame(sock)
    finally:
        sock.close()

    want = {
        ("CreateTopics", "INVALID_TOPIC_EXCEPTION"),
        ("DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("ListOffsets", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("JoinGroup", "INVALID_SESSION_TIMEOUT"),
        ("DescribeConfigs", "UNKNOWN_TOPIC_OR_PARTITION"),
    }
    deadline = time.monotonic() + T_S
    while True:
        text = scrape(b)
        seen = {(m[0], m[1]) for m in re.findall(
            r'^streamforge_request_errors_total\{api="([^"]+)",error="([^"]+)"\} [1-9]', text, re.M)}
        if want <= seen or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert want <= seen, sorted(seen)
    for api, error in want:
        assert value(text, f'streamforge_request_errors_total{{api="{api}",error="{error}"}}') == 1, (api, error)
    # Bounded labels: every api is a routed API name, never "Other".
    assert all(api != "Other" for api, _ in seen), seen
    typed = re.findall(r"^# TYPE (\S+) ", text, re.M)
    helped = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    assert [t for t in typed if t not in helped] == [], "families without # HELP"

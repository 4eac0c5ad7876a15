"""Admin operations through confluent-kafka's AdminClient: create/describe/alter/delete topics,
create partitions, describe cluster and configs, delete records, list offsets."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from clients import confluent_consume, confluent_produce
from dataset import PARTITIONS, create_topic, verify_round_trip

T_S = 30  # every admin call is bounded


@pytest.fixture
def admin(shared_broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def error_code(fut) -> int:
    with pytest.raises(KafkaException) as e:
        fut.result(timeout=T_S)
    return e.value.args[0].code()


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=T_S).topics)


def describe_topic_config(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=T_S)[res].result(timeout=T_S)


def wait_for(pred, what: str, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_create_describe_delete_topic(admin, topic_name):
    fut = admin.create_topics(
        [NewTopic(topic_name, num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"})],
        request_timeout=T_S,
    )[topic_name]
    fut.result(timeout=T_S)

    md = admin.list_topics(topic=topic_name, timeout=T_S).topics[topic_name]
    assert md.error is None
    assert sorted(md.partitions) == [0, 1, 2]
    for p in md.partitions.values():
        assert p.leader >= 0 and p.replicas == [p.leader] and p.isrs == [p.leader]

    desc = admin.describe_topics(TopicCollection([topic_name]), request_timeout=T_S)[topic_name].result(timeout=T_S)
    assert desc.name == topic_name
    assert len(desc.partitions) == 3
    assert not desc.is_internal

    cfg = describe_topic_config(admin, topic_name)
    assert cfg["retention.ms"].value == "3600000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not cfg["retention.ms"].is_default

    admin.delete_topics([topic_name], request_timeout=T_S)[topic_name].result(timeout=T_S)
    wait_for(lambda: topic_name not in topic_names(admin), "the topic to disappear")


def test_create_topic_errors_match_kafka(admin, topic_name):
    admin.create_topics([NewTopic(topic_name, num_partitions=1)], request_timeout=T_S)[topic_name].result(timeout=T_S)
    dup = admin.create_topics([NewTopic(topic_name, num_partitions=1)], request_timeout=T_S)[topic_name]
    assert error_code(dup) == KafkaError.TOPIC_ALREADY_EXISTS

    bad_cfg = topic_name + "-badcfg"
    fut = admin.create_topics(
        [NewTopic(bad_cfg, num_partitions=1, config={"no.such.config": "1"})], request_timeout=T_S
    )[bad_cfg]
    assert error_code(fut) == KafkaError.INVALID_CONFIG

    bad_value = topic_name + "-badvalue"
    fut = admin.create_topics(
        [NewTopic(bad_value, num_partitions=1, config={"retention.ms": "not-a-number"})], request_timeout=T_S
    )[bad_value]
    assert error_code(fut) == KafkaError.INVALID_CONFIG

    bad_parts = topic_name + "-badparts"
    fut = admin.create_topics([NewTopic(bad_parts, num_partitions=0)], request_timeout=T_S)[bad_parts]
    assert error_code(fut) == KafkaError.INVALID_PARTITIONS

    bad_rf = topic_name + "-badrf"
    fut = admin.create_topics([NewTopic(bad_rf, num_partitions=1, replication_factor=3)], request_timeout=T_S)[bad_rf]
    assert error_code(fut) == KafkaError.INVALID_REPLICATION_FACTOR

    names = topic_names(admin)
    for n in (bad_cfg, bad_value, bad_parts, bad_rf):
        assert n not in names, f"failed create left topic {n} behind"


def test_create_topic_validate_only_creates_nothing(admin, topic_name):
    admin.create_topics(
        [NewTopic(topic_name, num_partitions=2)], validate_only=True, request_timeout=T_S
    )[topic_name].result(timeout=T_S)
    assert topic_name not in topic_names(admin)


def test_delete_unknown_topic_is_unknown_topic(admin, topic_name):
    fut = admin.delete_topics([topic_name + "-missing"], request_timeout=T_S)[topic_name + "-missing"]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_lists_every_topic_config_with_defaults(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    cfg = describe_topic_config(admin, topic_name)
    for name in ("retention.ms", "retention.bytes", "segment.bytes", "cleanup.policy", "max.message.bytes",
                 "message.timestamp.type", "min.insync.replicas"):  # fmt: skip
        assert name in cfg, f"{name} missing from DescribeConfigs ({sorted(cfg)})"
        assert cfg[name].is_default, f"{name} should be a default on a fresh topic"
        assert cfg[name].source in (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value)
    assert cfg["cleanup.policy"].value == "delete"


def test_describe_broker_configs(admin, shared_broker):
    desc = admin.describe_cluster(request_timeout=T_S).result(timeout=T_S)
    node_id = desc.nodes[0].id
    res = ConfigResource(ConfigResource.Type.BROKER, str(node_id))
    cfg = admin.describe_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
    assert cfg, "broker DescribeConfigs returned nothing"
    assert "num.partitions" in cfg, sorted(cfg)


def test_incremental_alter_configs_set_and_delete(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
    cfg = describe_topic_config(admin, topic_name)
    assert cfg["retention.ms"].value == "7200000"
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    admin.incremental_alter_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
    cfg = describe_topic_config(admin, topic_name)
    assert cfg["retention.ms"].is_default
    assert cfg["cleanup.policy"].value == "compact", "deleting one config must keep the others"

    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    assert error_code(admin.incremental_alter_configs([bad], request_timeout=T_S)[bad]) == KafkaError.INVALID_CONFIG


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"max.message.bytes": "2000000"})
    admin.alter_configs([res], request_timeout=T_S)[res].result(timeout=T_S)
    cfg = describe_topic_config(admin, topic_name)
    assert cfg["max.message.bytes"].value == "2000000"
    assert not cfg["max.message.bytes"].is_default


def test_create_partitions_and_use_them(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=2)
    admin.create_partitions([NewPartitions(topic_name, 5)], request_timeout=T_S)[topic_name].result(timeout=T_S)
    md = wait_for(
        lambda: len(admin.list_topics(topic=topic_name, timeout=T_S).topics[topic_name].partitions) == 5,
        "5 partitions in metadata",
    )
    assert md
    # Fewer partitions than now is INVALID_PARTITIONS.
    fut = admin.create_partitions([NewPartitions(topic_name, 3)], request_timeout=T_S)[topic_name]
    assert error_code(fut) == KafkaError.INVALID_PARTITIONS

    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "topic.metadata.refresh.interval.ms": 1000})
    delivered = []
    p.produce(topic_name, value=b"to-new-partition", partition=4, on_delivery=lambda e, m: delivered.append((e, m)))
    assert p.flush(T_S) == 0
    err, msg = delivered[0]
    assert err is None and msg.partition() == 4 and msg.offset() == 0


def test_describe_cluster(admin, shared_broker):
    desc = admin.describe_cluster(request_timeout=T_S).result(timeout=T_S)
    assert desc.cluster_id, "cluster id must be set"
    assert len(desc.nodes) == 1
    node = desc.nodes[0]
    assert (node.host, node.port) == ("127.0.0.1", shared_broker.port)
    assert desc.controller is not None and desc.controller.id == node.id


def test_delete_records_moves_log_start(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=PARTITIONS)
    acked = confluent_produce(shared_broker.bootstrap, topic_name, "none", n=2000)
    ends: dict[int, int] = {}
    for part, off in acked.values():
        ends[part] = max(ends.get(part, -1), off + 1)
    cut = {p: end // 2 for p, end in ends.items()}
    res = admin.delete_records(
        [TopicPartition(topic_name, p, off) for p, off in cut.items()], request_timeout=T_S
    )
    for tp, fut in res.items():
        assert fut.result(timeout=T_S).low_watermark == cut[tp.partition]

    earliest = admin.list_offsets(
        {TopicPartition(topic_name, p): OffsetSpec.earliest() for p in ends}, request_timeout=T_S
    )
    for tp, fut in earliest.items():
        assert fut.result(timeout=T_S).offset == cut[tp.partition]

    # Consuming from the beginning now starts at the cut; what is left is intact and in order.
    remaining = sum(ends[p] - cut[p] for p in ends)
    consumed = confluent_consume(shared_broker.bootstrap, topic_name, PARTITIONS, remaining)
    kept = {seq: (p, o) for seq, (p, o) in acked.items() if o >= cut[p]}
    assert len(consumed) == remaining
    for m in consumed:
        seq = int(m.headers["seq"])
        assert kept[seq] == (m.partition, m.offset)

    # Deleting beyond the high watermark is OFFSET_OUT_OF_RANGE.
    p0 = next(iter(ends))
    res = admin.delete_records([TopicPartition(topic_name, p0, ends[p0] + 10)], request_timeout=T_S)
    (fut,) = res.values()
    assert error_code(fut) == KafkaError.OFFSET_OUT_OF_RANGE


def test_list_offsets_earliest_latest_timestamp(admin, shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=1)
    before_ms = int(time.time() * 1000) - 1
    acked = confluent_produce(shared_broker.bootstrap, topic_name, "none", n=100, extra={"linger.ms": 0})
    tp = TopicPartition(topic_name, 0)

    def offset(spec):
        return admin.list_offsets({tp: spec}, request_timeout=T_S)[tp].result(timeout=T_S).offset

    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == 100
    assert offset(OffsetSpec.for_timestamp(before_ms)) == 0
    assert offset(OffsetSpec.for_timestamp(int(time.time() * 1000) + 3_600_000)) == -1
    max_ts = offset(OffsetSpec.max_timestamp())
    assert 0 <= max_ts < 100
    assert len(acked) == 100


def test_produce_and_consume_after_admin_roundtrip(admin, shared_broker, topic_name):
    """A topic deleted and re-created under the same name starts empty at offset 0."""
    create_topic(shared_broker.bootstrap, topic_name)
    confluent_produce(shared_broker.bootstrap, topic_name, "gzip", n=500)
    admin.delete_topics([topic_name], request_timeout=T_S)[topic_name].result(timeout=T_S)
    wait_for(lambda: topic_name not in topic_names(admin), "the topic to disappear")
    create_topic(shared_broker.bootstrap, topic_name)
    acked = confluent_produce(shared_broker.bootstrap, topic_name, "gzip", n=500)
    consumed = confluent_consume(shared_broker.bootstrap, topic_name, PARTITIONS, 500)
    verify_round_trip(consumed, "gzip", n=500, acked=acked)


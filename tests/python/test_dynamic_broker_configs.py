"""Dynamic broker configs through confluent-kafka's AdminClient, as `kafka-configs.sh --entity-type
brokers` uses them: cluster-wide (resource name "") and per-broker ("<node id>") values, their
sources and synonyms in DescribeConfigs, Kafka's refusal of read-only configs and bad values,
validate_only, the values applied at once (topic defaults, the connection limit) and kept across
a restart."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

import wire
from dataset import create_topic

T_S = 30
NODE = "1"  # the broker's default node.id


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(admin: AdminClient, name: str, ops: list[tuple[str, str | None, AlterConfigOpType]],
          validate_only: bool = False) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only,
                                    request_timeout=T_S)[res].result(timeout=T_S)


def alter_error(admin: AdminClient, name: str, key: str, value: str) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        alter(admin, name, [(key, value, AlterConfigOpType.SET)])
    return e.value.args[0]


def describe(admin: AdminClient, rtype, name: str) -> dict:
    res = ConfigResource(rtype, name)
    fut = admin.describe_configs([res], request_timeout=T_S)[res]
    return fut.result(timeout=T_S)


def test_per_broker_value_takes_effect_at_once_and_delete_restores_the_default(broker, topic_name):
    # (librdkafka refuses the cluster-default resource name ""; DynamicBrokerConfigTest in
    # tests/java covers that level with the Java Admin.)
    admin = admin_for(broker)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    alter(admin, NODE, [("log.retention.ms", "3600000", AlterConfigOpType.SET)])

    cfg = describe(admin, ConfigResource.Type.BROKER, NODE)
    entry = cfg["log.retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert cfg["num.partitions"].is_read_only

    # An existing topic without its own retention.ms follows the new default at once.
    topic = describe(admin, ConfigResource.Type.TOPIC, topic_name)["retention.ms"]
    assert (topic.value, topic.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    alter(admin, NODE, [("log.retention.ms", None, AlterConfigOpType.DELETE)])
    entry = describe(admin, ConfigResource.Type.BROKER, NODE)["log.retention.ms"]
    assert (entry.value, entry.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    topic = describe(admin, ConfigResource.Type.TOPIC, topic_name)["retention.ms"]
    assert (topic.value, topic.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)


def test_topic_synonyms_name_the_broker_config_below_the_topic_override(broker, topic_name):
    # (The full per-level synonym order is checked with the Java Admin in DynamicBrokerConfigTest:
    # confluent-kafka keeps synonyms in a dict by name.)
    admin = admin_for(broker)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    alter(admin, NODE, [("log.segment.bytes", "2097152", AlterConfigOpType.SET)])
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    cfg = admin.describe_configs([res],
                                 request_timeout=T_S)[res].result(timeout=T_S)
    entry = cfg["segment.bytes"]
    assert (entry.value, entry.source) == ("2097152", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert "log.segment.bytes" in entry.synonyms, entry.synonyms


def test_read_only_configs_and_bad_values_are_refused_as_kafka_does(broker):
    admin = admin_for(broker)
    err = alter_error(admin, NODE, "num.partitions", "3")
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in err.str()
    err = alter_error(admin, NODE, "log.retention.ms", "soon")
    assert err.code() == KafkaError.INVALID_REQUEST, err
    assert "log.retention.ms" in err.str()
    err = alter_error(admin, NODE, "log.cleanup.policy", "shred")
    assert err.code() == KafkaError.INVALID_REQUEST, err
    entry = describe(admin, ConfigResource.Type.BROKER, NODE)["log.retention.ms"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value, "a refused change must store nothing"


def test_validate_only_changes_nothing(broker):
    admin = admin_for(broker)
    alter(admin, NODE, [("message.max.bytes", "2000000", AlterConfigOpType.SET)], validate_only=True)
    entry = describe(admin, ConfigResource.Type.BROKER, NODE)["message.max.bytes"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value
    assert entry.value == "1048588"


def test_values_persist_across_a_restart(broker, topic_name):
    admin = admin_for(broker)
    alter(admin, NODE, [("log.retention.bytes", "123456789", AlterConfigOpType.SET),
                      ("log.cleanup.policy", "compact", AlterConfigOpType.SET)])
    alter(admin, NODE, [("log.roll.ms", "60000", AlterConfigOpType.SET)])
    stored = json.loads((broker.data_dir / "dynamic-broker-configs.json").read_text())
    assert stored["broker"]["log.retention.bytes"] == "123456789"
    broker.restart()
    admin = admin_for(broker)
    cfg = describe(admin, ConfigResource.Type.BROKER, NODE)
    assert (cfg["log.retention.bytes"].value, cfg["log.retention.bytes"].source) == (
        "123456789", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (cfg["log.roll.ms"].value, cfg["log.roll.ms"].source) == (
        "60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # A topic created after the restart gets the stored defaults.
    create_topic(broker.bootstrap, topic_name, partitions=1)
    topic = describe(admin, ConfigResource.Type.TOPIC, topic_name)
    assert topic["retention.bytes"].value == "123456789"
    assert topic["cleanup.policy"].value == "compact"
    assert topic["segment.ms"].value == "60000"


def test_max_connections_applies_to_new_connections_at_once(broker):
    admin = admin_for(broker)
    describe(admin, ConfigResource.Type.BROKER, NODE)  # the admin's connections are open now
    probe = wire.connect(broker.port)
    assert wire.api_versions(probe).error_code == 0
    probe.close()
    alter(admin, NODE, [("max.connections", "0", AlterConfigOpType.SET)])
    refused = wire.connect(broker.port)
    assert wire.wait_closed(refused, 5.0), "a new connection past max.connections must be closed"
    refused.close()
    entry = describe(admin, ConfigResource.Type.BROKER, NODE)["max.connections"]
    assert (entry.value, entry.source) == ("0", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

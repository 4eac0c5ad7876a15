"""confluent-kafka (PyPI, current librdkafka): 10,000 keyed messages with headers across several
partitions, every compression codec; content, per-partition order and offsets checked."""

import pytest

from clients import confluent_consume, confluent_produce
from dataset import CODECS, MESSAGES, PARTITIONS, create_topic, verify_round_trip


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(shared_broker, topic_name, codec):
    create_topic(shared_broker.bootstrap, topic_name)
    acked = confluent_produce(shared_broker.bootstrap, topic_name, codec)
    consumed = confluent_consume(shared_broker.bootstrap, topic_name, PARTITIONS, MESSAGES)
    verify_round_trip(consumed, codec, acked=acked)


def test_confluent_acks_0_and_1(shared_broker, topic_name):
    """acks=1 acknowledges with offsets; acks=0 is fire-and-forget but still lands."""
    create_topic(shared_broker.bootstrap, topic_name)
    acked = confluent_produce(shared_broker.bootstrap, topic_name, "lz4", n=2000, extra={"acks": "1"})
    consumed = confluent_consume(shared_broker.bootstrap, topic_name, PARTITIONS, 2000)
    verify_round_trip(consumed, "lz4", n=2000, acked=acked)

    other = topic_name + "-acks0"
    create_topic(shared_broker.bootstrap, other)
    confluent_produce(shared_broker.bootstrap, other, "none", n=2000, extra={"acks": "0"})
    consumed = confluent_consume(shared_broker.bootstrap, other, PARTITIONS, 2000)
    verify_round_trip(consumed, "none", n=2000)

"""kafka-python (PyPI, an independent pure-Python implementation): 10,000 keyed messages with
headers across several partitions, every compression codec; content, order and offsets checked."""

import pytest

from clients import kafka_python_consume, kafka_python_produce
from dataset import CODECS, MESSAGES, PARTITIONS, create_topic, verify_round_trip


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(shared_broker, topic_name, codec):
    create_topic(shared_broker.bootstrap, topic_name)
    acked = kafka_python_produce(shared_broker.bootstrap, topic_name, codec)
    consumed = kafka_python_consume(shared_broker.bootstrap, topic_name, PARTITIONS, MESSAGES)
    verify_round_trip(consumed, codec, acked=acked)

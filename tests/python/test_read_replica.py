"""KIP-392 with confluent-kafka (librdkafka): `--broker-rack` is what Metadata / DescribeCluster
show, and a consumer with `client.rack` (Fetch v11+ with `rack_id`) reads everything from a
broker with `--replica-selector rack-aware`. One broker leads alone, so it names no other
replica; the follower side is tested with two brokers in crates/broker/tests/read_replica.rs."""

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from dataset import create_topic

N = 500
TIMEOUT_S = 30


def test_the_rack_is_shown_and_a_racked_consumer_reads_everything(broker_factory, topic_name):
    b = broker_factory(extra_args=["--broker-rack", "r1", "--replica-selector", "rack-aware"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    cluster = admin.describe_cluster().result(timeout=10)
    assert [n.rack for n in cluster.nodes] == ["r1"]

    create_topic(b.bootstrap, topic_name, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(N):
        p.produce(topic_name, key=str(i).encode(), value=b"v")
    assert p.flush(10) == 0

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": f"rack-{topic_name}",
            "client.rack": "r2",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        keys = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(keys) < N and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consume error: {m.error()}")
                if m.error() is None:
                    keys.append(int(m.key()))
        assert keys == list(range(N))
    finally:
        c.close()

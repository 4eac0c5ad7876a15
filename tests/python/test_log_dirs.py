"""DescribeLogDirs (35) through kafka-python's `KafkaAdminClient.describe_log_dirs`: the one log
dir (the data dir) with each partition's size on disk. (confluent-kafka's AdminClient has no
describe_log_dirs.)"""

from __future__ import annotations

from kafka import KafkaAdminClient, KafkaProducer

from dataset import create_topic

T_S = 10


def test_kafka_python_describe_log_dirs(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for i in range(50):
            p.send(topic_name, value=b"v%d" % i, partition=1)
        p.flush(timeout=T_S)
    finally:
        p.close(timeout=T_S)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=T_S * 1000)
    try:
        everything = admin.describe_log_dirs()
        asked = admin.describe_log_dirs({topic_name: [1]})
        missing = admin.describe_log_dirs({topic_name + "-missing": [0]})
    finally:
        admin.close()

    def sizes(answer):
        """{(topic, partition): size} of the only broker's only log dir."""
        (broker,) = answer
        (d,) = broker["log_dirs"]
        assert d["error_code"] == 0 and d["log_dir"].startswith("/"), d
        assert 0 < d["usable_bytes"] <= d["total_bytes"], d
        return {(t["name"], q["partition_index"]): q["partition_size"]
                for t in d["topics"] for q in t["partitions"]}

    s = sizes(everything)
    assert s[(topic_name, 0)] == 0, s
    assert s[(topic_name, 1)] > 50 * 2, s
    assert sizes(asked) == {(topic_name, 1): s[(topic_name, 1)]}
    assert sizes(missing) == {}

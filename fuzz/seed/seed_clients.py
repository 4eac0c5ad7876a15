"""The client workload capture.py drives through its proxy: confluent-kafka (librdkafka) and
kafka-python, each bounded in messages and time."""

import time

MESSAGES = 40
TIMEOUT_S = 30
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TIERED_SEGMENT_BYTES = 16384
TIERED_MESSAGES = 1000


def message(i: int) -> tuple[bytes, bytes]:
    return f"key-{i}".encode(), (f"value-{i}-".encode() * (1 + i % 7))


def confluent_workload(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic("fz-plain", num_partitions=3, replication_factor=1),
        NewTopic("fz-tiered", num_partitions=1, replication_factor=1, config={
            "remote.storage.enable": "true",
            "segment.bytes": str(TIERED_SEGMENT_BYTES),
            "local.retention.bytes": "0",
        }),
    ]
    for f in admin.create_topics(topics).values():
        f.result(timeout=TIMEOUT_S)
    for f in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "fz-plain")]).values():
        f.result(timeout=TIMEOUT_S)
    admin.list_topics(timeout=TIMEOUT_S)

    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(MESSAGES):
            k, v = message(i)
            p.produce("fz-plain", key=k, value=v, headers=[("h", b"x")] if i % 3 == 0 else None)
        assert p.flush(TIMEOUT_S) == 0, f"{codec}: undelivered"
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(TIERED_MESSAGES):
        k, v = message(i)
        p.produce("fz-tiered", key=k, value=v)
        if i % 50 == 49:
            p.flush(TIMEOUT_S)  # small batches, so segments of TIERED_SEGMENT_BYTES roll
        if i < MESSAGES:
            p.produce("fz-plain", key=k, value=v)
    assert p.flush(TIMEOUT_S) == 0, "idempotent: undelivered"

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fz-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["fz-plain"])
    got, deadline = 0, time.monotonic() + TIMEOUT_S
    while got < MESSAGES and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.commit(asynchronous=False)
    c.close()
    assert got >= MESSAGES, f"consumed {got}"


def kafka_python_workload(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    admin.create_topics([NewTopic("fz-kp", num_partitions=2, replication_factor=1)])
    admin.describe_topics(["fz-kp"])
    admin.close()
    for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
        for i in range(MESSAGES):
            k, v = message(i)
            p.send("fz-kp", key=k, value=v, headers=[("h", b"y")] if i % 4 == 0 else None)
        p.flush(timeout=TIMEOUT_S)
        p.close(timeout=TIMEOUT_S)
    c = KafkaConsumer("fz-kp", bootstrap_servers=bootstrap, group_id="fz-kp-group",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=TIMEOUT_S * 1000)
    got, deadline = 0, time.monotonic() + TIMEOUT_S
    while got < MESSAGES and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got += len(records)
    c.commit()
    c.close()
    assert got >= MESSAGES, f"kafka-python consumed {got}"

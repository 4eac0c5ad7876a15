"""The harness itself and the broker's most basic contract: it starts, negotiates versions,
advertises the address it was told to, and stops cleanly on SIGTERM."""

import wire

# APIs issue 3 requires, with the version ranges a Kafka 4.x broker serves (some maxima capped,
# see KAFKA-NOTES.md); the broker must advertise at least these minima.
REQUIRED_APIS = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    23: "OffsetForLeaderEpoch",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    37: "CreatePartitions",
    44: "IncrementalAlterConfigs",
    60: "DescribeCluster",
}


def test_api_versions_v0_and_v3_list_required_apis(broker):
    with wire.connect(broker.port) as sock:
        v0 = wire.api_versions(sock)
        v3 = wire.api_versions_v3(sock)
    assert v0.error_code == 0
    assert v3.error_code == 0
    assert v0.api_keys == v3.api_keys
    missing = {k: n for k, n in REQUIRED_APIS.items() if k not in v3.api_keys}
    assert not missing, f"ApiVersions does not advertise {missing}"
    # librdkafka disables compression unless Produce is advertised from v0 (KAFKA-18659).
    assert v3.api_keys[0][0] == 0
    assert v3.api_keys[18] == (0, 4) or v3.api_keys[18][1] >= 3


def test_metadata_advertises_the_listener(broker):
    with wire.connect(broker.port) as sock:
        md = wire.metadata_v1(sock, topics=None)
    assert len(md["brokers"]) == 1
    _node, host, port = md["brokers"][0]
    assert (host, port) == ("127.0.0.1", broker.port)


def test_sigterm_exits_cleanly_and_restart_serves(broker):
    assert broker.stop() == 0, broker.log_tail()
    broker.start()
    with wire.connect(broker.port) as sock:
        assert wire.api_versions(sock).error_code == 0


def test_sigkill_then_restart_serves(broker):
    broker.kill()
    broker.start()
    with wire.connect(broker.port) as sock:
        assert wire.api_versions(sock).error_code == 0

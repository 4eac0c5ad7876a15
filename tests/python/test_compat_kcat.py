"""kcat (Debian package, an older librdkafka): 10,000 keyed messages across several partitions with
every compression codec, produced and consumed by kcat itself; content, order and offsets checked.
kcat's producer can only attach the same headers to every message (-H), so the headers are static
and each message's sequence number is read from its value."""

import shutil
import subprocess

import pytest

from dataset import CODECS, MESSAGES, PARTITIONS, Msg, create_topic, key_of, value_of, verify_round_trip

KCAT_TIMEOUT_S = 180


def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    assert path, "kcat is not installed (.ci/run installs the Debian package)"
    return path


def kcat_produce(bootstrap: str, topic: str, codec: str, n: int) -> None:
    lines = b"".join(key_of(i) + b"\t" + value_of(i, codec) + b"\n" for i in range(n))
    cmd = [kcat(), "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-z", codec,
           "-H", f"codec={codec}", "-H", "tool=kcat",
           "-X", "linger.ms=5", "-X", "acks=all"]  # fmt: skip
    out = subprocess.run(cmd, input=lines, capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
    assert out.returncode == 0, f"kcat -P exited {out.returncode}: {out.stderr.decode(errors='replace')[-2000:]}"
    assert b"Delivery failed" not in out.stderr, out.stderr.decode(errors="replace")[-2000:]


def kcat_consume(bootstrap: str, topic: str, n: int) -> list[Msg]:
    cmd = [kcat(), "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
           "-f", "%p\t%o\t%k\t%s\t%h\n"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
    assert out.returncode == 0, f"kcat -C exited {out.returncode}: {out.stderr.decode(errors='replace')[-2000:]}"
    msgs = []
    for line in out.stdout.splitlines():
        p, o, k, v, h = line.split(b"\t")
        headers = dict(kv.split(b"=", 1) for kv in h.split(b",")) if h else {}
        msgs.append(Msg(int(p), int(o), k, v, {hk.decode(): hv for hk, hv in headers.items()}))
    return msgs


def seq_from_value(m: Msg) -> int:
    return int(m.value.split(b"-")[1])


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(shared_broker, topic_name, codec):
    create_topic(shared_broker.bootstrap, topic_name)
    kcat_produce(shared_broker.bootstrap, topic_name, codec, MESSAGES)
    consumed = kcat_consume(shared_broker.bootstrap, topic_name, MESSAGES)
    verify_round_trip(
        consumed,
        codec,
        seq_of=seq_from_value,
        expected_headers=lambda _seq: {"codec": codec.encode(), "tool": b"kcat"},
    )


def test_kcat_metadata_lists_broker_and_topic(shared_broker, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=PARTITIONS)
    out = subprocess.run([kcat(), "-L", "-b", shared_broker.bootstrap, "-t", topic_name],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"127.0.0.1:{shared_broker.port}" in out.stdout
    assert f'topic "{topic_name}" with {PARTITIONS} partitions' in out.stdout

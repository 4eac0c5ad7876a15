"""The controller listener over mutual TLS (`--controller-listener-security-protocol SSL`): three
real voters whose Raft RPCs, registrations, heartbeats and forwarded controller events travel
only over TLS, each presenting its broker certificate and checking the peer's against --ssl-ca.
The quorum forms, the brokers register, an RF=3 topic is created and replicated (acks=all), and
kill -9 of the active controller elects another one. The controller port refuses plaintext (a
plaintext frame is answered with a refusal) and a TLS client without a certificate; a
broker-only node configured PLAINTEXT cannot join SSL voters and says why in its log, as the
voters do; nor can one configured SSL join PLAINTEXT voters.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness import REPO_ROOT, free_port
from test_cluster import admin, cluster_view, create, placement, wait_for

TOPIC = "ctrl-tls"
PARTITIONS = 3
MESSAGES = 200


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ctrlcerts")
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(d), "client"], check=True,
                   capture_output=True, timeout=60)
    return d


def tls_args(certs: Path, protocol: str = "SSL") -> list[str]:
    return ["--controller-listener-security-protocol", protocol,
            "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
            "--ssl-ca", str(certs / "ca.pem")]


def start_voters(broker_factory, certs: Path, protocol: str = "SSL"):
    """Three voters whose controller listener speaks `protocol` (PLAINTEXT Kafka listeners);
    returns the brokers, each one's controller port and the voters list."""
    brokers = [broker_factory(start=False) for _ in range(3)]
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    for i, b in enumerate(brokers):
        b.extra_args += [
            "--node-id", str(i + 1),
            "--controller-quorum-voters", voters,
            "--broker-session-timeout-ms", "3000",
            "--broker-heartbeat-interval-ms", "500",
            "--offsets-topic-partitions", "3",
            *tls_args(certs, protocol),
        ]
        b.env["RUST_LOG"] = os.environ.get("SF_RUST_LOG", "info,openraft=error")
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda b: b.start(timeout_s=60), brokers))
    return brokers, ports, voters


def formed(brokers):
    views = [cluster_view(b) for b in brokers]
    ok = all(v[0] == [1, 2, 3][:len(v[0])] and len(v[0]) == len(brokers) and v[1] == views[0][1] and v[1] > 0
             for v in views)
    return views[0][1] if ok else None


def plaintext_frame_answer(port: int) -> bytes:
    """Send one plaintext quorum frame (a forwarded Tick) and read what comes back."""
    body = json.dumps({"Forward": "Tick"}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", len(body)) + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def test_an_ssl_controller_listener_forms_the_quorum_replicates_and_elects_again(broker_factory, certs):
    brokers, ports, _ = start_voters(broker_factory, certs)
    controller = wait_for("the quorum to form and the brokers to register", lambda: formed(brokers))

    # The controller port speaks TLS only: a plaintext frame gets a refusal, not an answer.
    answer = plaintext_frame_answer(ports[0])
    length, = struct.unpack_from(">I", answer)
    refusal = json.loads(answer[4:4 + length])
    assert "Refused" in refusal and "speaks SSL" in refusal["Refused"], refusal
    # TLS without a client certificate is refused (mutual TLS); with one it completes.
    anonymous = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, OSError)):
        with anonymous.wrap_socket(socket.create_connection(("127.0.0.1", ports[1]), timeout=10),
                                   server_hostname="127.0.0.1") as s:
            s.sendall(b"\0\0\0\2{}")
            assert s.recv(1) != b"", "a client without a certificate was served"
    mutual = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    mutual.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    with mutual.wrap_socket(socket.create_connection(("127.0.0.1", ports[1]), timeout=10),
                            server_hostname="127.0.0.1") as s:
        assert s.version() in ("TLSv1.2", "TLSv1.3")
    wait_for("the refusals in the voters' logs", lambda: any(
        "plaintext peer reached this SSL controller listener" in b.log_text() for b in brokers))

    # A replicated topic, written acks=all and read back.
    create(brokers[0], TOPIC, PARTITIONS, 3)
    wait_for("the full ISR", lambda: (p := placement(brokers[0], TOPIC))
             and all(sorted(v[2]) == [1, 2, 3] for v in p.values()))
    producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all"})
    for i in range(MESSAGES):
        producer.produce(TOPIC, value=f"m{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": brokers[1].bootstrap, "group.id": "ctrl-tls",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < MESSAGES and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.add(m.value())
    consumer.close()
    assert len(seen) == MESSAGES

    # kill -9 the active controller: another voter is elected over TLS and serves admin requests.
    killed = brokers[controller - 1]
    killed.kill()
    rest = [b for b in brokers if b is not killed]
    new = wait_for("another controller", lambda: (c := cluster_view(rest[0])[1]) > 0 and c != controller and c)
    assert all(cluster_view(b)[1] == new for b in rest)
    create(rest[0], TOPIC + "-after", 1, 2)
    wait_for("the new topic placed", lambda: placement(rest[0], TOPIC + "-after"))
    # The only TLS refusal is the test's own client without a certificate (the voters trust
    # each other's).
    refused = [line for b in brokers for line in b.log_text().splitlines() if "TLS handshake from" in line]
    assert refused and all("peer sent no certificates" in line for line in refused), refused


def test_a_plaintext_node_cannot_join_ssl_voters_and_says_why(broker_factory, certs):
    brokers, _, voters = start_voters(broker_factory, certs)
    wait_for("the quorum to form", lambda: formed(brokers))
    plain = broker_factory(start=False)
    plain.extra_args += [
        "--node-id", "4", "--controller-quorum-voters", voters,
        "--process-roles", "broker", "--controller-listen", f"127.0.0.1:{free_port()}",
    ]
    plain.env["RUST_LOG"] = "info,openraft=error"
    with pytest.raises((TimeoutError, RuntimeError)):
        plain.start(timeout_s=10)
    try:
        wait_for("the plaintext node's error", lambda: "speaks SSL" in plain.log_text(), timeout_s=20)
        assert "controller listener security failure" in plain.log_text()
        assert "ERROR" in plain.log_text()
        wait_for("the voters' error", lambda: any(
            "plaintext peer reached this SSL controller listener" in b.log_text() for b in brokers))
        assert plain.is_running(), "a mismatch is logged and retried, not a crash"
        assert "panicked" not in plain.log_text()
        # It never became a member: the voters know three brokers.
        assert cluster_view(brokers[0])[0] == [1, 2, 3]
    finally:
        plain.stop()


def test_an_ssl_node_cannot_join_plaintext_voters_and_says_why(broker_factory, certs):
    brokers, _, voters = start_voters(broker_factory, certs, protocol="PLAINTEXT")
    wait_for("the quorum to form", lambda: formed(brokers))
    tls = broker_factory(start=False)
    tls.extra_args += [
        "--node-id", "4", "--controller-quorum-voters", voters,
        "--process-roles", "broker", "--controller-listen", f"127.0.0.1:{free_port()}",
        *tls_args(certs),
    ]
    tls.env["RUST_LOG"] = "info,openraft=error"
    with pytest.raises((TimeoutError, RuntimeError)):
        tls.start(timeout_s=10)
    try:
        wait_for("the SSL node's error", lambda: "its controller listener security protocol is not SSL"
                 in tls.log_text(), timeout_s=20)
        assert "controller listener security failure" in tls.log_text()
        wait_for("the voters' error", lambda: any(
            "a peer opened a TLS handshake on this PLAINTEXT controller listener" in b.log_text()
            for b in brokers))
        assert tls.is_running() and "panicked" not in tls.log_text()
        assert cluster_view(brokers[0])[0] == [1, 2, 3]
    finally:
        tls.stop()

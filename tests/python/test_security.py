"""Listeners with security protocols through real clients: TLS, mutual TLS, SASL PLAIN and
SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL (confluent-kafka, kafka-python, kcat), users
managed with `streamforge users`, wrong passwords, re-authentication (KIP-368), and bad input
(garbage TLS, a silent ClientHello, a 100 MB SASL token, a wrong SCRAM nonce or proof, a request
before authentication) while a bystander client keeps being served.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kafka import KafkaConsumer, KafkaProducer

import wire
from harness import REPO_ROOT, BrokerProcess, find_binary, free_port

PASSWORD = "alice-secret"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(d), "alice"], check=True,
                   capture_output=True, timeout=60)
    return d


class SecureBroker:
    def __init__(self, proc: BrokerProcess, ports: dict[str, int]):
        self.proc = proc
        self.ports = ports

    def addr(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


def start_secure(tmp_path: Path, certs: Path, extra: list[str] | None = None,
                 client_auth: str = "requested") -> SecureBroker:
    proc = BrokerProcess(tmp_path, env={"RUST_LOG": "info,streamforge_broker::security=debug"})
    ports = {"PLAINTEXT": proc.port, "SSL": free_port(), "SASL_PLAINTEXT": free_port(),
             "SASL_SSL": free_port()}
    listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    proc.extra_args = [
        "--listeners", listeners,
        "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
        "--ssl-ca", str(certs / "ca.pem"), "--ssl-client-auth", client_auth,
        "--sasl-mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--ssl-handshake-timeout-ms", "2000", "--sasl-handshake-timeout-ms", "3000",
    ] + (extra or [])
    proc.start()
    subprocess.run([str(find_binary()), "users", "-b", proc.bootstrap, "create", "alice",
                    "--password", PASSWORD], check=True, capture_output=True, timeout=TIMEOUT_S)
    return SecureBroker(proc, ports)


@pytest.fixture(scope="module")
def secure(tmp_path_factory, certs):
    b = start_secure(tmp_path_factory.mktemp("secure"), certs)
    yield b
    b.proc.stop()


def client_conf(b: SecureBroker, certs: Path, protocol: str, mechanism: str | None = None,
                password: str = PASSWORD, cert: bool = False) -> dict:
    conf = {"bootstrap.servers": b.addr(protocol), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    if cert:
        conf["ssl.certificate.location"] = str(certs / "alice.pem")
        conf["ssl.key.location"] = str(certs / "alice.key")
    if mechanism:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": "alice",
                     "sasl.password": password})
    return conf


def round_trip_confluent(conf: dict, n: int = 20) -> list[bytes]:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(TIMEOUT_S) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.time() + TIMEOUT_S
    while len(got) < n and time.time() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


@pytest.mark.parametrize("protocol,mechanism,cert", [
    ("SSL", None, False),
    ("SSL", None, True),
    ("SASL_PLAINTEXT", "PLAIN", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", False),
    ("SASL_SSL", "PLAIN", False),
    ("SASL_SSL", "SCRAM-SHA-256", False),
    ("SASL_SSL", "SCRAM-SHA-512", False),
])
def test_confluent_kafka_round_trips(secure, certs, protocol, mechanism, cert):
    got = round_trip_confluent(client_conf(secure, certs, protocol, mechanism, cert=cert))
    assert got == [f"v{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_over_sasl_ssl(secure, certs, mechanism):
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    common = dict(bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
                  ssl_context=ctx, sasl_mechanism=mechanism, sasl_plain_username="alice",
                  sasl_plain_password=PASSWORD)
    p = KafkaProducer(**common)
    for i in range(5):
        p.send(topic, f"k{i}".encode()).get(timeout=TIMEOUT_S)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    got = [m.value for m in c][:5]
    c.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_kcat_over_ssl_and_sasl_ssl(secure, certs):
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    ssl_args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
    subprocess.run(["kcat", "-b", secure.addr("SSL"), *ssl_args, "-P", "-t", topic],
                   input=b"one\ntwo\n", check=True, timeout=TIMEOUT_S)
    sasl_args = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
                 "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
                 "-X", f"sasl.password={PASSWORD}"]
    out = subprocess.run(["kcat", "-b", secure.addr("SASL_SSL"), *sasl_args, "-C", "-t", topic,
                          "-c", "2", "-e"], capture_output=True, check=True, timeout=TIMEOUT_S)
    assert out.stdout.split() == [b"one", b"two"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused(secure, certs, mechanism):
    errors: list[str] = []
    conf = client_conf(secure, certs, "SASL_SSL", mechanism, password="wrong")
    conf["error_cb"] = lambda e: errors.append(str(e))
    p = Producer(conf)
    with pytest.raises(KafkaException):
        p.list_topics(timeout=5)
    p.poll(1)
    assert any("Authentication failed" in e or "authentication" in e.lower() for e in errors), errors
    assert "SASL authentication failed, closing connection" in secure.proc.log_path.read_text()


def test_users_are_listed_and_deleted(secure):
    bin_ = str(find_binary())
    run = lambda *a: subprocess.run([bin_, "users", "-b", secure.proc.bootstrap, *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run("create", "bob", "--password", "bob-pw", "--mechanisms", "SCRAM-SHA-256").returncode == 0
    listed = run("list").stdout
    assert "alice" in listed and "bob" in listed and "SCRAM-SHA-256(8192)" in listed
    assert run("delete", "bob").returncode == 0
    assert "bob" not in run("list").stdout
    assert run("delete", "bob").returncode != 0
    low = run("create", "carol", "--password", "x", "--iterations", "100")
    assert low.returncode != 0 and "iterations" in low.stderr
    stored = (secure.proc.data_dir / "scram-credentials.json").read_text()
    assert PASSWORD not in stored and "alice" in stored


def test_mutual_tls_required_refuses_clients_without_a_certificate(tmp_path, certs):
    b = start_secure(tmp_path, certs, client_auth="required")
    try:
        ok = round_trip_confluent(client_conf(b, certs, "SSL", cert=True), n=3)
        assert len(ok) == 3
        p = Producer(client_conf(b, certs, "SSL"))
        with pytest.raises(KafkaException):
            p.list_topics(timeout=5)
        assert "TLS handshake failed" in b.proc.log_path.read_text()
    finally:
        b.proc.stop()


def test_reauthentication_happens_on_a_long_lived_connection(tmp_path, certs):
    b = start_secure(tmp_path, certs, extra=["--connections-max-reauth-ms", "2000"])
    try:
        p = Producer(client_conf(b, certs, "SASL_SSL", "SCRAM-SHA-256"))
        topic = f"reauth-{uuid.uuid4().hex[:8]}"
        deadline = time.time() + 7
        sent = 0
        while time.time() < deadline:
            p.produce(topic, b"x")
            sent += 1
            p.flush(TIMEOUT_S)
            time.sleep(0.2)
        assert p.flush(TIMEOUT_S) == 0
        log = b.proc.log_path.read_text()
        peers = [line.split("peer=")[1].split()[0] for line in log.splitlines()
                 if "SASL authentication succeeded" in line]
        # The same connection (peer address) logged in more than once: re-authentication.
        assert max(peers.count(x) for x in set(peers)) >= 2, peers
        assert "session expired" not in log
    finally:
        b.proc.stop()


# -- bad input, with a bystander -----------------------------------------------------------

class Bystander:
    """A PLAINTEXT producer that keeps producing while bad clients misbehave."""

    def __init__(self, b: SecureBroker):
        self.producer = Producer({"bootstrap.servers": b.addr("PLAINTEXT")})
        self.topic = f"bystander-{uuid.uuid4().hex[:8]}"
        self.delivered = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        def cb(err, _msg):
            if err is None:
                self.delivered += 1
        while not self.stop.is_set():
            self.producer.produce(self.topic, b"b", callback=cb)
            self.producer.poll(0.05)
        self.producer.flush(TIMEOUT_S)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        before = self.delivered
        time.sleep(1)
        self.stop.set()
        self.thread.join(TIMEOUT_S)
        assert self.delivered > before, "bystander stopped being served"


def sasl_handshake(sock, mechanism: str, version: int = 1) -> int:
    wire.send_request(sock, 17, version, wire.string(mechanism), correlation_id=1)
    r = wire.Reader(wire.recv_frame(sock))
    assert r.i32() == 1
    return r.i16()


def sasl_authenticate(sock, token: bytes, corr: int) -> tuple[int, bytes]:
    wire.send_request(sock, 36, 1, wire.i32(len(token)) + token, correlation_id=corr)
    r = wire.Reader(wire.recv_frame(sock))
    assert r.i32() == corr
    code = r.i16()
    r.string()
    return code, r.take(r.i32())


def test_bad_input_is_refused_while_others_are_served(secure):
    with Bystander(secure):
        # Garbage instead of a TLS ClientHello: closed at once.
        with wire.connect(secure.ports["SSL"]) as s:
            s.sendall(os.urandom(4096))
            assert wire.wait_closed(s, 5)
        # A ClientHello, then silence: closed after the handshake timeout (2 s here).
        raw = socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10)
        ctx = ssl.create_default_context()
        inbound, outbound = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(inbound, outbound, server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        raw.sendall(outbound.read())
        started = time.time()
        while raw.recv(65536):
            pass  # the server's flight, then EOF once the timeout hits
        assert 1.5 < time.time() - started < 8
        raw.close()
        # A request before authentication: closed.
        with wire.connect(secure.ports["SASL_PLAINTEXT"]) as s:
            wire.send_request(s, 3, 1, wire.i32(-1), correlation_id=5)
            assert wire.wait_closed(s, 5)
        # A 100 MB SASL token: refused unread, bounded by sasl.server.max.receive.size.
        with wire.connect(secure.ports["SASL_PLAINTEXT"]) as s:
            assert sasl_handshake(s, "PLAIN") == 0
            s.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 65536)
            assert wire.wait_closed(s, 5)
        # SCRAM with a wrong nonce, then with a wrong proof: SASL_AUTHENTICATION_FAILED, closed.
        for tamper in ("nonce", "proof"):
            with wire.connect(secure.ports["SASL_PLAINTEXT"]) as s:
                assert sasl_handshake(s, "SCRAM-SHA-256") == 0
                code, server_first = sasl_authenticate(s, b"n,,n=alice,r=abc123", 2)
                assert code == 0
                final = scram_client_final(server_first, tamper)
                code, _ = sasl_authenticate(s, final, 3)
                assert code == 58  # SASL_AUTHENTICATION_FAILED
                assert wire.wait_closed(s, 5)
        # Unknown mechanism: UNSUPPORTED_SASL_MECHANISM, closed.
        with wire.connect(secure.ports["SASL_PLAINTEXT"]) as s:
            assert sasl_handshake(s, "GSSAPI") == 33
            assert wire.wait_closed(s, 5)
    log = secure.proc.log_path.read_text()
    assert "before SASL authentication" in log and "peer=127.0.0.1:" in log
    assert "TLS handshake timed out" in log and "TLS handshake failed" in log


def scram_client_final(server_first: bytes, tamper: str) -> bytes:
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    salt, iterations, nonce = base64.b64decode(attrs["s"]), int(attrs["i"]), attrs["r"]
    if tamper == "nonce":
        nonce = nonce[:-2] + "zz"
    salted = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"n=alice,r=abc123,{server_first.decode()},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored, auth, "sha256")))
    if tamper == "proof":
        proof = bytes([proof[0] ^ 1]) + proof[1:]
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_a_replaced_certificate_is_served_without_restart(tmp_path, certs):
    live = tmp_path / "live"
    live.mkdir()
    for f in ("broker.pem", "broker.key", "ca.pem"):
        (live / f).write_bytes((certs / f).read_bytes())
    b = start_secure(tmp_path, live, extra=["--ssl-reload-interval-ms", "300"])
    try:
        fresh = tmp_path / "fresh"
        subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(fresh)], check=True,
                       capture_output=True, timeout=60)
        # Key first, then certificate: a reload may see the pair half-written and must keep
        # the old one until both match.
        (live / "broker.key").write_bytes((fresh / "broker.key").read_bytes())
        (live / "broker.pem").write_bytes((fresh / "broker.pem").read_bytes())
        deadline = time.time() + 10
        while "TLS certificate reloaded" not in b.proc.log_path.read_text():
            assert time.time() < deadline, "no reload logged"
            time.sleep(0.2)
        new_ca = ssl.create_default_context(cafile=str(fresh / "ca.pem"))
        with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=5) as raw:
            with new_ca.wrap_socket(raw, server_hostname="localhost") as s:
                assert s.version() in ("TLSv1.2", "TLSv1.3")
        old_ca = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=5) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                old_ca.wrap_socket(raw, server_hostname="localhost")
    finally:
        b.proc.stop()

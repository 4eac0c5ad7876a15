"""SASL/OAUTHBEARER (KIP-255, KIP-768) through real clients: confluent-kafka's `oauth_cb` and
kafka-python's token provider hand the broker JWTs signed here with throw-away RSA and EC keys
(`cryptography`); the broker checks them against a JWKS file. Expired, badly signed, wrongly
issued or addressed tokens, tokens without a subject and garbage are refused with Kafka's
`{"status":"invalid_token"}` challenge and SASL_AUTHENTICATION_FAILED; a short-lived token is
re-authenticated on a long-lived connection; a key added to the JWKS file is used without
restart; `scripts/gen-jwks` makes a key, JWKS and token the broker accepts.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

import wire
from harness import REPO_ROOT, BrokerProcess, find_binary, free_port

TIMEOUT_S = 30
ISSUER = "https://idp.streamforge.test"
AUDIENCE = "kafka"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n: int, size: int | None = None) -> str:
    return b64url(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


class Key:
    """A throw-away signing key and its JWK."""

    def __init__(self, kind: str, kid: str):
        self.kind, self.kid = kind, kid
        if kind == "RS256":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pub = self.private.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                        "n": uint(pub.n), "e": uint(pub.e)}
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            pub = self.private.public_key().public_numbers()
            self.jwk = {"kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
                        "x": uint(pub.x, 32), "y": uint(pub.y, 32)}

    def sign(self, claims: dict, kid: str | None = None) -> str:
        header = {"alg": self.kind, "typ": "JWT", "kid": kid or self.kid}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        if self.kind == "RS256":
            sig = self.private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.private.sign(signing_input.encode(),
                                                          ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input}.{b64url(sig)}"


def claims(sub: str | None = "alice", lifetime_s: int = 300, **extra) -> dict:
    now = int(time.time())
    c = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + lifetime_s, "sub": sub}
    if sub is None:
        del c["sub"]
    c.update(extra)
    return c


def write_jwks(path: Path, keys: list[Key]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": [k.jwk for k in keys]}))
    tmp.rename(path)


class OAuthBroker:
    def __init__(self, proc: BrokerProcess, ports: dict[str, int]):
        self.proc, self.ports = proc, ports

    def addr(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


def start_broker(work: Path, certs: Path, jwks: Path, extra: list[str] | None = None,
                 issuer: str = ISSUER) -> OAuthBroker:
    proc = BrokerProcess(work, env={"RUST_LOG": "info,streamforge_broker::security=debug"})
    ports = {"PLAINTEXT": proc.port, "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    proc.extra_args = [
        "--listeners", ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
        "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
        "--sasl-mechanisms", "OAUTHBEARER,SCRAM-SHA-256",
        "--sasl-oauthbearer-jwks-endpoint-url", jwks.resolve().as_uri(),
        "--sasl-oauthbearer-expected-issuer", issuer,
        "--sasl-oauthbearer-expected-audience", AUDIENCE,
        "--sasl-handshake-timeout-ms", "5000",
    ] + (extra or [])
    proc.start()
    return OAuthBroker(proc, ports)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(d)], check=True,
                   capture_output=True, timeout=60)
    return d


@pytest.fixture(scope="module")
def keys() -> dict[str, Key]:
    return {"rsa": Key("RS256", "rsa-1"), "ec": Key("ES256", "ec-1")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs, keys):
    work = tmp_path_factory.mktemp("oauth")
    jwks = work / "jwks.json"
    write_jwks(jwks, [keys["rsa"], keys["ec"]])
    b = start_broker(work, certs, jwks)
    b.jwks = jwks
    yield b
    b.proc.stop()


def confluent_conf(b: OAuthBroker, certs: Path, protocol: str, token_fn, errors=None) -> dict:
    conf = {"bootstrap.servers": b.addr(protocol), "security.protocol": protocol,
            "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": lambda _cfg: (token_fn(), time.time() + 300)}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    if errors is not None:
        conf["error_cb"] = lambda e: errors.append(str(e))
    return conf


def round_trip(conf: dict, n: int = 10) -> list[bytes]:
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
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


@pytest.mark.parametrize("protocol,key", [("SASL_SSL", "rsa"), ("SASL_PLAINTEXT", "ec")])
def test_confluent_kafka_round_trips_with_a_signed_token(broker, certs, keys, protocol, key):
    sub = f"svc-{key}"
    conf = confluent_conf(broker, certs, protocol, lambda: keys[key].sign(claims(sub)))
    assert round_trip(conf) == [f"v{i}".encode() for i in range(10)]
    assert f"principal=User:{sub}" in broker.proc.log_path.read_text()


class Provider(AbstractTokenProvider):
    def __init__(self, token: str):
        super().__init__()
        self._token = token

    def token(self):
        return self._token

    def extensions(self):
        return {"traceId": "kp-1"}


def test_kafka_python_round_trips_with_a_token_provider(broker, keys):
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    common = dict(bootstrap_servers=broker.addr("SASL_PLAINTEXT"),
                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                  sasl_oauth_token_provider=Provider(keys["rsa"].sign(claims("kp-user"))))
    p = KafkaProducer(**common)
    for i in range(5):
        p.send(topic, f"k{i}".encode()).get(timeout=TIMEOUT_S)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    got = [m.value for m in c][:5]
    c.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def bad_tokens(keys: dict[str, Key]) -> dict[str, tuple[str, str]]:
    """name -> (token, what the broker logs)."""
    impostor = Key("RS256", "rsa-1")  # same kid, different key
    return {
        "expired": (keys["rsa"].sign(claims(lifetime_s=-120)), "ExpiredSignature"),
        "bad signature": (impostor.sign(claims()), "InvalidSignature"),
        "wrong issuer": (keys["ec"].sign(claims(iss="https://evil.test")), "InvalidIssuer"),
        "wrong audience": (keys["ec"].sign(claims(aud="not-kafka")), "InvalidAudience"),
        "missing sub": (keys["rsa"].sign(claims(sub=None)), "claim 'sub'"),
        "unknown kid": (keys["rsa"].sign(claims(), kid="nope"), "no key in the JWKS"),
        "garbage": ("not.a.jwt", "malformed JWT"),
    }


@pytest.mark.parametrize("name", ["expired", "bad signature", "wrong issuer", "wrong audience",
                                  "missing sub", "unknown kid", "garbage"])
def test_refused_tokens_get_invalid_token_then_authentication_failed(broker, keys, name):
    token, logged = bad_tokens(keys)[name]
    with wire.connect(broker.ports["SASL_PLAINTEXT"]) as s:
        assert sasl_handshake(s, "OAUTHBEARER") == 0
        code, challenge = sasl_authenticate(s, f"n,,\x01auth=Bearer {token}\x01\x01".encode(), 2)
        assert (code, challenge) == (0, b'{"status":"invalid_token"}')
        code, _ = sasl_authenticate(s, b"\x01", 3)
        assert code == 58  # SASL_AUTHENTICATION_FAILED
        assert wire.wait_closed(s, 5)
    assert logged in broker.proc.log_path.read_text()


def test_confluent_kafka_reports_an_expired_token(broker, certs, keys):
    errors: list[str] = []
    expired = keys["rsa"].sign(claims(lifetime_s=-120))
    p = Producer(confluent_conf(broker, certs, "SASL_SSL", lambda: expired, errors))
    with pytest.raises(KafkaException):
        p.list_topics(timeout=5)
    p.poll(0.5)
    assert any("invalid_token" in e for e in errors), errors


def test_a_malformed_client_response_fails_at_once(broker):
    with wire.connect(broker.ports["SASL_PLAINTEXT"]) as s:
        assert sasl_handshake(s, "OAUTHBEARER") == 0
        code, _ = sasl_authenticate(s, b"n,,auth=Bearer x\x01\x01", 2)
        assert code == 58
        assert wire.wait_closed(s, 5)


def test_a_short_lived_token_is_renewed_by_reauthentication(tmp_path, certs, keys):
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, [keys["ec"]])
    b = start_broker(tmp_path, certs, jwks, ["--sasl-oauthbearer-clock-skew-seconds", "0"])
    try:
        minted: list[int] = []

        def short_token(_cfg):
            # librdkafka asks for a new token at 80% of its lifetime and re-authenticates each
            # connection before the broker's session (the token's exp) ends.
            c = claims("renewer", lifetime_s=6)
            minted.append(c["exp"])
            return keys["ec"].sign(c), float(c["exp"])

        conf = confluent_conf(b, certs, "SASL_PLAINTEXT", lambda: "")
        conf["oauth_cb"] = short_token
        p = Producer(conf)
        topic = f"reauth-{uuid.uuid4().hex[:8]}"
        deadline = time.time() + 12
        while time.time() < deadline:
            p.produce(topic, b"x")
            p.flush(TIMEOUT_S)
            time.sleep(0.2)
        assert p.flush(TIMEOUT_S) == 0
        log = b.proc.log_path.read_text()
        peers = [line.split("peer=")[1].split()[0] for line in log.splitlines()
                 if "SASL authentication succeeded" in line]
        # The same connection logged in again with a fresh token before the old one expired.
        assert max(peers.count(x) for x in set(peers)) >= 2, peers
        assert len(minted) >= 2
        assert "session expired" not in log
    finally:
        b.proc.stop()


def test_a_key_added_to_the_jwks_file_is_used_without_restart(broker, certs, keys):
    new = Key("ES256", f"ec-{uuid.uuid4().hex[:6]}")
    write_jwks(broker.jwks, [keys["rsa"], keys["ec"], new])
    conf = confluent_conf(broker, certs, "SASL_PLAINTEXT", lambda: new.sign(claims("rotated")))
    assert round_trip(conf, n=3) == [b"v0", b"v1", b"v2"]


def test_gen_jwks_makes_a_key_and_a_token_the_broker_accepts(tmp_path, certs):
    keydir = tmp_path / "jwks"
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-jwks"), str(keydir), "scripted", "600"],
                   check=True, capture_output=True, timeout=60)
    token = (keydir / "token.jwt").read_text().strip()
    b = start_broker(tmp_path, certs, keydir / "jwks.json", issuer="streamforge-test")
    try:
        conf = confluent_conf(b, certs, "SASL_SSL", lambda: token)
        assert round_trip(conf, n=3) == [b"v0", b"v1", b"v2"]
    finally:
        b.proc.stop()


@pytest.mark.parametrize("args,message", [
    ([], "needs --sasl-oauthbearer-jwks-file"),
    (["--sasl-oauthbearer-jwks-endpoint-url", "https://idp.example/jwks"], "only file: URLs"),
    (["--sasl-oauthbearer-jwks-file", "/nonexistent/jwks.json"], "/nonexistent/jwks.json"),
])
def test_a_broker_without_usable_keys_refuses_to_start(tmp_path, args, message):
    out = subprocess.run([str(find_binary()), "broker", "--data-dir", str(tmp_path / "d"),
                          "--http-listen", "off", "--listeners",
                          f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
                          "--sasl-mechanisms", "OAUTHBEARER", *args],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout


def sasl_handshake(sock, mechanism: str) -> int:
    wire.send_request(sock, 17, 1, wire.string(mechanism), correlation_id=1)
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


def test_kcat_unsecured_jwt_is_refused(broker):
    """kcat (librdkafka built without OIDC, so it cannot fetch a signed token) offers librdkafka's
    unsecured `alg: none` JWT; a broker that checks tokens against a JWKS refuses it, as Kafka's
    validating callback handler does, and kcat reports the authentication failure."""
    out = subprocess.run(
        ["kcat", "-b", broker.addr("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanisms=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
         "-X", "sasl.oauthbearer.config=principal=alice", "-L", "-m", "10"],
        capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode != 0, out.stdout
    assert "SASL authentication error" in out.stderr or "Authentication failed" in out.stderr, \
        out.stderr

"""Produce and consume throughput and broker CPU over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256)
in one run against one broker, and the connection set-up rate: SCRAM-SHA-256 logins over
SASL_PLAINTEXT (one client, then --login-threads at once) and over SASL_SSL (TLS handshake
included), and OAUTHBEARER logins with an RS256 token from scripts/gen-jwks.

    STREAMFORGE_BIN=target/release/streamforge python3 tests/python/bench_tls.py \
        --messages 300000 --rounds 2

Clients: confluent-kafka (librdkafka) for throughput, or with `--client java` Kafka's own
ProducerPerformance / ConsumerPerformance (kafka-producer-perf-test, kafka-consumer-perf-test)
from the jars scripts/compare-kafka caches (run it once, e.g. `--smoke`, to fetch them); a raw-socket SCRAM client (salted password
computed once, as a real client caches it) for the set-up rate, which then measures the broker's
TLS-free SASL cost plus one TCP connect per login. Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wire  # noqa: E402
from harness import REPO_ROOT, BrokerProcess, find_binary, free_port  # noqa: E402

PASSWORD = "bench-secret"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_consume(conf: dict, pid: int, messages: int, size: int) -> tuple[float, float, float]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    payload = b"x" * size
    p = Producer({**conf, "linger.ms": 5, "batch.num.messages": 2000,
                  "queue.buffering.max.messages": 1000000, "acks": 1})
    cpu0, t0 = cpu_s(pid), time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    produce_rate = messages / (time.perf_counter() - t0)
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join in the timing
    got, t1 = 0, time.perf_counter()
    while got < messages:
        batch = c.consume(10000, 1.0)
        got += sum(1 for m in batch if not m.error())
        if time.perf_counter() - t1 > 300:
            raise RuntimeError(f"consumed {got}/{messages}")
    consume_rate = messages / (time.perf_counter() - t1)
    c.close()
    return produce_rate, consume_rate, cpu_s(pid) - cpu0


JAVA_TOOL_OPTS = ["-Xmx256M", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
JAVA_PERF_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def java_tool(libs: Path, main: str, args: list[str]) -> str:
    out = subprocess.run(["java", *JAVA_TOOL_OPTS, "-cp", f"{libs}/*", main, *args],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{main} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def java_produce_consume(props: dict, pid: int, messages: int, size: int, libs: Path,
                         work: Path) -> tuple[float, float, float]:
    """The same workload with kafka-producer-perf-test and kafka-consumer-perf-test."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    cfg = work / f"{topic}.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    cpu0 = cpu_s(pid)
    out = java_tool(libs, "org.apache.kafka.tools.ProducerPerformance", [
        "--topic", topic, "--num-records", str(messages), "--record-size", str(size),
        "--throughput", "-1", "--producer-props", "acks=1", "linger.ms=5",
        "--producer.config", str(cfg)])
    produce_rate = float(JAVA_PERF_RE.search(out.strip().splitlines()[-1])[2])
    out = java_tool(libs, "org.apache.kafka.tools.ConsumerPerformance", [
        "--bootstrap-server", props["bootstrap.servers"], "--topic", topic,
        "--messages", str(messages), "--timeout", "60000", "--consumer.config", str(cfg)])
    row = [line for line in out.splitlines() if "," in line and not line.startswith("start")][-1]
    consume_rate = float(row.split(",")[9])  # fetch.nMsg.sec: without the group join
    return produce_rate, consume_rate, cpu_s(pid) - cpu0


def java_props(conf: dict, certs: Path) -> dict:
    """confluent-kafka settings as the Java client's."""
    props = {"bootstrap.servers": conf["bootstrap.servers"]}
    if "security.protocol" in conf:
        props["security.protocol"] = conf["security.protocol"]
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(certs / "ca.pem")
    if "sasl.mechanisms" in conf:
        props["sasl.mechanism"] = conf["sasl.mechanisms"]
        props["sasl.jaas.config"] = ("org.apache.kafka.common.security.scram.ScramLoginModule "
                                     f'required username="bench" password="{PASSWORD}";')
    return props


class Connector:
    """Opens a connection to a listener, with TLS when given a context."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None):
        self.port, self.tls = port, tls

    def open(self):
        s = wire.connect(self.port)
        return self.tls.wrap_socket(s, server_hostname="localhost") if self.tls else s


class Scram:
    """SCRAM-SHA-256 logins; the client's PBKDF2 is computed once, as a real client caches it."""

    def __init__(self):
        self.salted: bytes | None = None
        self.lock = threading.Lock()

    def login(self, conn: Connector, i: int) -> None:
        with conn.open() as s:
            wire.send_request(s, 17, 1, wire.string("SCRAM-SHA-256"), correlation_id=1)
            wire.recv_frame(s)
            first_bare = f"n=bench,r=c{i}"
            server_first = auth(s, f"n,,{first_bare}".encode(), 2).decode()
            attrs = dict(a.split("=", 1) for a in server_first.split(","))
            with self.lock:
                if self.salted is None:
                    self.salted = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(),
                                                      base64.b64decode(attrs["s"]), int(attrs["i"]))
            client_key = hmac.digest(self.salted, b"Client Key", "sha256")
            stored = hashlib.sha256(client_key).digest()
            without_proof = f"c=biws,r={attrs['r']}"
            msg = f"{first_bare},{server_first},{without_proof}".encode()
            sig = hmac.digest(stored, msg, "sha256")
            proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
            assert auth(s, f"{without_proof},p={proof}".encode(), 3).startswith(b"v=")


def oauth_login(conn: Connector, token: str) -> None:
    with conn.open() as s:
        wire.send_request(s, 17, 1, wire.string("OAUTHBEARER"), correlation_id=1)
        wire.recv_frame(s)
        assert auth(s, f"n,,\x01auth=Bearer {token}\x01\x01".encode(), 2) == b""


def login_rate(login, count: int, threads: int = 1) -> float:
    """Logins per second: `count` logins, `threads` at a time."""
    t0 = time.perf_counter()
    if threads == 1:
        for i in range(count):
            login(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(login, range(count)))
    return count / (time.perf_counter() - t0)


def auth(sock, token: bytes, corr: int) -> bytes:
    wire.send_request(sock, 36, 1, wire.i32(len(token)) + token, correlation_id=corr)
    r = wire.Reader(wire.recv_frame(sock))
    r.i32()
    code = r.i16()
    message = r.string()
    assert code == 0, (code, message)
    return r.take(r.i32())


def report_logins(args, ports: dict[str, int], certs: Path, token: str) -> None:
    scram = Scram()
    plain = Connector(ports["SASL_PLAINTEXT"])
    tls = Connector(ports["SASL_SSL"], ssl.create_default_context(cafile=str(certs / "ca.pem")))
    n, t = args.logins, args.login_threads
    rows = [
        ("SCRAM-SHA-256, SASL_PLAINTEXT, 1 client", lambda i: scram.login(plain, i), 1),
        (f"SCRAM-SHA-256, SASL_PLAINTEXT, {t} clients", lambda i: scram.login(plain, i), t),
        ("SCRAM-SHA-256, SASL_SSL (TLS handshake), 1 client", lambda i: scram.login(tls, i), 1),
        ("OAUTHBEARER RS256, SASL_PLAINTEXT, 1 client", lambda _i: oauth_login(plain, token), 1),
        (f"OAUTHBEARER RS256, SASL_PLAINTEXT, {t} clients", lambda _i: oauth_login(plain, token), t),
    ]
    for name, login, threads in rows:
        rate = login_rate(login, n, threads)
        print(f"logins (connect + handshake + tokens) {name:48} {rate:>8,.0f}/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300000)
    ap.add_argument("--size-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--logins", type=int, default=300)
    ap.add_argument("--login-threads", type=int, default=4)
    ap.add_argument("--client", choices=["confluent", "java"], default="confluent")
    ap.add_argument("--kafka-libs", type=Path,
                    default=Path.home() / ".cache" / "streamforge" / "kafka-4.1.1" / "libs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    certs = work / "certs"
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(certs)], check=True,
                   capture_output=True)
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-jwks"), str(work / "jwks"), "bench"],
                   check=True, capture_output=True)
    b = BrokerProcess(work)
    ports = {"PLAINTEXT": b.port, "SSL": free_port(), "SASL_PLAINTEXT": free_port(),
             "SASL_SSL": free_port()}
    b.extra_args = ["--listeners", ",".join(f"{p}://127.0.0.1:{n}" for p, n in ports.items()),
                    "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
                    "--sasl-mechanisms", "SCRAM-SHA-256,OAUTHBEARER",
                    "--sasl-oauthbearer-jwks-file", str(work / "jwks" / "jwks.json")]
    b.start()
    try:
        subprocess.run([str(find_binary()), "users", "-b", b.bootstrap, "create", "bench",
                        "--password", PASSWORD, "--mechanisms", "SCRAM-SHA-256"], check=True,
                       capture_output=True)
        tls = {"ssl.ca.location": str(certs / "ca.pem")}
        confs = {
            "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
            "SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL",
                    **tls},
            "SASL_SSL/SCRAM-SHA-256": {
                "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
                "security.protocol": "SASL_SSL", **tls, "sasl.mechanisms": "SCRAM-SHA-256",
                "sasl.username": "bench", "sasl.password": PASSWORD},
        }
        print(f"{args.messages} x {args.size_bytes} B, {args.client} client, acks=1, "
              f"binary {find_binary()}")
        for r in range(args.rounds):
            for name, conf in confs.items():
                if args.client == "java":
                    prod, cons, cpu = java_produce_consume(java_props(conf, certs), b.pid,
                                                           args.messages, args.size_bytes,
                                                           args.kafka_libs, work)
                else:
                    prod, cons, cpu = produce_consume(conf, b.pid, args.messages,
                                                      args.size_bytes)
                print(f"round {r + 1} {name:24} produce {prod:>10,.0f} msg/s  "
                      f"consume {cons:>10,.0f} msg/s  broker CPU {cpu:.2f} s", flush=True)
        report_logins(args, ports, certs, (work / "jwks" / "token.jwt").read_text().strip())
    finally:
        b.stop()


if __name__ == "__main__":
    main()

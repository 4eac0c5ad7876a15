"""Brokers that reach each other only over SASL_SSL: three brokers whose single Kafka listener is
SASL_SSL with mutual TLS required (plus the controller listener for the Raft quorum), the ACL
authorizer on, the broker user (SCRAM-SHA-512, written into each data dir before start with
`streamforge users create --data-dir`) a super user. confluent-kafka produces acks=all to an RF=3
topic with min.insync.replicas=2 over SASL_SSL and reads everything back, a transaction over every partition commits (markers and verification
between brokers); every partition ends
with all three replicas in its ISR and the same high watermark on each, so the follower fetches
ran over TLS and SASL (no other listener exists). A broker whose inter-broker password is wrong
starts but is refused by its peers, and its replicas stay out of the ISR; one that logs in as a
user without CLUSTER_ACTION is answered TOPIC_AUTHORIZATION_FAILED and drops out of the ISR too.
"""

from __future__ import annotations

import ssl
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from harness import REPO_ROOT, BrokerProcess, find_binary, free_port

BROKER_USER = "broker"
BROKER_PASSWORD = "broker-secret"
CLIENT_USER = "admin"
CLIENT_PASSWORD = "admin-secret"
TOPIC = "secured"
PARTITIONS = 3
MESSAGES = 300
WAIT_S = 60


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(d), "client"], check=True,
                   capture_output=True, timeout=60)
    return d


class SaslSslBroker(BrokerProcess):
    """A broker whose only Kafka listener is SASL_SSL: ready once a TLS handshake (with the
    client certificate mutual TLS wants) and ApiVersions succeed, as ApiVersions is served
    before SASL authentication."""

    def __init__(self, work_dir: Path, certs: Path, **kw):
        super().__init__(work_dir, **kw)
        self.certs = certs

    def command(self) -> list[str]:
        # `--listeners` names every listener; the legacy `--advertised-listener` would apply to
        # the first one, which is not always the SASL_SSL one here.
        cmd = super().command()
        i = cmd.index("--advertised-listener")
        return cmd[:i] + cmd[i + 2:]

    def wait_ready(self, timeout_s: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        ctx.load_cert_chain(str(self.certs / "client.pem"), str(self.certs / "client.key"))
        deadline = time.monotonic() + timeout_s
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}\n{self.log_tail()}")
            try:
                with ctx.wrap_socket(wire.connect(self.port, timeout_s=2.0), server_hostname="127.0.0.1") as s:
                    if wire.api_versions(s).error_code == 0:
                        return
            except (OSError, wire.WireError, ssl.SSLError) as e:
                last_err = e
            time.sleep(0.1)
        raise TimeoutError(f"broker not ready after {timeout_s}s: {last_err}\n{self.log_tail()}")


def client_conf(b: SaslSslBroker, certs: Path) -> dict:
    return {
        "bootstrap.servers": b.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "client.pem"),
        "ssl.key.location": str(certs / "client.key"),
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": CLIENT_USER,
        "sasl.password": CLIENT_PASSWORD,
    }


def create_user(data_dir: Path, user: str, password: str) -> None:
    subprocess.run([str(find_binary()), "users", "create", user, "--password", password,
                    "--data-dir", str(data_dir)], check=True, capture_output=True, timeout=60)


def start_secure_cluster(tmp_path_factory, certs: Path, passwords: list[str],
                         users: tuple[str, ...] = (BROKER_USER,) * 3,
                         plaintext_first: bool = False) -> list[SaslSslBroker]:
    """Three voters, SASL_SSL only (or a PLAINTEXT listener first, which peers must not be
    reached on); broker i logs in to the others as users[i] with passwords[i]. Every user
    exists on every broker; only BROKER_USER is a super user."""
    brokers = [SaslSslBroker(tmp_path_factory.mktemp(f"ibsec{i + 1}"), certs, name=f"broker{i + 1}")
               for i in range(3)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{free_port()}" for i in range(3))
    for i, b in enumerate(brokers):
        b.data_dir.mkdir(parents=True, exist_ok=True)
        for user in sorted(set(users)):
            create_user(b.data_dir, user, BROKER_PASSWORD)
        create_user(b.data_dir, CLIENT_USER, CLIENT_PASSWORD)
        b.extra_args += [
            "--listeners", (f"PLAINTEXT://127.0.0.1:{free_port()}," if plaintext_first else "")
            + f"SASL_SSL://127.0.0.1:{b.port}",
            "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
            "--ssl-ca", str(certs / "ca.pem"), "--ssl-client-auth", "required",
            "--sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
            "--inter-broker-listener-name", "SASL_SSL",
            "--sasl-mechanism-inter-broker-protocol", "SCRAM-SHA-512",
            "--inter-broker-sasl-username", users[i],
            "--authorizer", "acl", "--super-users", f"User:{BROKER_USER};User:{CLIENT_USER}",
            "--node-id", str(i + 1),
            "--controller-quorum-voters", voters,
            "--broker-session-timeout-ms", "3000",
            "--broker-heartbeat-interval-ms", "500",
            "--offsets-topic-partitions", "3",
        ]
        # The password through the environment, as an operator would pass it.
        b.env["STREAMFORGE_INTER_BROKER_SASL_PASSWORD"] = passwords[i]
        b.env["RUST_LOG"] = "info,openraft=error"
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda b: b.start(timeout_s=WAIT_S), brokers))
    return brokers


@pytest.fixture
def stop_after():
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        b.stop()


def wait_for(what, f, timeout_s=WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        v = f()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def placement(admin: AdminClient) -> dict | None:
    """{partition: (leader, replicas, isr)} once every partition has a leader."""
    t = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
    if t is None or t.error is not None or len(t.partitions) != PARTITIONS:
        return None
    out = {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in t.partitions.items()}
    return out if all(v[0] >= 0 for v in out.values()) else None


def create_topic(admin: AdminClient) -> None:
    fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                             operation_timeout=15)
    for f in fs.values():
        f.result(30)


def batches(data_dir: Path, partition: int) -> list[tuple[int, int, int]]:
    """(base offset, last offset, crc) of every batch in a partition's segment files."""
    out = []
    for seg in sorted((data_dir / f"{TOPIC}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            crc, = struct.unpack_from(">I", data, pos + 17)
            last_delta, = struct.unpack_from(">i", data, pos + 23)
            out.append((base, base + last_delta, crc))
            pos += 12 + length
    return out


def test_a_sasl_ssl_only_cluster_replicates(tmp_path_factory, certs, stop_after):
    brokers = start_secure_cluster(tmp_path_factory, certs, [BROKER_PASSWORD] * 3)
    stop_after += brokers
    # The offline user tool takes the data dir lock: a running broker's store is refused.
    running = subprocess.run([str(find_binary()), "users", "create", "late", "--password", "x",
                              "--data-dir", str(brokers[0].data_dir)], capture_output=True, timeout=60)
    assert running.returncode != 0 and b"is its broker running" in running.stderr, running
    conf = client_conf(brokers[0], certs)
    admin = AdminClient(conf)
    wait_for("three brokers", lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    create_topic(admin)
    wait_for("the full ISR", lambda: (p := placement(admin)) and all(v[2] == [1, 2, 3] for v in p.values()))

    acked: list[str] = []
    errors: list[str] = []

    def delivered(err, msg):
        (errors if err else acked).append(str(err) if err else msg.value().decode())

    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(MESSAGES):
        p.produce(TOPIC, f"m{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors[:5]
    assert len(acked) == MESSAGES

    c = Consumer({**conf, "group.id": "ibsec-check", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < MESSAGES and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append(m.value().decode())
    c.close()
    assert sorted(got) == sorted(f"m{i}" for i in range(MESSAGES))

    # A transaction over every partition: the coordinator sends WriteTxnMarkers to the other
    # leaders (and leaders verify with AddPartitionsToTxn) over the inter-broker listener.
    tp = Producer({**conf, "transactional.id": "ibsec-txn", "linger.ms": 5})
    tp.init_transactions(WAIT_S)
    tp.begin_transaction()
    for i in range(PARTITIONS):
        tp.produce(TOPIC, f"t{i}".encode(), partition=i)
    tp.commit_transaction(WAIT_S)
    rc = Consumer({**conf, "group.id": "ibsec-rc", "auto.offset.reset": "earliest",
                   "isolation.level": "read_committed", "enable.auto.commit": False})
    rc.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    committed: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while len(committed) < PARTITIONS and time.monotonic() < deadline:
        m = rc.poll(1.0)
        if m is not None and not m.error() and m.value().startswith(b"t"):
            committed.append(m.value().decode())
    rc.close()
    assert sorted(committed) == [f"t{i}" for i in range(PARTITIONS)]

    # Every partition: all three replicas in the ISR, and each broker's copy is complete (a
    # follower that stopped fetching would drop out of the ISR after replica.lag.time.max.ms).
    final = wait_for("the full ISR after the writes",
                     lambda: (p := placement(admin)) and all(v[2] == [1, 2, 3] for v in p.values()) and p)
    assert all(v[1] == [1, 2, 3] for v in final.values()), final
    for b in brokers:
        # Each broker's own answer, asked of it alone.
        own = AdminClient({**client_conf(b, certs)})
        seen = wait_for(f"broker {b.bootstrap}'s view", lambda: placement(own))
        assert all(v[2] == [1, 2, 3] for v in seen.values()), (b.bootstrap, seen)
    # The replicas' own files: the same batches (base offset, last offset, CRC) on all three,
    # every message in them (and per partition the transaction's record and commit marker). Only SASL_SSL connects the brokers, so the copies came over it.
    for part in range(PARTITIONS):
        copies = [wait_for(f"partition {part} complete on {b.bootstrap}",
                           lambda b=b: (x := batches(b.data_dir, part))
                           and x[-1][1] + 1 == MESSAGES // PARTITIONS + 2 and x)
                  for b in brokers]
        assert copies[0] == copies[1] == copies[2], f"partition {part}: {copies}"
    for b in brokers:
        assert "not replicating from it" not in b.log_text()
        assert "cannot connect to the leader on the inter-broker listener" not in b.log_text()


def test_a_broker_with_a_wrong_inter_broker_password_is_refused(tmp_path_factory, certs, stop_after):
    """With a PLAINTEXT listener first, `--inter-broker-listener-name SASL_SSL` still sends the
    fetches to SASL_SSL: broker 3's wrong password keeps it out (PLAINTEXT would let it in)."""
    brokers = start_secure_cluster(tmp_path_factory, certs,
                                   [BROKER_PASSWORD, BROKER_PASSWORD, "wrong-password"],
                                   plaintext_first=True)
    stop_after += brokers
    conf = client_conf(brokers[0], certs)
    admin = AdminClient(conf)
    wait_for("three brokers", lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    create_topic(admin)
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(30):
        p.produce(TOPIC, f"m{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(WAIT_S) == 0
    # Broker 3 cannot log in to its leaders: its replicas fall out of (or never catch up in)
    # the ISR, while brokers 1 and 2 replicate each other.
    wait_for("broker 3 out of every ISR",
             lambda: (pl := placement(admin)) and all(3 not in v[2] or v[0] == 3 for v in pl.values())
             and all(len(v[2]) >= 2 for v in pl.values()), timeout_s=WAIT_S)
    log = brokers[2].log_text()
    assert "cannot connect to the leader on the inter-broker listener" in log, brokers[2].log_tail()
    assert "SASL login at the peer" in log, brokers[2].log_tail()


def test_a_broker_user_without_cluster_action_is_not_replicated_to(tmp_path_factory, certs, stop_after):
    """Kafka: a follower's Fetch needs CLUSTER_ACTION on the cluster. Broker 3 logs in as a user
    that is not a super user and has no ACL: its leaders answer TOPIC_AUTHORIZATION_FAILED and it
    falls out of every ISR it does not lead."""
    brokers = start_secure_cluster(tmp_path_factory, certs, [BROKER_PASSWORD] * 3,
                                   users=(BROKER_USER, BROKER_USER, "outsider"))
    stop_after += brokers
    conf = client_conf(brokers[0], certs)
    admin = AdminClient(conf)
    wait_for("three brokers", lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    create_topic(admin)
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(30):
        p.produce(TOPIC, f"m{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(WAIT_S) == 0
    wait_for("broker 3 out of every ISR it does not lead",
             lambda: (pl := placement(admin)) and all(3 not in v[2] or v[0] == 3 for v in pl.values())
             and all(len(v[2]) >= 2 for v in pl.values()), timeout_s=WAIT_S)
    log = brokers[2].log_text()
    assert "the leader refused the fetch" in log and "code=29" in log, brokers[2].log_tail()
    # Refused partitions wait replica.fetch.backoff.ms (no hot loop) and are logged once per
    # code, not on every retry.
    assert log.count("the leader refused the fetch") <= 4 * PARTITIONS + 10
    assert "operation=CLUSTER_ACTION" in brokers[0].log_text() + brokers[1].log_text()

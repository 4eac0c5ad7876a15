"""ACLs through real clients: confluent-kafka's AdminClient creates, describes and deletes them
over SASL_PLAINTEXT with SCRAM users, and producers, consumers and transactional producers of
those users are refused with Kafka's error codes (TOPIC_, GROUP_, CLUSTER_ and
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) until an ACL allows them; prefixed patterns, DENY over
ALLOW, hosts, super users, Metadata hiding topics the user may not DESCRIBE, ACLs kept across a
restart, `streamforge acls`, and SECURITY_DISABLED without an authorizer.

librdkafka drops DescribeAcls' error code (an error arrives as an empty listing), so the
DescribeAcls refusals are checked with kafka-python's admin, which raises them.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from kafka import errors as kafka_errors
from kafka.admin import ACLFilter, KafkaAdminClient, ResourcePatternFilter
from kafka.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType
from kafka.admin import ResourceType as KpResourceType

from harness import REPO_ROOT, BrokerProcess, find_binary, free_port

TIMEOUT_S = 30
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "carol": "carol-secret"}


class AclBroker:
    def __init__(self, proc: BrokerProcess, sasl_port: int):
        self.proc = proc
        self.sasl_port = sasl_port

    def conf(self, user: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
                "sasl.username": user, "sasl.password": USERS[user]}

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.conf(user))


def start_acl_broker(tmp_path) -> AclBroker:
    proc = BrokerProcess(tmp_path)
    sasl_port = free_port()
    # PLAINTEXT (User:ANONYMOUS) stays a super user for the `streamforge` tools on loopback.
    proc.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{proc.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS",
        "--auto-create-topics", "false",
    ]
    proc.start()
    for user, password in USERS.items():
        subprocess.run([str(find_binary()), "users", "-b", proc.bootstrap, "create", user,
                        "--password", password], check=True, capture_output=True,
                       timeout=TIMEOUT_S)
    return AclBroker(proc, sasl_port)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = start_acl_broker(tmp_path_factory.mktemp("acls"))
    yield b
    b.proc.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(rt, name, principal, op, pattern=ResourcePatternType.LITERAL, host="*",
          perm=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def create_acls(b: AclBroker, bindings: list[AclBinding], user: str = "admin") -> None:
    admin = b.admin(user)  # kept alive until the futures resolve
    for f in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        f.result()


def describe_acls(b: AclBroker, f: AclBindingFilter, user: str = "admin") -> list[AclBinding]:
    admin = b.admin(user)
    return admin.describe_acls(f, request_timeout=TIMEOUT_S).result()


def kafka_python_describe_all(bootstrap: str, user: str | None = None) -> list:
    """DescribeAcls of every ACL through kafka-python (raises the broker's error)."""
    sasl = {} if user is None else dict(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user, sasl_plain_password=USERS[user])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000,
                             **sasl)
    try:
        f = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                      permission_type=ACLPermissionType.ANY,
                      resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                             ACLResourcePatternType.ANY))
        acls, _ = admin.describe_acls(f)
        return acls
    finally:
        admin.close()


def create_topic(b: AclBroker, name: str, partitions: int = 1) -> None:
    admin = b.admin()
    fs = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=TIMEOUT_S)
    fs[name].result()


def produce_error(conf: dict, topic: str, extra: dict | None = None) -> KafkaError | None:
    """Produce one record; the delivery error (None when delivered)."""
    errors: list = []
    p = Producer({**conf, "message.timeout.ms": 10000, **(extra or {})})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors, "no delivery report"
    return errors[0]


def consume_error(conf: dict, topic: str, group: str) -> int | None:
    """Subscribe and poll; the first error code (None when a record arrives)."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error().code()
            return None
        raise AssertionError("neither a record nor an error within the timeout")
    finally:
        c.close()


def any_filter(**kw) -> AclBindingFilter:
    args = dict(restype=ResourceType.ANY, name=None, resource_pattern_type=ResourcePatternType.ANY,
                principal=None, host=None, operation=AclOperation.ANY,
                permission_type=AclPermissionType.ANY)
    args.update(kw)
    return AclBindingFilter(args["restype"], args["name"], args["resource_pattern_type"],
                            args["principal"], args["host"], args["operation"],
                            args["permission_type"])


def test_admin_client_creates_describes_and_deletes_acls(acl_broker):
    topic = unique("adm")
    b1 = allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)
    b2 = allow(ResourceType.TOPIC, topic[:5], "User:bob", AclOperation.WRITE,
               pattern=ResourcePatternType.PREFIXED)
    create_acls(acl_broker, [b1, b2])
    admin = acl_broker.admin()
    listed = admin.describe_acls(any_filter(name=topic, resource_pattern_type=ResourcePatternType.MATCH),
                                 request_timeout=TIMEOUT_S).result()
    assert set(listed) >= {b1, b2}
    f = any_filter(name=topic, restype=ResourceType.TOPIC,
                   resource_pattern_type=ResourcePatternType.LITERAL)
    deleted = admin.delete_acls([f], request_timeout=TIMEOUT_S)[f].result()
    assert deleted == [b1]
    left = admin.describe_acls(any_filter(principal="User:bob"), request_timeout=TIMEOUT_S).result()
    assert b2 in left and b1 not in left


def test_only_principals_allowed_alter_on_the_cluster_change_acls(acl_broker):
    binding = allow(ResourceType.TOPIC, unique("x"), "User:alice", AclOperation.READ)
    with pytest.raises(KafkaException) as e:
        create_acls(acl_broker, [binding], user="alice")
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(kafka_errors.ClusterAuthorizationFailedError):
        kafka_python_describe_all(f"127.0.0.1:{acl_broker.sasl_port}", "alice")
    create_acls(acl_broker, [allow(ResourceType.BROKER, "kafka-cluster", "User:bob",
                                   AclOperation.ALTER)])
    create_acls(acl_broker, [binding], user="bob")
    # ALTER implies DESCRIBE: bob may list what he created.
    assert describe_acls(acl_broker, any_filter(name=binding.name), user="bob") == [binding]


def test_elect_leaders_needs_alter_on_the_cluster(acl_broker):
    from confluent_kafka import ElectionType, TopicPartition
    topic = unique("elect")
    create_topic(acl_broker, topic)
    tps = [TopicPartition(topic, 0)]

    def elect(user):
        """Each partition's error code, or the whole request's."""
        admin = acl_broker.admin(user)
        try:
            answer = admin.elect_leaders(ElectionType.PREFERRED, tps).result(TIMEOUT_S)
        except KafkaException as e:
            return {e.args[0].code()}
        # Each value is None or a KafkaError.
        return {None if r is None else r.code() for r in answer.values()}

    assert elect("alice") == {KafkaError.CLUSTER_AUTHORIZATION_FAILED}
    create_acls(acl_broker, [allow(ResourceType.BROKER, "kafka-cluster", "User:bob",
                                   AclOperation.ALTER)])
    assert elect("bob") == {KafkaError.ELECTION_NOT_NEEDED}


def test_produce_needs_write_on_the_topic(acl_broker):
    topic = unique("prod")
    create_topic(acl_broker, topic)
    conf = acl_broker.conf("alice")
    # Without DESCRIBE the topic's metadata is refused; with DESCRIBE only, the Produce is.
    assert produce_error(conf, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.DESCRIBE)])
    assert produce_error(conf, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)])
    assert produce_error(conf, topic) is None


def test_consume_needs_read_on_the_group_and_the_topic(acl_broker):
    topic, group = unique("cons"), unique("grp")
    create_topic(acl_broker, topic)
    assert produce_error(acl_broker.conf("admin"), topic) is None
    conf = acl_broker.conf("alice")
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)])
    assert consume_error(conf, topic, group) == KafkaError.GROUP_AUTHORIZATION_FAILED
    create_acls(acl_broker, [allow(ResourceType.GROUP, group, "User:alice", AclOperation.READ)])
    assert consume_error(conf, topic, group) is None
    # DENY wins over ALLOW (here the topic's READ through a DENY for User:*).
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:*", AclOperation.READ,
                                   perm=AclPermissionType.DENY)])
    assert consume_error(conf, topic, group) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactions_need_write_on_the_transactional_id(acl_broker):
    topic, tid = unique("txn"), unique("tid")
    create_topic(acl_broker, topic)
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)])
    p = Producer({**acl_broker.conf("alice"), "transactional.id": tid})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    create_acls(acl_broker, [allow(ResourceType.TRANSACTIONAL_ID, tid, "User:alice",
                                   AclOperation.WRITE)])
    p = Producer({**acl_broker.conf("alice"), "transactional.id": tid})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(TIMEOUT_S)


def test_idempotent_producer_needs_write_somewhere(acl_broker):
    topic = unique("idem")
    create_topic(acl_broker, topic)
    conf = {**acl_broker.conf("carol")}
    # InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:carol", AclOperation.DESCRIBE)])
    p = Producer({**conf, "enable.idempotence": True, "message.timeout.ms": 10000})
    p.produce(topic, b"v")
    with pytest.raises(KafkaException) as e:  # librdkafka: a fatal error, raised by flush
        p.flush(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    create_acls(acl_broker, [allow(ResourceType.TOPIC, topic, "User:carol", AclOperation.WRITE)])
    assert produce_error(conf, topic, {"enable.idempotence": True}) is None


def test_prefixed_acls_and_hosts(acl_broker):
    prefix = unique("app") + "-"
    mine, other, far = prefix + "orders", unique("other"), unique("far")
    for t in (mine, other, far):
        create_topic(acl_broker, t)
    create_acls(acl_broker, [
        allow(ResourceType.TOPIC, prefix, "User:bob", AclOperation.ALL,
              pattern=ResourcePatternType.PREFIXED),
        allow(ResourceType.TOPIC, far, "User:bob", AclOperation.ALL, host="10.9.9.9"),
    ])
    conf = acl_broker.conf("bob")
    assert produce_error(conf, mine) is None
    assert produce_error(conf, other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(conf, far).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_super_users_need_no_acl(acl_broker):
    topic = unique("super")
    create_topic(acl_broker, topic)
    assert produce_error(acl_broker.conf("admin"), topic) is None
    assert consume_error(acl_broker.conf("admin"), topic, unique("g")) is None


def test_metadata_hides_topics_the_user_may_not_describe(acl_broker):
    visible, hidden = unique("vis"), unique("hid")
    for t in (visible, hidden):
        create_topic(acl_broker, t)
    create_acls(acl_broker, [allow(ResourceType.TOPIC, visible, "User:bob", AclOperation.READ)])
    bob, admin = acl_broker.admin("bob"), acl_broker.admin("admin")
    md = bob.list_topics(timeout=TIMEOUT_S)
    assert visible in md.topics and hidden not in md.topics
    assert hidden in admin.list_topics(timeout=TIMEOUT_S).topics
    # Named: a topic bob may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether it exists or not.
    for name in (hidden, unique("missing")):
        t = bob.list_topics(topic=name, timeout=TIMEOUT_S).topics[name]
        assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authorized_operations_are_the_allowed_ones(acl_broker):
    topic, group = unique("ops"), unique("opsg")
    create_topic(acl_broker, topic)
    create_acls(acl_broker, [
        allow(ResourceType.TOPIC, topic, "User:carol", AclOperation.READ),
        allow(ResourceType.GROUP, group, "User:carol", AclOperation.READ),
        allow(ResourceType.BROKER, "kafka-cluster", "User:carol", AclOperation.DESCRIBE),
    ])
    assert produce_error(acl_broker.conf("admin"), topic) is None
    assert consume_error(acl_broker.conf("carol"), topic, group) is None  # the group exists now
    admin = acl_broker.admin("carol")
    g = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                       request_timeout=TIMEOUT_S)[group].result()
    assert set(g.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    t = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                              request_timeout=TIMEOUT_S)[topic].result()
    assert set(t.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    c = admin.describe_cluster(include_authorized_operations=True,
                               request_timeout=TIMEOUT_S).result()
    assert set(c.authorized_operations) == {AclOperation.DESCRIBE}
    # Super users may do everything the resource type supports.
    super_admin = acl_broker.admin("admin")
    t = super_admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                    request_timeout=TIMEOUT_S)[topic].result()
    assert AclOperation.ALTER_CONFIGS in set(t.authorized_operations)


def test_streamforge_acls_cli(acl_broker):
    bin_ = str(find_binary())
    topic = unique("cli")

    def run(*a):
        return subprocess.run([bin_, "acls", "-b", acl_broker.proc.bootstrap, *a],
                              check=True, capture_output=True, text=True, timeout=TIMEOUT_S)

    run("--add", "--allow-principal", "User:alice", "--operation", "Read",
        "--operation", "Describe", "--topic", topic)
    rows = json.loads(run("--list", "--topic", topic, "--json").stdout)
    assert {(r["operation"], r["principal"]) for r in rows} == {("READ", "User:alice"),
                                                                ("DESCRIBE", "User:alice")}
    assert len(describe_acls(acl_broker, any_filter(name=topic))) == 2
    assert "removed 2 ACL(s)" in run("--remove", "--topic", topic).stdout
    assert json.loads(run("--list", "--topic", topic, "--json").stdout) == []


def test_acls_survive_a_restart(tmp_path):
    b = start_acl_broker(tmp_path)
    try:
        topic = unique("keep")
        binding = allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)
        create_acls(b, [binding])
        create_topic(b, topic)
        b.proc.restart()
        assert describe_acls(b, any_filter(name=topic)) == [binding]
        assert produce_error(b.conf("alice"), topic) is None
    finally:
        b.proc.stop()


def test_a_client_certificate_is_the_principal_on_ssl(tmp_path):
    certs = tmp_path / "certs"
    subprocess.run([str(REPO_ROOT / "scripts" / "gen-certs"), str(certs), "alice"], check=True,
                   capture_output=True, timeout=60)
    proc = BrokerProcess(tmp_path / "b")
    ssl_port = free_port()
    proc.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port}",
        "--ssl-cert", str(certs / "broker.pem"), "--ssl-key", str(certs / "broker.key"),
        "--ssl-ca", str(certs / "ca.pem"), "--ssl-client-auth", "required",
        "--ssl-principal-mapping-rules", "RULE:^CN=([^,]*),.*$/$1/",
        "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
    ]
    proc.start()
    try:
        mine, other = unique("cert"), unique("other")
        bin_ = str(find_binary())
        for t in (mine, other):
            subprocess.run([bin_, "topics", "-b", proc.bootstrap, "create", t], check=True,
                           capture_output=True, timeout=TIMEOUT_S)
        subprocess.run([bin_, "acls", "-b", proc.bootstrap, "--add", "--allow-principal",
                        "User:alice", "--operation", "Write", "--topic", mine], check=True,
                       capture_output=True, timeout=TIMEOUT_S)
        conf = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(certs / "ca.pem"),
                "ssl.certificate.location": str(certs / "alice.pem"),
                "ssl.key.location": str(certs / "alice.key")}
        assert produce_error(conf, mine) is None
        assert produce_error(conf, other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        proc.stop()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    with pytest.raises(kafka_errors.SecurityDisabledError):
        kafka_python_describe_all(broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    binding = allow(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
    with pytest.raises(KafkaException) as e:
        for f in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
            f.result()
    assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_the_dashboard_obeys_the_same_acls(tmp_path):
    """The dashboard's API asks the broker's ACL authorizer: a user sees only the topics she may
    DESCRIBE and may not create one without CREATE; an ACL changes that at once."""
    import base64
    import urllib.error
    import urllib.request

    proc = BrokerProcess(tmp_path, http=True)
    sasl_port = free_port()
    proc.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{proc.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS",
        "--auto-create-topics", "false",
    ]
    proc.start()
    try:
        for user in ("admin", "alice"):
            subprocess.run([str(find_binary()), "users", "-b", proc.bootstrap, "create", user,
                            "--password", USERS[user]], check=True, capture_output=True,
                           timeout=TIMEOUT_S)
        b = AclBroker(proc, sasl_port)
        visible, hidden = unique("seen"), unique("hidden")
        create_topic(b, visible)
        create_topic(b, hidden)

        def call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
            token = base64.b64encode(b"alice:" + USERS["alice"].encode()).decode()
            req = urllib.request.Request(
                proc.http_url + path, method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                    return r.status, json.loads(r.read() or b"null")
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read() or b"null")

        create_acls(b, [allow(ResourceType.TOPIC, visible, "User:alice", AclOperation.DESCRIBE)])
        status, topics = call("GET", "/api/topics")
        assert status == 200, topics
        names = {t["name"] for t in (topics["topics"] if isinstance(topics, dict) else topics)}
        assert visible in names and hidden not in names, names

        status, err = call("POST", "/api/topics", {"name": unique("new"), "partitions": 1})
        assert status == 403, err
        assert err["kafka_error"] in ("TOPIC_AUTHORIZATION_FAILED",
                                      "CLUSTER_AUTHORIZATION_FAILED"), err

        create_acls(b, [allow(ResourceType.TOPIC, hidden, "User:alice", AclOperation.DESCRIBE)])
        status, topics = call("GET", "/api/topics")
        names = {t["name"] for t in (topics["topics"] if isinstance(topics, dict) else topics)}
        assert hidden in names, names
    finally:
        proc.stop()

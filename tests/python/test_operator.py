"""Operator-facing defects, through the real binary and real clients: internal topics cannot be
deleted, one broker per data directory, listeners bound before anything is created, errors an
operator can read, KIP-848 clients refused at once, restored group members
expire, and a prompt clean shutdown."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import wire
from clients import confluent_consume, confluent_produce
from group_helpers import Member, create_topic, wait_for
from harness import find_binary, free_port

EXIT_TIMEOUT_S = 30.0
# What a prompt shutdown means here: idle clients and an SSE stream must not hold it up (it took
# 1.3-2 s before: the dashboard waited 2 s for SSE streams to end by themselves).
SHUTDOWN_PROMPT_S = 1.0


def run_cli(*args: str, env: dict | None = None, stdin_text: str = "",
            timeout_s: float = EXIT_TIMEOUT_S):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([str(find_binary()), *args], capture_output=True, text=True,
                          timeout=timeout_s, env=full_env, input=stdin_text)


def assert_operator_message(text: str) -> None:
    """No Rust Debug forms, no backtraces, no anyhow 'Caused by' blocks."""
    for bad in ("Some(", "Os {", "stack backtrace", "Caused by", "panicked"):
        assert bad not in text, f"{bad!r} in error output:\n{text}"


def commit_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        c.close()


def test_internal_topic_cannot_be_deleted_from_any_entry_point(broker_factory, topic_name):
    b = broker_factory(http=True)
    create_topic(b.bootstrap, topic_name, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit_offset(b.bootstrap, group, topic_name, 42)

    # Kafka API (confluent-kafka AdminClient).
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fut = admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"]
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=30)
    err = info.value.args[0]
    # (librdkafka reports the code only; the broker's message shows in the CLI and dashboard.)
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # DeleteRecords on every partition of it: INVALID_TOPIC_EXCEPTION, as Kafka answers.
    futures = admin.delete_records(
        [TopicPartition("__consumer_offsets", p, OFFSET_END) for p in range(50)],
        request_timeout=30)
    for tp, fut in futures.items():
        with pytest.raises(KafkaException) as info:
            fut.result(timeout=30)
        assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, (tp, info.value)

    # CLI.
    out = run_cli("topics", "delete", "__consumer_offsets", "--bootstrap", b.bootstrap)
    assert out.returncode != 0
    assert "internal topic" in out.stderr and "__consumer_offsets" in out.stderr, out.stderr
    assert_operator_message(out.stderr)

    # Dashboard API.
    req = urllib.request.Request(
        f"{b.http_url}/api/topics/__consumer_offsets?confirm=__consumer_offsets", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as http_info:
        urllib.request.urlopen(req, timeout=30)
    assert http_info.value.code == 403
    assert "internal topic" in json.loads(http_info.value.read())["error"]

    # Nothing was destroyed, also across a restart.
    assert committed(b.bootstrap, group, topic_name) == 42
    b.restart()
    assert committed(b.bootstrap, group, topic_name) == 42


def test_a_second_broker_on_the_same_data_dir_is_refused(broker_factory):
    first = broker_factory()
    port = free_port()
    out = run_cli("broker", "--listen", f"127.0.0.1:{port}", "--http-listen", "off",
                  "--data-dir", str(first.data_dir), env={"RUST_BACKTRACE": "1"})
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert str(first.data_dir) in text, text
    assert f"pid {first.pid}" in text, text
    assert "in use by another broker" in text, text
    assert_operator_message(text)
    # The first broker is untouched.
    with wire.connect(first.port) as sock:
        assert wire.api_versions(sock).error_code == 0


def test_a_taken_dashboard_port_fails_before_anything_is_created(tmp_path):
    data_dir = tmp_path / "never-created"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        http_port = taken.getsockname()[1]
        port = free_port()
        out = run_cli("broker", "--listen", f"127.0.0.1:{port}",
                      "--http-listen", f"127.0.0.1:{http_port}", "--data-dir", str(data_dir),
                      env={"RUST_BACKTRACE": "1"})
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert f"127.0.0.1:{http_port}" in text, text
    assert not data_dir.exists(), "the data directory was created before every listener was bound"
    assert_operator_message(text)
    assert text.count("Address already in use") == 1, text


def test_a_bad_data_dir_is_named_in_one_readable_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    out = run_cli("broker", "--listen", f"127.0.0.1:{free_port()}", "--http-listen", "off",
                  "--data-dir", str(not_a_dir / "data"), env={"RUST_BACKTRACE": "1"})
    assert out.returncode != 0
    assert f"cannot open data directory {not_a_dir / 'data'}" in out.stderr, out.stderr
    assert_operator_message(out.stderr)


def test_client_errors_have_no_debug_forms_or_backtraces(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    out = run_cli("produce", topic_name, "--partition", "99", "--bootstrap", broker.bootstrap,
                  env={"RUST_BACKTRACE": "1"}, stdin_text="hello\n")
    assert out.returncode != 0
    assert f"{topic_name}-99" in out.stderr, out.stderr
    assert_operator_message(out.stderr)


@pytest.mark.parametrize("form", ["localhost:{port}", "PLAINTEXT://127.0.0.1:{port}", ":{port}"])
def test_listen_accepts_kafka_listener_forms(broker_factory, form):
    b = broker_factory(start=False)
    default_command = b.command
    listen = form.format(port=b.port)

    def command() -> list[str]:
        cmd = default_command()
        cmd[cmd.index("--listen") + 1] = listen
        return cmd

    b.command = command
    b.start()
    assert f"--listen {listen}" in b.log_text()
    with wire.connect(b.port) as sock:
        assert wire.api_versions(sock).error_code == 0


def test_a_kip848_consumer_gets_a_fatal_error_at_once(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-848",
                  "group.protocol": "consumer"})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 10
        error = None
        while time.monotonic() < deadline and error is None:
            m = c.poll(0.5)
            if m is not None and m.error():
                error = m.error()
        assert error is not None, "no error within 10 s: the client was left retrying silently"
        assert error.fatal() or error.code() == KafkaError._FATAL, error
        assert "ConsumerGroupHeartbeat" in error.str(), error.str()
    finally:
        c.close()
    assert "KIP-848" in broker.log_text()


@pytest.mark.slow
def test_a_member_restored_after_a_restart_expires_on_its_session_timeout(broker_factory,
                                                                         topic_name):
    b = broker_factory(extra_args=["--group-initial-rebalance-delay-ms", "0"])
    create_topic(b.bootstrap, topic_name, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = Member(b.bootstrap, group, topic_name, session_timeout_ms=6000)
    try:
        wait_for(lambda: sorted(member.current()) == [0, 1], 60, "the member's assignment")
        b.stop()
        member.kill()  # dies while the broker is down: it never comes back
    finally:
        member.kill()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    def describe():
        return admin.describe_consumer_groups([group])[group].result(timeout=30)

    restored = describe()
    assert len(restored.members) == 1, "the member should be restored from __consumer_offsets"
    started = time.monotonic()
    wait_for(lambda: not describe().members, 30, "the dead member's session to expire")
    assert time.monotonic() - started < 15
    assert str(describe().state).endswith("EMPTY")
    # The group can be deleted now (it answered NON_EMPTY_GROUP forever before).
    admin.delete_consumer_groups([group])[group].result(timeout=30)


def test_clean_shutdown_is_prompt_with_idle_clients_and_an_sse_stream(broker_factory):
    b = broker_factory(http=True)
    idle = [wire.connect(b.port) for _ in range(5)]
    try:
        for sock in idle:
            assert wire.api_versions(sock).error_code == 0
        sse = urllib.request.urlopen(f"{b.http_url}/api/live/stream", timeout=30)
        assert sse.status == 200
        sse.read(1)  # the stream is open and has started
        started = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        code = b.proc.wait(timeout=EXIT_TIMEOUT_S)
        elapsed = time.monotonic() - started
        sse.close()
    finally:
        for sock in idle:
            sock.close()
    assert code == 0
    assert elapsed < SHUTDOWN_PROMPT_S, f"SIGTERM to exit took {elapsed:.2f}s"


def checked_bytes_per_start(log: str, topic: str) -> list[int]:
    """`recovery_checked_bytes` of `topic`'s "loaded topic" line, for every start in the log."""
    out = []
    for section in log.split("===== start #")[1:]:
        m = re.search(rf"loaded topic topic={re.escape(topic)} .*recovery_checked_bytes=(\d+)",
                      section)
        out.append(int(m.group(1)) if m else 0)
    return out


@pytest.mark.slow
def test_a_crash_loop_does_not_rescan_the_recovered_tail(broker_factory, topic_name):
    # No background flush: before the fix nothing moved the recovery point after an unclean
    # start until the first flush, so every restart of a crash loop re-scanned the same tail.
    b = broker_factory(extra_args=["--log-flush-background-ms", "0"])
    create_topic(b.bootstrap, topic_name, 1)
    confluent_produce(b.bootstrap, topic_name, "none", n=2000, extra={"acks": "1"})
    b.restart(hard=True)  # kill -9: the tail is re-scanned once
    time.sleep(1.0)  # well under the 1 s background-flush interval plus a tick, by default
    b.restart(hard=True)  # and again, before any flush
    first, second = checked_bytes_per_start(b.log_text(), topic_name)[1:3]
    assert first > 0, "the first unclean start should re-scan the unflushed tail"
    assert second == 0, f"the second start re-scanned {second} bytes already recovered"
    assert len(confluent_consume(b.bootstrap, topic_name, 1, 2000)) == 2000


def test_the_dashboard_warns_when_exposed_without_authentication(broker_factory):
    b = broker_factory(start=False)
    default_command = b.command

    def command() -> list[str]:
        cmd = default_command()
        cmd[cmd.index("--http-listen") + 1] = f"0.0.0.0:{free_port()}"
        return cmd

    b.command = command
    b.start()
    assert "the dashboard is reachable from the network and has no authentication" in b.log_text()


def test_the_dashboard_with_a_login_warns_only_that_it_is_plain_http(broker_factory):
    b = broker_factory(start=False)
    default_command = b.command

    def command() -> list[str]:
        cmd = default_command()
        cmd[cmd.index("--http-listen") + 1] = f"0.0.0.0:{free_port()}"
        return cmd + ["--http-auth", "required"]

    b.command = command
    b.start()
    log = b.log_text()
    assert "has no authentication" not in log
    assert "the dashboard asks for a login" in log
    assert "the dashboard login is plain HTTP on a non-loopback address" in log

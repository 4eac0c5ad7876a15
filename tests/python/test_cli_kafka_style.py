"""Kafka-style CLI spellings: `--bootstrap-server`/`-b`, `consume --from-beginning`, a config file
with Kafka's broker property names, and `broker --print-config`."""

from __future__ import annotations

import subprocess

from harness import BrokerProcess, find_binary, free_port

import wire

TIMEOUT_S = 60.0


def cli(*args: str, stdin_text: str = "") -> subprocess.CompletedProcess:
    out = subprocess.run([str(find_binary()), *args], capture_output=True, text=True,
                         input=stdin_text, timeout=TIMEOUT_S)
    assert out.returncode == 0, f"{args}: {out.stderr}"
    return out


def test_bootstrap_server_aliases_and_from_beginning(broker, topic_name):
    cli("topics", "create", topic_name, "--bootstrap-server", broker.bootstrap)
    cli("produce", topic_name, "-b", broker.bootstrap, stdin_text="one\ntwo\n")
    listed = cli("topics", "list", "-b", broker.bootstrap).stdout.split()
    assert topic_name in listed
    out = cli("consume", topic_name, "--bootstrap-server", broker.bootstrap, "--from-beginning",
              "-n", "2", "--idle-timeout-ms", "10000")
    assert out.stdout.split() == ["one", "two"]


def test_a_config_file_with_kafka_property_names(tmp_path):
    port = free_port()
    data = tmp_path / "kafka-style-data"
    conf = tmp_path / "server.toml"
    conf.write_text(
        f'listeners = "PLAINTEXT://127.0.0.1:{port}"\n'
        f'log.dirs = "{data}"\n'
        '"num.partitions" = 3\n'
        "log.retention.ms = 3600000\n"
    )
    printed = cli("broker", "--config", str(conf), "--http-listen", "off", "--print-config").stdout
    assert f'listen = "127.0.0.1:{port}"' in printed
    assert f'data_dir = "{data}"' in printed
    assert "num_partitions = 3" in printed
    assert "retention_ms = 3600000" in printed
    assert not data.exists(), "--print-config must not start anything"
    # What it prints is itself a valid config file with the same meaning.
    again = tmp_path / "printed.toml"
    again.write_text(printed)
    assert cli("broker", "--config", str(again), "--print-config").stdout == printed

    b = BrokerProcess(tmp_path)
    b.port = port
    b.command = lambda: [str(find_binary()), "broker", "--config", str(conf), "--http-listen", "off"]
    try:
        b.start()
        with wire.connect(port) as sock:
            assert wire.api_versions(sock).error_code == 0
        assert (data / ".lock").exists()
    finally:
        b.stop()

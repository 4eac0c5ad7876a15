"""A partition leader cut off from the other brokers while clients still reach it, with network
namespaces: three brokers, each in a namespace this test creates, joined by veth pairs to one
bridge in the test's own namespace (where the clients run). Blackhole routes inside the leader's
namespace cut it off from the other two brokers only. It must stop acknowledging acks=all writes,
the others elect a new leader, and once the routes are gone it rejoins as a follower and truncates
what it alone had: every acknowledged message is present once and the replicas agree.

Needs root and iproute2 (`ip netns`); skipped without them. Only addresses in a subnet this test
creates are used.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time

import pytest

import wire
from harness import BrokerProcess
import test_cluster
from test_cluster import admin, placement, wait_for
from test_replication_cluster import (
    PARTITIONS, TOPIC, Checker, check_acknowledged, check_replicas_identical, create_replicated,
    full_isr, read_all,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for ip netns")


def ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    subprocess.run(cmd, check=True, capture_output=True)


UNROUTED_RANGE = "198.18.0.0/15"


class Net:
    """A bridge with three namespaces on 10.<a>.<b>.0/24 (random, per test run)."""

    def __init__(self):
        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.bridge = f"sfbr{tag}"[:15]
        # RFC 2544's benchmarking range (198.18.0.0/15), which nothing else here uses. The
        # unreachable route (below each bridge's own) keeps every late packet off the default
        # route: a client thread still retrying after teardown, even at interpreter exit (a
        # failed test's traceback keeps its clients alive until then). So it is never removed:
        # `replace` makes adding it again a no-op.
        self.subnet = f"198.{random.randrange(18, 20)}.{random.randrange(1, 250)}"
        ip("route", "replace", "unreachable", UNROUTED_RANGE, "metric", "4000")
        self.namespaces = [f"sf{tag}n{i}" for i in range(1, 4)]
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces, start=1):
            host, inner = f"sfh{tag}{i}"[:15], f"sfi{tag}{i}"[:15]
            ip("netns", "add", ns)
            ip("link", "add", host, "type", "veth", "peer", "name", inner)
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", host, "master", self.bridge)
            ip("link", "set", host, "up")
            ip("link", "set", "lo", "up", ns=ns)
            ip("addr", "add", f"{self.addr(i)}/24", "dev", inner, ns=ns)
            ip("link", "set", inner, "up", ns=ns)

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def cut_off(self, i: int) -> None:
        """Broker i can reach neither other broker (the clients on the bridge still reach it)."""
        for j in range(1, 4):
            if j != i:
                ip("route", "add", "blackhole", f"{self.addr(j)}/32", ns=self.namespaces[i - 1])

    def heal(self, i: int) -> None:
        for j in range(1, 4):
            if j != i:
                ip("route", "del", "blackhole", f"{self.addr(j)}/32", ns=self.namespaces[i - 1])

    def close(self) -> None:
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        # The unreachable route for the whole range stays (see __init__).


class NetnsBroker(BrokerProcess):
    """A broker inside namespace `ns`, listening on `addr`."""

    def __init__(self, work_dir, ns: str, addr: str, node_id: int, voters: str):
        super().__init__(work_dir, name=f"broker-{node_id}")
        self.ns, self.addr = ns, addr
        self.host, self.port = addr, 9092
        self.extra_args = [
            "--node-id", str(node_id), "--controller-quorum-voters", voters,
            "--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
            "--offsets-topic-partitions", "3",
        ]
        self.env["RUST_LOG"] = "info,openraft=error"

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns] + super().command()


def leader_seen_by(b, partition: int) -> int:
    """Partition `partition`'s leader in `b`'s own Metadata answer (asked of `b` alone: a
    client with every broker bootstrapped may ask the cut-off one, which still names itself)."""
    try:
        with wire.connect(b.port, timeout_s=2.0, host=b.host) as sock:
            return wire.metadata_v1(sock, [TOPIC])["leaders"][TOPIC].get(partition, -1)
    except (OSError, wire.WireError, KeyError):
        return -1


@pytest.fixture
def net():
    try:
        n = Net()
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot create network namespaces here: {e.stderr.decode(errors='replace').strip()}")
    yield n
    n.close()


def test_a_leader_cut_off_from_the_other_brokers_stops_acknowledging_and_truncates(net, tmp_path, broker_bin):
    voters = ",".join(f"{i}@{net.addr(i)}:9093" for i in range(1, 4))
    brokers = [NetnsBroker(tmp_path, net.namespaces[i - 1], net.addr(i), i, voters) for i in range(1, 4)]
    from concurrent.futures import ThreadPoolExecutor
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda b: b.start(timeout_s=60), brokers))
        create_replicated(brokers[0])
        wait_for("the ISR full", lambda: full_isr(brokers[0]))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        with Checker(bootstrap) as checker:
            wait_for("first acks", lambda: checker.acked_count() > 100)
            victim_id = placement(brokers[0], TOPIC)[0][0]
            others = [b for b in brokers if b is not brokers[victim_id - 1]]
            net.cut_off(victim_id)
            cut_at = time.monotonic()
            try:
                new = wait_for("a new leader among the others", lambda: (lambda leader: leader if leader not in (
                    -1, victim_id) else None)(leader_seen_by(others[0], 0)))
                print(f"broker {victim_id} cut off: partition 0 led by {new} after "
                      f"{time.monotonic() - cut_at:.1f} s")
                before = checker.acked_count()
                wait_for("acks without the cut-off broker", lambda: checker.acked_count() > before + 100)
            finally:
                net.heal(victim_id)
            wait_for("the ISR full again", lambda: full_isr(others[0]), timeout_s=90)
            checker.finish()
        got = read_all(bootstrap)
        check_acknowledged(checker, got)
        print(f"{checker.acked_count()} acknowledged; all present once, in order, over {PARTITIONS} partitions")
        check_replicas_identical(brokers)
        truncated = "truncat" in brokers[victim_id - 1].log_text().lower()
        print(f"the cut-off broker's log mentions truncation: {truncated}")
    finally:
        for b in brokers:
            b.kill()
            # Its cached admin client would keep reconnecting to an address that is gone.
            test_cluster._admins.pop(b.bootstrap, None)

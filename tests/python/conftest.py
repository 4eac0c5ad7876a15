"""Fixtures that run the real `streamforge broker` binary for the integration tests.

- `broker`: a fresh broker for one test (free loopback port, temp data dir).
- `shared_broker`: one broker per test module, for tests that only need distinct topics.
- `broker_factory`: start brokers with extra flags/env (`broker_factory(extra_args=[...])`).
Every `BrokerProcess` offers `.restart(hard=False)`, `.stop()` (SIGTERM then SIGKILL), `.kill()`
(SIGKILL) and `.bootstrap`. When a test fails, the logs of the brokers it used are attached to the
failure report.
"""

from __future__ import annotations

import re
import uuid

import pytest

from harness import BrokerProcess, find_binary


class BrokerFactory:
    def __init__(self, tmp_path_factory, base_name: str):
        self._tmp_path_factory = tmp_path_factory
        self._base_name = base_name
        self.brokers: list[BrokerProcess] = []

    def __call__(self, extra_args=None, env=None, http=False, start=True) -> BrokerProcess:
        work = self._tmp_path_factory.mktemp(self._base_name)
        b = BrokerProcess(work, extra_args=extra_args, env=env, http=http)
        self.brokers.append(b)
        if start:
            b.start()
        return b

    def close(self) -> None:
        # Every broker is asked to stop at once: stopped one after another, the last members
        # of a cluster wait for peers that are already gone (up to the stop timeout each).
        for b in self.brokers:
            b.request_stop()
        for b in self.brokers:
            b.stop()


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]


@pytest.fixture(scope="session")
def broker_bin():
    path = find_binary()
    if not path.exists():
        pytest.fail(f"streamforge binary not found at {path}: run `cargo build -p streamforge` or set STREAMFORGE_BIN")
    return path


@pytest.fixture
def broker_factory(broker_bin, tmp_path_factory, request):
    factory = BrokerFactory(tmp_path_factory, _safe_name(request.node.name))
    yield factory
    factory.close()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(broker_bin, tmp_path_factory, request):
    factory = BrokerFactory(tmp_path_factory, _safe_name(request.module.__name__))
    b = factory()
    yield b
    factory.close()


@pytest.fixture
def topic_name(request) -> str:
    """A unique, valid topic name derived from the test name."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:150]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    brokers: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            brokers.append(value)
        elif isinstance(value, BrokerFactory):
            brokers.extend(value.brokers)
    seen = set()
    for b in brokers:
        if id(b) in seen:
            continue
        seen.add(id(b))
        report.sections.append(
            (f"streamforge log ({b.log_path}, last lines)", b.log_tail())
        )


# The files that take longest (their tests' total in a CI run, slowest first). With
# `-n N --dist loadfile --no-loadscope-reorder` (scripts/test) pytest-xdist hands files to its
# workers in collection order, so these start first, each on its own worker, and the short files
# fill the gaps: started last, the 20-kill replication test alone ran two minutes past the rest.
SLOWEST_FILES = (
    "test_replication_cluster.py",
    "test_librdkafka_examples.py",
    "test_quotas.py",
    "test_inter_broker_security.py",
    "test_min_isr_cluster.py",
    "test_compaction.py",
    "test_transactions.py",
    "test_tiered_storage.py",
    "test_security.py",
    "test_oauthbearer.py",
    "test_txn_cluster.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FILES)))

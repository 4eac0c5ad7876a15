"""librdkafka's own transactional examples compiled at test time against the librdkafka the
`rdkafka-sys` crate built, and run against the real broker as against Kafka:

- `examples/transactions.c` (KIP-447 style: one transactional producer, a cooperative-sticky
  consumer group, offsets sent to the transaction with the group metadata);
- `examples/transactions-older-broker.c` (before KIP-447: one transactional producer per input
  partition, transactional id `..._<topic>-<partition>`, eager rebalancing).

Both read integers from the input topic's values, sum the integers of each message and produce
the sum under the same key to the output topic, committing a transaction (with the input
offsets) every 100 messages or 5 s. SIGINT ends their loop; closing the consumer commits the
open transaction (transactions.c) or aborts it (the older one, which then redoes that input in
its next run). The older one looks at the clock only when a message arrives, so the test feeds
it "tick" messages without integers (which it ignores) while waiting; and it keeps the default
`auto.offset.reset=latest`, so its first run is started (and has committed offsets for every
partition, from ticks) before the input is fed. We feed input, let the
example process everything, stop it with SIGINT, feed more, run it again (it resumes from the
offsets its transactions committed), and check that the output read with read_committed holds
the transformed input exactly once and that the group's committed offsets are the input's ends
(transactions.c; the older one's last ticks may be aborted at SIGINT, so at most the ends).

Nothing of librdkafka is committed here: the sources, headers and static library come from the
cargo build (`$CARGO_TARGET_DIR/*/build/rdkafka-sys-*/out`, the newest; built on demand with
`cargo build -p streamforge-it` when missing), the binary goes to a temp dir.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import REPO_ROOT
from test_transactions import read_all

# Bound on every wait for the example to catch up, and on its exit after SIGINT.
WAIT_S = 120.0
EXIT_WAIT_S = 60.0
# Building librdkafka from source when the cargo build has not yet (a few minutes on 2 cores).
CARGO_BUILD_TIMEOUT_S = 1800
# Seconds between the "tick" messages fed to each input partition while waiting.
TICK_INTERVAL_S = 1.0
INPUT_PARTITIONS = 3
OUTPUT_PARTITIONS = 3
FIRST_BATCH = 300
SECOND_BATCH = 200
# Added to each input number, so each message holds two integers to sum.
QTY = 7


def target_dir() -> Path:
    t = os.environ.get("CARGO_TARGET_DIR")
    d = Path(t) if t else REPO_ROOT / "target"
    return d if d.is_absolute() else REPO_ROOT / d


def newest_librdkafka_build() -> Path | None:
    """The newest `rdkafka-sys` build output dir (holding `src/librdkafka.a`) of any profile."""
    libs = list(target_dir().glob("*/build/rdkafka-sys-*/out/src/librdkafka.a"))
    if not libs:
        return None
    return max(libs, key=lambda p: p.stat().st_mtime).parent.parent


def registry_example(name: str) -> Path | None:
    """`examples/<name>` of the newest rdkafka-sys crate sources in the cargo registry."""
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))

    def version(p: Path) -> tuple[int, ...]:
        m = re.search(r"rdkafka-sys-(\d+)\.(\d+)\.(\d+)", str(p))
        return tuple(int(x) for x in m.groups()) if m else (0,)

    found = sorted(home.glob(f"registry/src/*/rdkafka-sys-*/librdkafka/examples/{name}"), key=version)
    return found[-1] if found else None


@pytest.fixture(scope="module")
def librdkafka() -> Path:
    """The librdkafka build dir: headers and library in `src/`, the link libraries in
    `Makefile.config`. Built with cargo when this target dir has none yet."""
    out = newest_librdkafka_build()
    if out is None:
        cargo = shutil.which("cargo")
        assert cargo, "cargo is needed to build librdkafka (the rdkafka-sys crate)"
        subprocess.run([cargo, "build", "-p", "streamforge-it"], cwd=REPO_ROOT, check=True,
                       timeout=CARGO_BUILD_TIMEOUT_S)
        out = newest_librdkafka_build()
    assert out is not None, f"no rdkafka-sys build under {target_dir()}"
    return out


def link_libraries(out: Path) -> list[str]:
    """What librdkafka was configured to link (`LIBS` in its Makefile.config). rdkafka-sys
    builds zstd itself (the zstd-sys crate), so `-lzstd` becomes that static library when the
    system has no development copy."""
    libs: list[str] = []
    for line in (out / "Makefile.config").read_text().splitlines():
        if line.startswith("LIBS+="):
            libs += line.split("=", 1)[1].split()
    resolved: list[str] = []
    for lib in dict.fromkeys(libs):  # keep order, drop repeats
        if lib == "-lzstd":
            static = sorted(out.parent.parent.glob("zstd-sys-*/out/libzstd.a"), key=lambda p: p.stat().st_mtime)
            if static:
                resolved.append(str(static[-1]))
                continue
        resolved.append(lib)
    return resolved


def compile_example(out: Path, name: str, dest: Path) -> Path:
    """Compiles librdkafka's `examples/<name>` (from the build's own source tree, else the
    registry's crate sources) against the static library, into `dest`."""
    source = out / "examples" / name
    if not source.exists():
        source = registry_example(name)
    assert source is not None and source.exists(), f"librdkafka's examples/{name} not found"
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (cc) is needed: scripts/setup installs build-essential"
    binary = dest / Path(name).stem
    cmd = [cc, "-O1", "-o", str(binary), f"-I{out / 'src'}", str(source),
           str(out / "src" / "librdkafka.a"), *link_libraries(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return binary


def create_topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        f.result(timeout=30)


def produce_inputs(bootstrap: str, topic: str, first: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        p.produce(topic, key=f"k{i}".encode(), value=f"order {i} qty {QTY}".encode())
    assert p.flush(30) == 0


def read_committed(bootstrap: str, topic: str, partitions: int, idle_s: float = 2.0) -> list[tuple[str, str]]:
    """Every (key, value) of the topic as a read_committed consumer sees it, until idle."""
    return read_all(bootstrap, topic, "read_committed", partitions, idle_s,
                    item=lambda m: (m.key().decode(), m.value().decode()), wait_s=WAIT_S)


class Example:
    """One run of the compiled example, its output in a log file."""

    def __init__(self, binary: Path, bootstrap: str, input_topic: str, output_topic: str, log: Path):
        self.log = log
        self._fd = open(log, "ab")
        self.proc = subprocess.Popen([str(binary), bootstrap, input_topic, output_topic],
                                     stdout=self._fd, stderr=subprocess.STDOUT)

    def interrupt(self) -> int:
        """SIGINT (the example's stop signal), then its exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=EXIT_WAIT_S)
        finally:
            self._fd.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._fd.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_until(what: str, done, bootstrap: str, inputs: str, example: Example, ticks: bool) -> None:
    """Waits for `done()`, feeding ticks to every input partition meanwhile when asked."""
    ticker = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert example.proc.poll() is None, f"the example exited early:\n{example.text()[-4000:]}"
        if done():
            return
        if ticks:
            for p in range(INPUT_PARTITIONS):
                ticker.produce(inputs, key=b"tick", value=b"tick", partition=p)
            ticker.flush(10)
        time.sleep(TICK_INTERVAL_S)
    pytest.fail(f"the example did not reach {what} in {WAIT_S} s:\n{example.text()[-4000:]}")


def wait_for_output(bootstrap: str, inputs: str, topic: str, want: int, example: Example, ticks: bool) -> None:
    def done() -> bool:
        return len(read_committed(bootstrap, topic, OUTPUT_PARTITIONS, idle_s=1.0)) >= want

    wait_until(f"{want} committed outputs", done, bootstrap, inputs, example, ticks)


@pytest.mark.parametrize(
    ("source", "group", "ticks"),
    [
        ("transactions.c", "librdkafka_transactions_example_group", False),
        ("transactions-older-broker.c", "librdkafka_transactions_older_example_group", True),
    ],
)
def test_librdkafka_transactions_example_transforms_input_exactly_once(
    broker, librdkafka, tmp_path, topic_name, source, group, ticks
):
    binary = compile_example(librdkafka, source, tmp_path)
    inputs, outputs = f"{topic_name}-in", f"{topic_name}-out"
    bootstrap = broker.bootstrap
    create_topics(bootstrap, (inputs, INPUT_PARTITIONS), (outputs, OUTPUT_PARTITIONS))

    # Run 1: the first batch, then SIGINT once all of it is committed.
    if not ticks:
        produce_inputs(bootstrap, inputs, 0, FIRST_BATCH)
    run1 = Example(binary, bootstrap, inputs, outputs, tmp_path / "run1.log")
    try:
        if ticks:
            # It starts at the end: wait for a commit on every partition, then feed the input.
            def committed_everywhere() -> bool:
                text = run1.text()
                return all(f"Committing transaction for {inputs} [{p}]" in text for p in range(INPUT_PARTITIONS))

            wait_until("a commit on every partition", committed_everywhere, bootstrap, inputs, run1, ticks)
            produce_inputs(bootstrap, inputs, 0, FIRST_BATCH)
        wait_for_output(bootstrap, inputs, outputs, FIRST_BATCH, run1, ticks)
        assert run1.interrupt() == 0, run1.text()[-4000:]
    finally:
        run1.kill()
    assert "Committing transaction" in run1.text()
    assert "FATAL" not in run1.text(), run1.text()[-4000:]

    # Run 2 resumes from the offsets the transactions committed: only the new batch is added.
    produce_inputs(bootstrap, inputs, FIRST_BATCH, SECOND_BATCH)
    run2 = Example(binary, bootstrap, inputs, outputs, tmp_path / "run2.log")
    try:
        wait_for_output(bootstrap, inputs, outputs, FIRST_BATCH + SECOND_BATCH, run2, ticks)
        assert run2.interrupt() == 0, run2.text()[-4000:]
    finally:
        run2.kill()
    assert "FATAL" not in run2.text(), run2.text()[-4000:]

    got = read_committed(bootstrap, outputs, OUTPUT_PARTITIONS)
    assert all(k != "tick" for k, _ in got), "ticks hold no integers and produce nothing"
    keys = [k for k, _ in got]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} outputs duplicated"
    want = {f"k{i}": str(i + QTY) for i in range(FIRST_BATCH + SECOND_BATCH)}
    assert dict(got) == want

    # The input offsets went into the transactions: the group has committed the input's ends.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(inputs, p) for p in range(INPUT_PARTITIONS)], timeout=30)
        ends = [c.get_watermark_offsets(TopicPartition(inputs, p), timeout=30)[1] for p in range(INPUT_PARTITIONS)]
    finally:
        c.close()
    offsets = [tp.offset for tp in committed]
    if ticks:
        # The ticks read after the last commit were aborted at SIGINT; the real input was not.
        assert all(0 < o <= end for o, end in zip(offsets, ends)), (offsets, ends)
    else:
        assert offsets == ends
        assert sum(ends) == FIRST_BATCH + SECOND_BATCH

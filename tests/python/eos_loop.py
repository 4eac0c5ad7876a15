"""The exactly-once kill loops' shared parts (test_transactions.py, test_txn_cluster.py): the
consume-transform-produce app (txn_app.py) as a child process whose progress the test follows,
the numbered input, and the final check of the output and the group's offsets.

Input `m{i}` goes to partition `i % partitions` of `src`; the app writes `M{i}` to the same
partition of `dst`. Exactly once, in order: each partition of `dst` read with read_committed from
the beginning by a fresh consumer is exactly the upper-cased input of that partition, in input
order, and the group's committed offsets are the input's end offsets.

`SF_EOS_KILLS=N` (the long mode) makes every kill loop kill N times instead of its CI default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

APP = Path(__file__).with_name("txn_app.py")
HUNG_EXIT_CODE = 3  # txn_app.HUNG_EXIT_CODE
FENCED_EXIT_CODE = 4  # txn_app.FENCED_EXIT_CODE
# Bound on every wait of the loops: a restarted broker serves again, and the app commits again,
# well within this (a stuck transaction or a hung client fails the test here).
PROGRESS_WAIT_S = 60.0


def kills(ci_default: int) -> int:
    """How many kills a loop does: `SF_EOS_KILLS` when set (the long mode), else `ci_default`."""
    return int(os.environ.get("SF_EOS_KILLS", ci_default))


class Feeder:
    """Writes the numbered input (idempotent, acks=all), a batch at a time."""

    def __init__(self, bootstrap: str, src: str, partitions: int):
        self.src, self.partitions = src, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, "reconnect.backoff.max.ms": 1000})
        self.n = 0

    def feed(self, count: int) -> None:
        for i in range(self.n, self.n + count):
            while True:
                try:
                    self.producer.produce(self.src, f"m{i}".encode(), partition=i % self.partitions)
                    break
                except BufferError:
                    self.producer.poll(0.1)
        self.n += count
        left = self.producer.flush(PROGRESS_WAIT_S)
        assert left == 0, f"{left} inputs not acknowledged in {PROGRESS_WAIT_S} s"


class AppProcess:
    """txn_app.py as a child process; `committed` follows its `committed N` lines (N counts this
    process's committed inputs; `total` sums every process's)."""

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, partitions: int, per_txn: int,
                 timeouts_ms: tuple[int, int] | None = None):
        self.init_args = (bootstrap, src, dst, group, partitions, per_txn)
        self.init_kwargs = {"timeouts_ms": timeouts_ms}
        self.args = [sys.executable, str(APP), bootstrap, src, dst, group, str(partitions), str(per_txn)]
        self.args += [str(t) for t in timeouts_ms or ()]
        self.where = (bootstrap, src, group, partitions)
        self.proc: subprocess.Popen | None = None
        self.previous_total = 0
        self.committed = 0
        self.stats: dict[str, int] = {}
        self.branches: dict[str, int] = {}  # `branch NAME` lines: abort, reinit, fenced
        self.stopped = threading.Event()  # a `stopped WHERE` line came
        self.runs = 0
        self.stderr_tail: list[str] = []

    @property
    def total(self) -> int:
        return self.previous_total + self.committed

    def start(self) -> None:
        assert self.proc is None
        self.previous_total += self.committed
        self.committed = 0
        self.runs += 1
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._follow, args=(self.proc,), daemon=True).start()
        threading.Thread(target=self._errors, args=(self.proc,), daemon=True).start()

    def _follow(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            if line.startswith("committed "):
                self.committed = int(line.split()[1])
            elif line.startswith("branch "):
                name = line.split()[1]
                self.branches[name] = self.branches.get(name, 0) + 1
            elif line.startswith("stopped "):
                self.stopped.set()
            elif line.startswith("stats "):
                for kv in line.split()[1:]:
                    k, v = kv.split("=")
                    self.stats[k] = self.stats.get(k, 0) + int(v)

    def _errors(self, proc: subprocess.Popen) -> None:
        log = open(os.environ["EOS_APP_STDERR"], "a") if os.environ.get("EOS_APP_STDERR") else None
        for line in proc.stderr:
            if log:
                log.write(line)
                log.flush()
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-20:]
            if line.startswith("txn_app: error "):
                key = " ".join(line.split(":")[1].split()[1:])  # "error NAME (where)"
                self.stats[key] = self.stats.get(key, 0) + 1

    def restart_if_hung(self) -> bool:
        """Start the app again when it exited because a client call hung past its timeout (a
        client bug, see txn_app.py: a supervisor restarts such an app); counted in `stats`."""
        if self.proc.poll() != HUNG_EXIT_CODE:
            return False
        time.sleep(0.2)  # the stderr reader counts the HUNG line
        self.stats["restarts after a hung client call"] = self.stats.get("restarts after a hung client call", 0) + 1
        self.proc = None
        self.start()
        return True

    def wait_progress(self, beyond: int, what: str) -> None:
        """Wait until this process has committed more than `beyond` inputs (inputs committed by
        this process: a restart after a hang starts from 0)."""
        deadline = time.monotonic() + PROGRESS_WAIT_S
        while self.committed <= beyond:
            if self.restart_if_hung():
                beyond = -1
                deadline = time.monotonic() + PROGRESS_WAIT_S
                continue
            assert self.proc.poll() is None, f"the app exited ({self.proc.returncode}) {what}: {self.stderr_tail}"
            assert time.monotonic() < deadline, f"no commit for {PROGRESS_WAIT_S} s {what}: {self.diagnosis()}"
            time.sleep(0.05)

    def diagnosis(self) -> str:
        """What a stuck app was waiting for: the group's committed offsets as a plain read
        answers them and as require_stable (read_committed) answers them, the input's ends, the
        app's progress and its last log lines."""
        bootstrap, src, group, partitions = self.where
        tps = [TopicPartition(src, p) for p in range(partitions)]
        out = [f"committed inputs: {self.total}"]
        for isolation in ("read_uncommitted", "read_committed"):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                          "isolation.level": isolation})
            try:
                out.append(f"{isolation} committed: {[tp.offset for tp in c.committed(tps, timeout=10)]}")
                ends = [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
                out.append(f"{isolation} ends: {ends}")
            except KafkaException as e:
                out.append(f"{isolation}: {e}")
            finally:
                c.close()
        try:
            got = read_committed(bootstrap, src, partitions, want=1 << 30, wait_s=5)
            out.append(f"a fresh read_committed consumer reads {[len(v) for v in got.values()]} in 5 s")
        except KafkaException as e:
            out.append(f"a fresh read_committed consumer: {e}")
        return "; ".join(out) + f"; app log: {self.stderr_tail}"

    def stop(self, where: str) -> None:
        """Have the app stop itself with SIGSTOP in its next transaction (`before-send`: its
        messages produced, still in the client; `after-send`: delivered), and wait until it has."""
        self.stopped.clear()
        self.proc.stdin.write(f"stop-{where}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + PROGRESS_WAIT_S
        while not self.stopped.wait(0.1):
            assert self.proc.poll() is None, f"the app exited ({self.proc.returncode}) before stopping: {self.stderr_tail}"
            assert time.monotonic() < deadline, f"the app did not stop {where} in {PROGRESS_WAIT_S} s"

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def wait_exit(self, timeout_s: float = PROGRESS_WAIT_S) -> int:
        """Wait for the app to exit by itself; its exit code."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the app did not exit in {timeout_s} s: {self.stderr_tail}") from None
        time.sleep(0.2)  # the stdout reader takes the stats line
        self.proc = None
        return rc

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def finish(self, timeout_s: float = 180.0) -> None:
        """Let the app exit once it has drained the input; it must exit 0."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.proc.stdin.close()
            try:
                rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
            if not self.restart_if_hung():
                break
        if self.proc.poll() is None:
            diagnosis = self.diagnosis()
            self.kill()
            raise AssertionError(f"the app did not drain the input in {timeout_s} s: {diagnosis}")
        rc = self.proc.returncode
        time.sleep(0.2)  # the stdout reader takes the stats line
        assert rc == 0, f"the app failed: {self.stderr_tail}"
        self.proc = None


# The stopped app's timeouts (transaction.timeout.ms, message.timeout.ms): short, so the stops
# are short, yet far above what one of its transactions takes.
STOP_TIMEOUTS_MS = (3000, 1000)


def stop_past_timeouts_and_fence(app: AppProcess, feed, rounds: int = 1) -> AppProcess:
    """Drives the app (started with `timeouts_ms`, e.g. STOP_TIMEOUTS_MS, committing) `rounds`
    times through its three failure branches with real failures, `feed()` giving it input before
    each; returns the instance that carries on (the last new one, running).

    1. `abort`: SIGSTOP with the transaction's messages still queued in the client, for longer
       than message.timeout.ms but shorter than transaction.timeout.ms: at SIGCONT librdkafka
       times the messages out, an abortable error (with an epoch bump); the app aborts, rewinds
       and goes on. A stop that came after the messages left makes no error: tried again.
    2. `reinit`: SIGSTOP once the messages are delivered, past transaction.timeout.ms: the
       coordinator aborts the transaction under a bumped epoch, and at SIGCONT the app's next
       request (AddOffsetsToTxn v0) is answered INVALID_PRODUCER_EPOCH, librdkafka's fatal
       _FENCED, as on Kafka; nobody else committed, so the app starts a new producer, rewinds
       and goes on.
    3. `fenced`: SIGSTOP once the messages are delivered; a new instance starts under the same
       transactional.id and group, fences the stopped one with its InitProducerId (which aborts
       the open transaction) and commits; at SIGCONT the zombie's next request is fenced, it
       finds the new instance's commits and exits with FENCED_EXIT_CODE. Then the same with the
       zombie stopped before sending (usually before its AddPartitionsToTxn, so the new
       instance's InitProducerId bumps the epoch once, with nothing to abort): its messages
       time out, and its abort asks for a bump of its own, fenced, epoch (KIP-360
       InitProducerId), which is PRODUCER_FENCED as on Kafka: it exits too.
    """
    started = time.monotonic()
    try:
        for round_ in range(rounds):
            stops = _abort_after_a_stop_before_sending(app, feed)
            print(f"round {round_}: aborted after a stop before sending ({stops} stops): {time.monotonic() - started:.1f} s")
            _reinit_after_a_stop_past_the_transaction_timeout(app, feed)
            print(f"round {round_}: re-initialised after a stop past the transaction timeout: {time.monotonic() - started:.1f} s")
            for where in ("after-send", "before-send"):
                app = _fence_a_stopped_zombie(app, feed, where)
                print(f"round {round_}: the zombie stopped {where} exited: {time.monotonic() - started:.1f} s")
    except BaseException:
        if app.proc is not None:  # a new instance the caller does not know of
            app.kill()
        raise
    return app


def _timeouts_s(app: AppProcess) -> tuple[float, float]:
    """The app's transaction.timeout.ms and message.timeout.ms, in seconds."""
    txn_timeout_ms, message_timeout_ms = app.init_kwargs["timeouts_ms"]
    return txn_timeout_ms / 1000, message_timeout_ms / 1000


def _abort_after_a_stop_before_sending(app: AppProcess, feed) -> int:
    """Step 1 of `stop_past_timeouts_and_fence`; how many stops it took."""
    # A stop after the messages left makes no error; under load the abort may also come after
    # the coordinator's timeout (then it is fenced and the app re-initialises): stopped again.
    for attempt in range(4):
        feed()
        before = app.branches.get("abort", 0)
        app.stop("before-send")
        mark = app.committed
        time.sleep(_timeouts_s(app)[1] + 0.4)  # the client's timeout scan is due at once then
        app.resume()
        app.wait_progress(mark, "after a stop before its messages were sent")
        if app.branches.get("abort", 0) > before:
            return attempt + 1
    raise AssertionError(f"no stop before sending made the app abort: {app.branches} {app.stderr_tail}")


def _reinit_after_a_stop_past_the_transaction_timeout(app: AppProcess, feed) -> None:
    """Step 2 of `stop_past_timeouts_and_fence`."""
    feed()
    before = app.branches.get("reinit", 0)
    app.stop("after-send")
    mark = app.committed
    time.sleep(_timeouts_s(app)[0] + 1.5)
    app.resume()
    app.wait_progress(mark, "after a stop past the transaction timeout")
    assert app.branches.get("reinit", 0) > before, f"not re-initialised: {app.branches} {app.stderr_tail}"


def _fence_a_stopped_zombie(app: AppProcess, feed, where: str) -> AppProcess:
    """Step 3 of `stop_past_timeouts_and_fence` with the zombie stopped `where`; the new
    instance, running, with the zombie's counts added to its own."""
    feed()
    fenced = app.branches.get("fenced", 0)
    app.stop(where)
    stopped_at = time.monotonic()
    successor = AppProcess(*app.init_args, **app.init_kwargs)
    successor.previous_total = app.total
    successor.start()
    try:
        successor.wait_progress(0, "the new instance's first commits")
        # Stopped before sending, the zombie's messages time out: its abort then asks for a bump
        # of its fenced epoch (KIP-360), which must be refused.
        time.sleep(max(0.0, stopped_at + _timeouts_s(app)[1] + 0.6 - time.monotonic()))
        app.resume()
        rc = app.wait_exit()
        assert rc == FENCED_EXIT_CODE, f"the zombie stopped {where} exited {rc}: {app.stderr_tail}"
        assert app.branches.get("fenced", 0) == fenced + 1, app.branches
    except BaseException:
        for p in (app, successor):  # the caller only knows the instance it passed
            if p.proc is not None:
                p.kill()
        raise
    for k, v in app.stats.items():
        successor.stats[k] = successor.stats.get(k, 0) + v
    for k, v in app.branches.items():
        successor.branches[k] = successor.branches.get(k, 0) + v
    return successor


def read_committed(bootstrap: str, topic: str, partitions: int, want: int, idle_s: float = 3.0,
                   wait_s: float = 90.0) -> dict[int, list[str]]:
    """Every partition's values as a fresh read_committed consumer reads them from the start,
    until `want` values came and nothing more for `idle_s`, or `wait_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[str]] = {p: [] for p in range(partitions)}
    count = 0
    deadline = time.monotonic() + wait_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and not (count >= want and time.monotonic() - last > idle_s):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF or m.error().retriable():
                    continue
                raise KafkaException(m.error())
            got[m.partition()].append(m.value().decode())
            count += 1
            last = time.monotonic()
    finally:
        c.close()
    return got


def check_exactly_once(bootstrap: str, src: str, dst: str, group: str, partitions: int, n: int) -> None:
    """The output is every input exactly once, per partition in input order, and the group's
    committed offsets are the input's end."""
    got = read_committed(bootstrap, dst, partitions, n)
    for p in range(partitions):
        want = [f"M{i}" for i in range(p, n, partitions)]
        if got[p] != want:
            seen = set(got[p])
            dups = len(got[p]) - len(seen)
            missing = [v for v in want if v not in seen][:10]
            first_diff = next((i for i, (a, b) in enumerate(zip(got[p], want)) if a != b), min(len(got[p]), len(want)))
            raise AssertionError(
                f"partition {p} of {dst}: {len(got[p])} records, {len(want)} inputs, {dups} duplicates, "
                f"missing {missing}, first difference at {first_diff}: "
                f"{got[p][first_diff:first_diff + 5]} against {want[first_diff:first_diff + 5]}")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(src, p) for p in range(partitions)], timeout=30)
        ends = [c.get_watermark_offsets(TopicPartition(src, p), timeout=10, cached=False)[1] for p in range(partitions)]
    finally:
        c.close()
    assert [tp.offset for tp in committed] == ends, (committed, ends)
    assert sum(ends) == n, (ends, n)

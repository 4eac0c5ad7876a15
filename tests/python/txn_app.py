"""A consume-transform-produce app with exactly-once semantics, run as a child process by
test_transactions.py and test_txn_cluster.py (which kill it, or the brokers under it, with SIGKILL
at random points): reads `src` with read_committed from the group's committed offsets, writes each
value upper-cased to the same partition of `dst` and commits the input offsets in the same
transaction.

It rides through broker crashes as a real app would: librdkafka retries what is retriable; a
commit that fails retriably is retried; an abortable error aborts the transaction and rewinds the
consumer to the group's committed offsets (branch `abort`); a fatal error (or anything else, such
as a timed-out abort) closes the producer, starts a new one under the same transactional.id (which
completes or aborts whatever was open) and rewinds likewise (branch `reinit`). A fenced producer
(librdkafka's fatal _FENCED: the coordinator aborted its transaction under a bumped epoch, after
its transaction.timeout.ms or for a new instance's InitProducerId) first looks at the group's
committed offsets: when another process committed since its own last commit, a new instance owns
the transactional.id and this one is a zombie: it exits with FENCED_EXIT_CODE (branch `fenced`)
instead of fencing the new instance in turn; else the fencing was its own timeout and it
re-initialises. After every commit it prints `committed N` (the inputs committed by this process
so far) to stdout, `branch NAME` whenever one of those branches ran, and on exit one
`stats ...` line.

stdin takes commands, one a line, for the tests: `stop-before-send` makes the next transaction
stop the whole process with SIGSTOP right after producing its messages (still queued in the
client), `stop-after-send` once they are delivered (the transaction is open at the coordinator);
either prints `stopped WHERE` first, and the test sends SIGCONT. Once stdin is at its end (at once
when it is /dev/null) it exits 0 as soon as every partition's committed offset has reached the
input's end and nothing new came for IDLE_EXIT_S (without a broker to ask, it keeps trying); 1 on
an error it does not expect; HUNG_EXIT_CODE when a client call hangs past its timeout.

Usage: python3 txn_app.py BOOTSTRAP SRC DST GROUP PARTITIONS [MESSAGES_PER_TRANSACTION
       [TRANSACTION_TIMEOUT_MS [MESSAGE_TIMEOUT_MS]]]
(defaults 100, 20000 and the client's default, which is the transaction timeout)
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

IDLE_EXIT_S = 4.0
# Every client call waits at most this long; a broker restart takes a few seconds.
CALL_TIMEOUT_S = 15
# A call still blocked this long after its timeout hangs in the client: the app exits with
# HUNG_EXIT_CODE, as a supervisor would restart it, and the test starts it again.
HUNG_GRACE_S = 10
HUNG_EXIT_CODE = 3
# A fenced zombie: another instance owns the transactional.id now.
FENCED_EXIT_CODE = 4
# librdkafka 2.16 re-bootstraps when every broker is down (the single broker was killed) and
# decommissions the brokers it knew; a decommissioned group coordinator leaves
# send_offsets_to_transaction() waiting forever, past its timeout (librdkafka issues 5511 and
# 5456). Without re-bootstrap the client keeps its brokers and reconnects to them. In a cluster
# a killed broker also leaves the Metadata answers and is decommissioned for that: the watchdog
# below catches what is left of the hang.
CLIENT_WORKAROUNDS = {"metadata.recovery.strategy": "none"}
# Bound on the attempts of one step (a commit, an abort) before the producer is replaced.
ATTEMPTS_MAX = 20


class Fenced(Exception):
    """This process is a zombie: another instance committed under its transactional.id."""


class App:
    def __init__(self, bootstrap: str, src: str, dst: str, group: str, partitions: int, per_txn: int,
                 txn_timeout_ms: int = 20000, message_timeout_ms: int | None = None):
        self.bootstrap, self.src, self.dst, self.group = bootstrap, src, dst, group
        self.per_txn = per_txn
        self.timeouts = {"transaction.timeout.ms": txn_timeout_ms,
                         **({"message.timeout.ms": message_timeout_ms} if message_timeout_ms else {})}
        self.tps = [TopicPartition(src, p) for p in range(partitions)]
        self.stats = {"commits": 0, "retried_commits": 0, "aborts": 0, "new_producers": 0, "fenced_exits": 0,
                      "rewinds": 0, "stops": 0}
        self.committed_inputs = 0
        # The group's committed offsets as this process last knew them (read at a rewind, then its
        # own commits): anything else found there was committed by another instance.
        self.known_offsets: dict[int, int] = {}
        self.stop_at: str | None = None  # a test's stop-before-send / stop-after-send, pending
        self.call: tuple[str, float] | None = None  # the blocking client call under way, since
        threading.Thread(target=self.watchdog, daemon=True).start()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 1000, **CLIENT_WORKAROUNDS,
        })
        # Assigned, not subscribed: a killed instance leaves no member behind to wait for.
        self.consumer.assign(list(self.tps))
        self.producer = self.new_producer()

    def watchdog(self) -> None:
        while True:
            time.sleep(1)
            call = self.call
            if call is not None and time.monotonic() - call[1] > CALL_TIMEOUT_S + HUNG_GRACE_S:
                print(f"txn_app: error HUNG ({call[0]}): blocked past its timeout; exiting", file=sys.stderr, flush=True)
                os._exit(HUNG_EXIT_CODE)

    def blocking(self, name: str, f, *args):
        """`f(*args)`, watched."""
        self.call = (name, time.monotonic())
        try:
            return f(*args)
        finally:
            self.call = None

    def new_producer(self) -> Producer:
        p = Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": f"{self.group}-app", "linger.ms": 2,
            **self.timeouts, "reconnect.backoff.max.ms": 1000, **CLIENT_WORKAROUNDS,
            **({"debug": os.environ["TXN_APP_DEBUG"]} if os.environ.get("TXN_APP_DEBUG") else {}),
        })
        for attempt in range(ATTEMPTS_MAX):
            try:
                self.blocking("init_transactions", p.init_transactions, CALL_TIMEOUT_S)
                return p
            except KafkaException as e:
                if attempt + 1 == ATTEMPTS_MAX or not (e.args[0].retriable() or e.args[0].code() == KafkaError._TIMED_OUT):
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def branch(self, name: str, stat: str) -> None:
        self.stats[stat] += 1
        print(f"branch {name}", flush=True)

    def fatal(self, err: KafkaError) -> None:
        """A fatal error: a zombie exits (raises Fenced), anything else starts a new producer."""
        if err.code() == KafkaError._FENCED and self.committed_offsets() != self.known_offsets:
            self.branch("fenced", "fenced_exits")
            raise Fenced(err.str())
        self.replace_producer()

    def replace_producer(self) -> None:
        self.branch("reinit", "new_producers")
        self.producer = None  # the old one is in an error state: dropped, never used again
        self.producer = self.new_producer()
        self.rewind()

    def committed_offsets(self) -> dict[int, int]:
        """The group's committed offset of every partition (0 when none)."""
        for attempt in range(ATTEMPTS_MAX):
            try:
                committed = self.blocking("committed", self.consumer.committed, list(self.tps), CALL_TIMEOUT_S)
                break
            except KafkaException as e:
                if attempt + 1 == ATTEMPTS_MAX:
                    raise
                print(f"txn_app: error {e.args[0].name()} (committed): {e.args[0].str()}", file=sys.stderr, flush=True)
                time.sleep(0.2)
        for tp in committed:
            assert tp.error is None, tp.error
        return {tp.partition: max(tp.offset, 0) for tp in committed}

    def rewind(self) -> None:
        """Seek every partition to the group's committed offset (the start when none)."""
        self.stats["rewinds"] += 1
        self.known_offsets = self.committed_offsets()
        for partition, offset in self.known_offsets.items():
            self.consumer.seek(TopicPartition(self.src, partition, offset))

    def stop(self, where: str) -> None:
        """Stop the whole process (every client thread with it) until a SIGCONT."""
        self.stats["stops"] += 1
        print(f"stopped {where}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    def abort(self) -> None:
        for _ in range(ATTEMPTS_MAX):
            try:
                self.blocking("abort_transaction", self.producer.abort_transaction, CALL_TIMEOUT_S)
                self.branch("abort", "aborts")
                self.rewind()
                return
            except KafkaException as e:
                print(f"txn_app: error {e.args[0].name()} (abort): {e.args[0].str()}", file=sys.stderr, flush=True)
                if e.args[0].fatal():
                    self.fatal(e.args[0])
                    return
                if not e.args[0].retriable():
                    break
        self.replace_producer()

    def transaction(self, msgs) -> None:
        """One transaction of `msgs`; on failure the consumer is rewound, nothing is lost."""
        p = self.producer
        stop_at, self.stop_at = self.stop_at, None
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(self.dst, m.value().upper(), partition=m.partition())
            if stop_at == "stop-before-send":
                self.stop("before-send")
            elif stop_at == "stop-after-send":
                self.blocking("flush", p.flush, CALL_TIMEOUT_S)
                self.stop("after-send")
            offsets = [TopicPartition(self.src, m.partition(), m.offset() + 1) for m in last_per_partition(msgs)]
            self.blocking("send_offsets_to_transaction", p.send_offsets_to_transaction, offsets,
                          self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
            for attempt in range(ATTEMPTS_MAX):
                try:
                    self.blocking("commit_transaction", p.commit_transaction, CALL_TIMEOUT_S)
                    break
                except KafkaException as e:
                    err = e.args[0]
                    print(f"txn_app: error {err.name()} (commit): {err.str()}", file=sys.stderr, flush=True)
                    if err.retriable() and not err.txn_requires_abort() and not err.fatal() and attempt + 1 < ATTEMPTS_MAX:
                        self.stats["retried_commits"] += 1
                        continue
                    raise
            self.stats["commits"] += 1
            self.known_offsets.update({tp.partition: tp.offset for tp in offsets})
            self.committed_inputs += len(msgs)
            print(f"committed {self.committed_inputs}", flush=True)
        except BufferError:
            self.abort()
        except KafkaException as e:
            err = e.args[0]
            print(f"txn_app: error {err.name()}: {err.str()}", file=sys.stderr, flush=True)
            if err.txn_requires_abort() and not err.fatal():
                self.abort()
            else:
                self.fatal(err)

    def at_end(self) -> bool:
        """The group's committed offsets are the input's end offsets (false when no broker
        answers). Not the consumer's position: a partition this process consumed nothing from
        has none."""
        try:
            for tp in self.blocking("committed", self.consumer.committed, list(self.tps), 5):
                _, high = self.consumer.get_watermark_offsets(tp, timeout=5, cached=False)
                if tp.offset < high:
                    return False
            return True
        except KafkaException:
            return False

    def commands(self, may_exit: threading.Event) -> None:
        for line in sys.stdin:
            if line.strip() in ("stop-before-send", "stop-after-send"):
                self.stop_at = line.strip()
        may_exit.set()

    def run(self) -> int:
        may_exit = threading.Event()
        threading.Thread(target=self.commands, args=(may_exit,), daemon=True).start()
        idle_since = time.monotonic()
        rc = 0
        try:
            self.rewind()
            self.stats["rewinds"] = 0  # the start's seek to the committed offsets is no rewind
            while True:
                msgs = [m for m in self.consumer.consume(self.per_txn, 0.5) if not m.error()]
                if msgs:
                    idle_since = time.monotonic()
                    self.transaction(msgs)
                elif may_exit.is_set() and time.monotonic() - idle_since > IDLE_EXIT_S and self.at_end():
                    break
        except Fenced as e:
            print(f"txn_app: fenced by a new instance, exiting: {e}", file=sys.stderr, flush=True)
            rc = FENCED_EXIT_CODE
        self.consumer.close()
        print("stats " + " ".join(f"{k}={v}" for k, v in self.stats.items()), flush=True)
        return rc


def last_per_partition(msgs):
    last = {}
    for m in msgs:
        last[m.partition()] = m
    return last.values()


def main() -> int:
    bootstrap, src, dst, group, partitions = sys.argv[1:6]
    per_txn = int(sys.argv[6]) if len(sys.argv) > 6 else 100
    txn_timeout_ms = int(sys.argv[7]) if len(sys.argv) > 7 else 20000
    message_timeout_ms = int(sys.argv[8]) if len(sys.argv) > 8 else None
    return App(bootstrap, src, dst, group, int(partitions), per_txn, txn_timeout_ms, message_timeout_ms).run()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # an error the app does not expect: exit, the test restarts the app
        print(f"txn_app: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

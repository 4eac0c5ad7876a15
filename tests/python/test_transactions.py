"""Transactions (KIP-98) with a real client (confluent-kafka / librdkafka), through the real
binary: commit and abort seen by read_committed and read_uncommitted consumers, zombie fencing,
the proactive abort of a transaction past transaction.timeout.ms, a consume-transform-produce
loop with send_offsets_to_transaction, and a SIGKILL of the broker in the middle of a
transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Bound on every wait in these tests.
WAIT_S = 60.0


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(timeout=30)


def txn_producer(bootstrap: str, tid: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 1, idle_s: float = 3.0,
             item=lambda m: m.value().decode(), wait_s: float = WAIT_S) -> list:
    """`item` of every record a consumer with `isolation` reads from the start (each value by
    default), until idle or `wait_s`."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{topic}-{isolation}-{time.monotonic_ns()}",
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + wait_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(item(m))
            last = time.monotonic()
    finally:
        c.close()
    return out


def test_commit_and_abort_as_read_committed_and_uncommitted_see_them(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, "tx-basic")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, f"c{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, f"a{i}".encode())
    p.flush(30)
    # Before the abort: the open transaction holds read_committed back.
    assert read_all(broker.bootstrap, topic_name, "read_committed", idle_s=2) == [f"c{i}" for i in range(10)]
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic_name, b"last")
    p.commit_transaction(30)
    committed = read_all(broker.bootstrap, topic_name, "read_committed")
    assert committed == [f"c{i}" for i in range(10)] + ["last"]
    uncommitted = read_all(broker.bootstrap, topic_name, "read_uncommitted")
    assert uncommitted == [f"c{i}" for i in range(10)] + [f"a{i}" for i in range(5)] + ["last"]


def test_a_new_producer_fences_the_zombie_and_aborts_its_transaction(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    zombie = txn_producer(broker.bootstrap, "tx-fence")
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie")
    zombie.flush(30)
    successor = txn_producer(broker.bootstrap, "tx-fence")
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    successor.begin_transaction()
    successor.produce(topic_name, b"successor")
    successor.commit_transaction(30)
    assert read_all(broker.bootstrap, topic_name, "read_committed") == ["successor"]


def test_a_transaction_past_its_timeout_is_aborted(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, "tx-timeout", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic_name, b"late")
    p.flush(30)
    time.sleep(4)
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    # The LSO moved past the aborted records: read_committed sees nothing and does not hang.
    assert read_all(broker.bootstrap, topic_name, "read_committed", idle_s=2) == []
    assert read_all(broker.bootstrap, topic_name, "read_uncommitted", idle_s=2) == ["late"]


def test_consume_transform_produce_with_offsets_in_the_transaction(broker, topic_name):
    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-app"
    create_topic(broker.bootstrap, src)
    create_topic(broker.bootstrap, dst)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        feeder.produce(src, f"m{i}".encode())
    feeder.flush(30)

    def run(stop_after: int | None, abort_last: bool) -> int:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([src])
        p = txn_producer(broker.bootstrap, f"{group}-tx")
        done = 0
        deadline = time.monotonic() + WAIT_S
        idle_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - idle_since < 4:
            msgs = c.consume(50, 0.5)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            idle_since = time.monotonic()
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, m.value().upper())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
            done += len(msgs)
            if stop_after is not None and done >= stop_after:
                if abort_last:
                    p.abort_transaction(30)
                c.close()
                return done
            p.commit_transaction(30)
        c.close()
        return done

    # A first run aborts its last transaction: those inputs must be processed again.
    run(stop_after=120, abort_last=True)
    run(stop_after=None, abort_last=False)
    out = read_all(broker.bootstrap, dst, "read_committed")
    assert sorted(out) == sorted(f"M{i}" for i in range(300)), (len(out), len(set(out)))


def test_broker_killed_mid_transaction_recovers_exactly_the_committed_ones(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, "tx-crash")
    p.begin_transaction()
    for i in range(20):
        p.produce(topic_name, f"ok{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce(topic_name, f"open{i}".encode())
    p.flush(30)
    broker.restart(hard=True)
    # The open transaction survives the restart as open (the LSO holds), until the producer's
    # successor fences and aborts it.
    assert read_all(broker.bootstrap, topic_name, "read_committed", idle_s=2) == [f"ok{i}" for i in range(20)]
    q = txn_producer(broker.bootstrap, "tx-crash")
    q.begin_transaction()
    q.produce(topic_name, b"after")
    q.commit_transaction(30)
    assert read_all(broker.bootstrap, topic_name, "read_committed") == [f"ok{i}" for i in range(20)] + ["after"]


def test_the_cli_lists_describes_and_aborts_a_hanging_transaction(broker, topic_name, broker_bin):
    import json
    import subprocess

    def cli(*args: str) -> str:
        out = subprocess.run([str(broker_bin), "transactions", "-b", broker.bootstrap, *args],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout

    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, "tx-cli")
    p.begin_transaction()
    p.produce(topic_name, b"hanging")
    p.flush(30)
    listed = json.loads(cli("list", "--json"))
    assert {"transactional_id": "tx-cli", "state": "Ongoing"}.items() <= next(
        t for t in listed if t["transactional_id"] == "tx-cli").items()
    described = json.loads(cli("describe", "--transactional-id", "tx-cli", "--json"))
    assert described["state"] == "Ongoing" and described["partitions"] == [f"{topic_name}-0"]
    assert "Aborted the transaction" in cli("abort", "--topic", topic_name, "--partition", "0")
    # The LSO moved past the aborted record: a read_committed consumer is not held back.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-lso",
                  "isolation.level": "read_committed"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    c.close()
    assert (lo, hi) == (0, 2)
    assert read_all(broker.bootstrap, topic_name, "read_committed", idle_s=2) == []


def test_offsets_sent_to_a_transaction_survive_a_broker_kill(broker, topic_name):
    """TxnOffsetCommit's pending offsets are durable: after a SIGKILL and restart, the same
    producer commits its open transaction and the offsets become the group's."""
    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-g"
    create_topic(broker.bootstrap, src)
    create_topic(broker.bootstrap, dst)
    p = txn_producer(broker.bootstrap, "tx-pending")
    p.begin_transaction()
    p.produce(dst, b"x")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    p.send_offsets_to_transaction([TopicPartition(src, 0, 17)], c.consumer_group_metadata(), 30)
    p.flush(30)
    broker.restart(hard=True)
    p.commit_transaction(60)
    committed = c.committed([TopicPartition(src, 0)], timeout=30)
    c.close()
    assert committed[0].offset == 17
    assert read_all(broker.bootstrap, dst, "read_committed") == ["x"]


def test_exactly_once_when_the_app_is_killed_at_random_points(broker, topic_name):
    """The consume-transform-produce app (txn_app.py) is killed with SIGKILL at random points
    and restarted (`eos_loop.kills(10)` times; the broker is also killed once in between): the
    output read with read_committed holds every input exactly once, in order, and the group's
    committed offsets are the input's end."""
    import random

    from eos_loop import AppProcess, Feeder, check_exactly_once, kills

    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-eos"
    partitions, app_kills = 3, kills(10)
    n = 2500 * app_kills
    create_topic(broker.bootstrap, src, partitions)
    create_topic(broker.bootstrap, dst, partitions)
    Feeder(broker.bootstrap, src, partitions).feed(n)
    app = AppProcess(broker.bootstrap, src, dst, group, partitions, per_txn=5)
    rng = random.Random(17)
    started = time.monotonic()
    for round_ in range(app_kills):
        app.start()
        time.sleep(rng.uniform(0.8, 2.0))
        app.kill()
        if round_ == app_kills // 2:
            broker.restart(hard=True)
    before_final = app.total
    assert before_final > 0, "the killed runs made progress"
    app.start()
    app.finish()
    check_exactly_once(broker.bootstrap, src, dst, group, partitions, n)
    print(f"{app_kills} app kills, {n} inputs, {before_final} committed before the final run, "
          f"{time.monotonic() - started:.1f} s; final run: {app.stats}")


def test_exactly_once_when_the_broker_is_killed_at_random_points(broker, topic_name):
    """The broker is killed with SIGKILL at seeded random points (`eos_loop.kills(10)` times) and
    restarted on the same data dir and port, while the consume-transform-produce app runs on
    through it, as a real app: librdkafka retries, an abortable error aborts, a fatal one starts
    a new producer, both rewind to the committed offsets. More input comes after every restart,
    so every kill meets the app in the middle of its transactions. The output read with
    read_committed holds every input exactly once, in order, and the group's committed offsets
    are the input's end."""
    import random

    from eos_loop import AppProcess, Feeder, check_exactly_once, kills

    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-eos"
    partitions, batch, broker_kills = 3, 2500, kills(10)
    create_topic(broker.bootstrap, src, partitions)
    create_topic(broker.bootstrap, dst, partitions)
    feeder = Feeder(broker.bootstrap, src, partitions)
    feeder.feed(2 * batch)
    app = AppProcess(broker.bootstrap, src, dst, group, partitions, per_txn=5)
    app.start()
    rng = random.Random(1717)
    started = time.monotonic()
    mark = 0
    busy = 0  # kills that found input not yet committed: the app was in its transactions
    try:
        for k in range(broker_kills):
            app.wait_progress(mark, f"after broker start {k}")
            time.sleep(rng.uniform(0.0, 0.8))
            busy += app.total < feeder.n
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            broker.start()
            mark = app.committed
            feeder.feed(batch)
        app.wait_progress(mark, "after the last broker start")
        app.finish()
    finally:
        if app.proc is not None:
            app.kill()
    check_exactly_once(broker.bootstrap, src, dst, group, partitions, feeder.n)
    assert busy >= broker_kills // 2, f"only {busy} of {broker_kills} kills met the app at work"
    print(f"{broker_kills} broker kills ({busy} with the app at work), {feeder.n} inputs, {time.monotonic() - started:.1f} s; app: {app.stats}")


def test_exactly_once_when_the_app_is_stopped_past_its_timeouts_and_fenced_by_a_new_instance(broker, topic_name):
    """The consume-transform-produce app (txn_app.py, with short timeouts) is stopped with SIGSTOP
    in the middle of transactions (`eos_loop.stop_past_timeouts_and_fence`): past its
    message.timeout.ms with messages still queued (librdkafka's abortable error: the app aborts
    and rewinds), past its transaction.timeout.ms once they are delivered (the broker aborts the
    transaction under a bumped epoch; the app is fenced, starts a new producer and rewinds), and
    while a new instance under the same transactional.id fences it and commits (the zombie exits
    when continued). Each branch runs; the output read with read_committed holds every input
    exactly once, in order, and the group's committed offsets are the input's end."""
    from eos_loop import STOP_TIMEOUTS_MS, AppProcess, Feeder, check_exactly_once, kills, stop_past_timeouts_and_fence

    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-eos"
    partitions = 3
    create_topic(broker.bootstrap, src, partitions)
    create_topic(broker.bootstrap, dst, partitions)
    feeder = Feeder(broker.bootstrap, src, partitions)
    feeder.feed(200)
    app = AppProcess(broker.bootstrap, src, dst, group, partitions, per_txn=5, timeouts_ms=STOP_TIMEOUTS_MS)
    rounds = max(1, kills(5) // 5)  # the long mode (SF_EOS_KILLS=N): N / 5 rounds of the three stops
    started = time.monotonic()
    app.start()
    try:
        app.wait_progress(0, "at the start")
        app = stop_past_timeouts_and_fence(app, lambda: feeder.feed(200), rounds)
        app.finish()
    finally:
        if app.proc is not None:
            app.kill()
    check_exactly_once(broker.bootstrap, src, dst, group, partitions, feeder.n)
    branches = app.branches
    assert branches.get("abort", 0) >= rounds and branches.get("reinit", 0) >= rounds, branches
    assert branches.get("fenced") == 2 * rounds, branches
    # The re-initialisations followed the coordinator's own timeout aborts.
    timeout_aborts = sum(b.log_path.read_text(errors="replace").count(
        f"aborting a transaction past its timeout transactional_id={group}-app") for b in [broker])
    assert timeout_aborts >= rounds, timeout_aborts
    print(f"{rounds} rounds, {feeder.n} inputs, {time.monotonic() - started:.1f} s; branches: {branches}, "
          f"{timeout_aborts} timeout aborts; app: {app.stats}")


def test_kcat_read_committed_skips_aborted_and_open_transactions(broker, topic_name):
    """kcat (Debian's older librdkafka) with isolation.level: read_committed drops the aborted
    transaction and stops before the open one; read_uncommitted shows everything."""
    import shutil
    import subprocess

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed (.ci/run installs the Debian package)"
    create_topic(broker.bootstrap, topic_name)
    p = txn_producer(broker.bootstrap, "tx-kcat")
    for outcome in ("commit", "abort", "open"):
        p.begin_transaction()
        p.produce(topic_name, outcome.encode())
        p.flush(30)
        if outcome == "commit":
            p.commit_transaction(30)
        elif outcome == "abort":
            p.abort_transaction(30)

    def consume(isolation: str) -> list[str]:
        out = subprocess.run([kcat, "-C", "-b", broker.bootstrap, "-t", topic_name, "-o", "beginning", "-e",
                              "-q", "-X", f"isolation.level={isolation}"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    assert consume("read_committed") == ["commit"]
    assert consume("read_uncommitted") == ["commit", "abort", "open"]

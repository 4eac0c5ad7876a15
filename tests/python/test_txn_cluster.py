"""Transactions across three real brokers (confluent-kafka): the partitions of one transaction
are led by different brokers and the transaction coordinator (the leader of the id's
`__transaction_state` partition) by yet another, so its markers go out as WriteTxnMarkers
requests. Commit and abort on every partition as read_committed and read_uncommitted see them;
consume-transform-produce with send_offsets_to_transaction where the group's coordinator is
another broker than the transaction's; kill -9 of the transaction coordinator's broker in the
middle of a run of transactions: the producer starts again under the same transactional.id, and
read_committed holds every committed input exactly once; the killed broker rejoins.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from test_cluster import admin, cluster_view, metric, placement, start_cluster, wait_for

PARTITIONS = 6
TXN_STATE_PARTITIONS = 50
OFFSETS_PARTITIONS = 3


def java_hash(s: str) -> int:
    h = 0
    for c in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, n: int) -> int:
    return abs(java_hash(key)) % n


def create(b, topic):
    fs = admin(b).create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    return wait_for("leaders on every broker", lambda: spread(b, topic))


def spread(b, topic):
    p = placement(b, topic)
    return p if p and {v[0] for v in p.values()} == {1, 2, 3} else None


def leader(b, topic, partition):
    p = wait_for(f"{topic} placement", lambda: placement(b, topic))
    return p[partition][0]


def producer(bootstrap, tid):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": tid,
        "transaction.timeout.ms": 10000,
        "linger.ms": 5,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    p.init_transactions(30)
    return p


def read(bootstrap, topic, isolation, want=None, timeout_s=20.0):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{time.monotonic_ns()}",
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            total = sum(len(v) for v in got.values())
            if (want is not None and total >= want) or (
                want is None and time.monotonic() - idle_since > 3
            ):
                break
            continue
        idle_since = time.monotonic()
        got[m.partition()].append(m.value().decode())
    c.close()
    return got


def setup(broker_factory, topic):
    brokers = start_cluster(broker_factory)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    create(brokers[0], topic)
    return brokers, ",".join(b.bootstrap for b in brokers)


def test_commit_and_abort_across_brokers_and_offsets_on_another_group_coordinator(broker_factory):
    brokers, bootstrap = setup(broker_factory, "txn-out")
    tid = "cluster-txn"
    p = producer(bootstrap, tid)
    coordinator = leader(brokers[0], "__transaction_state", partition_for(tid, TXN_STATE_PARTITIONS))
    committed, aborted = [], []
    started = time.monotonic()
    for round_ in range(6):
        p.begin_transaction()
        values = [f"r{round_}-p{part}" for part in range(PARTITIONS)]
        for part, v in enumerate(values):
            p.produce("txn-out", v.encode(), partition=part)
        if round_ % 3 == 2:
            p.flush(30)  # sent, so read_uncommitted sees them (abort purges what is queued)
            p.abort_transaction(30)
            aborted += values
        else:
            p.commit_transaction(30)
            committed += values
    elapsed = time.monotonic() - started
    print(f"6 transactions over 6 partitions on 3 leaders (coordinator {coordinator}): {elapsed:.2f} s")
    got = read(bootstrap, "txn-out", "read_committed", want=len(committed))
    assert sorted(v for vs in got.values() for v in vs) == sorted(committed)
    for part in range(PARTITIONS):
        assert len(got[part]) == 4, f"partition {part}: {got[part]}"
    everything = read(bootstrap, "txn-out", "read_uncommitted", want=len(committed) + len(aborted))
    assert sorted(v for vs in everything.values() for v in vs) == sorted(committed + aborted)

    # Consume-transform-produce: a group whose coordinator is not the transaction's.
    group = next(
        g for g in (f"ctp-{i}" for i in range(100))
        if leader(brokers[0], "__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS)) != coordinator
    )
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce("txn-out", f"ctp-{part}".encode(), partition=part)
    offsets = [TopicPartition("txn-out", part, 3) for part in range(PARTITIONS)]
    # read_uncommitted: under librdkafka's default read_committed, committed() asks
    # require_stable and would wait (UNSTABLE_OFFSET_COMMIT) for the open transaction.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    before = c.committed([TopicPartition("txn-out", part) for part in range(PARTITIONS)], timeout=10)
    assert all(tp.offset < 0 for tp in before), f"offsets visible before commit: {before}"
    p.commit_transaction(30)
    after = wait_for("the offsets committed", lambda: (lambda tps: tps if all(tp.offset == 3 for tp in tps) else None)(
        c.committed([TopicPartition("txn-out", part) for part in range(PARTITIONS)], timeout=10)))
    assert [tp.offset for tp in after] == [3] * PARTITIONS
    c.close()


def test_send_offsets_right_after_a_commit_waits_for_the_markers_not_for_a_client_retry(broker_factory):
    """Consume-transform-produce as txn_app.py runs it: `send_offsets_to_transaction` right
    after the previous commit, whose markers go to other brokers. Its AddOffsetsToTxn (and the
    AddPartitionsToTxn of the first produce) meets that transaction still prepared; answered
    CONCURRENT_TRANSACTIONS, librdkafka retries AddOffsetsToTxn only after `retry.backoff.ms`
    (100 ms, doubling), so every transaction took 100 ms for markers written in a few. The
    coordinator waits for the markers instead: no such answer, and the offsets commit."""
    brokers = start_cluster(broker_factory, http=True)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    create(brokers[0], "ctp-out")
    bootstrap = ",".join(b.bootstrap for b in brokers)
    tid = "ctp-markers"
    p = producer(bootstrap, tid)
    coordinator = leader(brokers[0], "__transaction_state", partition_for(tid, TXN_STATE_PARTITIONS))
    group = next(
        g for g in (f"ctp-m-{i}" for i in range(100))
        if leader(brokers[0], "__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS)) != coordinator
    )
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})

    def concurrent_answers():
        return sum(metric(b, "streamforge_request_errors_total", f'api="{api}",error="CONCURRENT_TRANSACTIONS"')
                   for b in brokers for api in ("AddOffsetsToTxn", "AddPartitionsToTxn"))

    before = concurrent_answers()
    transactions = 20
    for i in range(transactions):
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.produce("ctp-out", f"t{i}-p{part}".encode(), partition=part)
        offsets = [TopicPartition("ctp-out", part, i + 1) for part in range(PARTITIONS)]
        p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    concurrent = concurrent_answers() - before
    print(f"{transactions} transactions: {concurrent:.0f} adds answered CONCURRENT_TRANSACTIONS")
    # Before the wait: 126 answers (every AddOffsetsToTxn, and most AddPartitionsToTxn, counted
    # per partition); a transaction whose markers take longer than the wait still may get one.
    assert concurrent <= transactions // 4, f"{concurrent} adds answered CONCURRENT_TRANSACTIONS"
    tps = [TopicPartition("ctp-out", part) for part in range(PARTITIONS)]
    committed = wait_for("the last offsets committed", lambda: (
        lambda got: got if all(tp.offset == transactions for tp in got) else None)(c.committed(tps, timeout=10)))
    assert [tp.offset for tp in committed] == [transactions] * PARTITIONS
    c.close()


def test_offsets_sent_to_a_transaction_survive_a_kill_of_the_group_coordinator(broker_factory):
    """The group's coordinator is not the transaction's, so it holds the TxnOffsetCommit's
    offsets until the COMMIT marker; it is killed (kill -9) and restarted between
    `send_offsets_to_transaction` and `commit_transaction`. The commit goes through; the
    offsets must be committed with it (else the app processes those inputs again: the
    duplicates of the cluster kill loop at 1,500 inputs a kill). The offsets are the producer's
    transactional batch in the ISR of the group's `__consumer_offsets` partition before the
    TxnOffsetCommit is answered, so whichever broker leads it next loads them pending."""
    brokers, bootstrap = setup(broker_factory, "gc-kill")
    tid = "gc-kill-txn"
    p = producer(bootstrap, tid)
    coordinator = leader(brokers[0], "__transaction_state", partition_for(tid, TXN_STATE_PARTITIONS))
    group = next(
        g for g in (f"gc-kill-{i}" for i in range(100))
        if leader(brokers[0], "__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS)) != coordinator
    )
    group_coordinator = leader(brokers[0], "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})
    p.begin_transaction()
    p.produce("gc-kill", b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition("gc-kill", 0, 7)], c.consumer_group_metadata(), 30)
    p.flush(10)
    brokers[group_coordinator - 1].kill()
    time.sleep(0.5)
    brokers[group_coordinator - 1].start()
    up = brokers[coordinator - 1]
    wait_for("__consumer_offsets back in sync",
             lambda: all(len(isr) == 3 for _, _, isr in (placement(up, "__consumer_offsets") or {0: (0, 0, [])}).values()))
    p.commit_transaction(60)

    def committed():
        try:
            return c.committed([TopicPartition("gc-kill", 0)], timeout=10)[0].offset == 7
        except KafkaException:  # the consumer looks its coordinator up again
            return None

    try:
        wait_for("the offset committed with its transaction", committed, timeout_s=20)
    finally:
        c.close()


def test_killing_the_transaction_coordinator_mid_run_keeps_committed_data_exactly_once(broker_factory):
    brokers, bootstrap = setup(broker_factory, "txn-kill")
    tid = "cluster-kill"
    p = producer(bootstrap, tid)
    coordinator = leader(brokers[0], "__transaction_state", partition_for(tid, TXN_STATE_PARTITIONS))
    committed: list[str] = []
    uncertain: list[str] = []  # of transactions whose commit did not answer
    n = 0
    killed_at = None
    restarted = None
    started = time.monotonic()
    while len(committed) < 20 * PARTITIONS:
        values = [f"v{n + i}" for i in range(PARTITIONS)]
        n += PARTITIONS
        try:
            p.begin_transaction()
            for part, v in enumerate(values):
                p.produce("txn-kill", v.encode(), partition=part)
            if len(committed) == 5 * PARTITIONS and killed_at is None:
                # The transaction is open on every partition: kill its coordinator now.
                p.flush(10)
                brokers[coordinator - 1].kill()
                killed_at = time.monotonic()
            p.commit_transaction(30)
            committed += values
        except KafkaException as e:
            # The application restarts with the same transactional.id: the new coordinator
            # aborts (or completes) what was open.
            print(f"transaction failed ({e}); starting again")
            uncertain += values
            p = producer(bootstrap, tid)
            if restarted is None:
                restarted = time.monotonic()
    elapsed = time.monotonic() - started
    assert killed_at is not None
    print(f"{len(committed) // PARTITIONS} transactions committed in {elapsed:.1f} s, coordinator {coordinator} killed")
    brokers[coordinator - 1].start()
    wait_for("the killed broker rejoined", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    got = read(bootstrap, "txn-kill", "read_committed", want=len(committed), timeout_s=30)
    values = [v for vs in got.values() for v in vs]
    assert set(committed) <= set(values), "every committed input is there"
    assert set(values) <= set(committed) | set(uncertain), "nothing else"
    assert len(values) == len(set(values)), "and exactly once"


def test_exactly_once_when_leaders_and_the_coordinator_are_killed_at_random_points(broker_factory):
    """Three brokers, input and output RF=3 with min.insync.replicas=2: at seeded random points
    (`eos_loop.kills(4)` times) the leader of a random output partition or the app's transaction
    coordinator is killed with SIGKILL and restarted, and the next kill waits for it to be back in
    every ISR, while the consume-transform-produce app (txn_app.py) runs on through it. The
    output read with read_committed holds every input exactly once, in order, and the group's
    committed offsets are the input's end."""
    import random

    from eos_loop import AppProcess, Feeder, check_exactly_once, kills

    import os

    # SF_EOS_FEED: inputs fed after every kill (500 by default).
    src, dst, group, partitions = "eos-in", "eos-out", "eos-cluster", 3
    batch = int(os.environ.get("SF_EOS_FEED", 500))
    brokers = start_cluster(broker_factory)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    fs = admin(brokers[0]).create_topics(
        [NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"}) for t in (src, dst)], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    feeder = Feeder(bootstrap, src, partitions)
    feeder.feed(2 * batch)
    app = AppProcess(bootstrap, src, dst, group, partitions, per_txn=10)
    app.start()
    coordinator_partition = partition_for(f"{group}-app", TXN_STATE_PARTITIONS)
    rng = random.Random(3117)
    started = time.monotonic()
    victims: list[str] = []
    mark = 0
    busy = 0  # kills that found input not yet committed: the app was in its transactions

    def all_in_sync(b):
        for topic in (src, dst, "__transaction_state", "__consumer_offsets"):
            p = placement(b, topic)
            if p is None or any(len(isr) < 3 for _, _, isr in p.values()):
                return False
        return True

    try:
        for k in range(kills(4)):
            app.wait_progress(mark, f"after kill {k}")
            up = next(b for b in brokers if b.is_running())
            if rng.random() < 0.5:
                part = rng.randrange(partitions)
                victim, what = leader(up, dst, part), f"leader of {dst}-{part}"
            else:
                victim, what = leader(up, "__transaction_state", coordinator_partition), "coordinator"
            victims.append(f"{what} ({victim})")
            time.sleep(rng.uniform(0.0, 1.0))
            busy += app.total < feeder.n
            brokers[victim - 1].kill()
            time.sleep(rng.uniform(0.0, 1.0))
            brokers[victim - 1].start()
            mark = app.committed
            wait_for("every replica back in sync", lambda: all_in_sync(brokers[victim % 3]))
            feeder.feed(batch)
        app.wait_progress(mark, "after the last kill")
        app.finish()
    finally:
        if app.proc is not None:
            app.kill()
    check_exactly_once(bootstrap, src, dst, group, partitions, feeder.n)
    print(f"{len(victims)} kills ({', '.join(victims)}; {busy} with the app at work), {feeder.n} inputs, "
          f"{time.monotonic() - started:.1f} s; app: {app.stats}")


def test_exactly_once_when_the_app_is_stopped_past_its_timeouts_and_fenced_by_a_new_instance(broker_factory):
    """Three brokers, input and output RF=3: the consume-transform-produce app (txn_app.py, with
    short timeouts) is stopped with SIGSTOP in the middle of transactions
    (`eos_loop.stop_past_timeouts_and_fence`): past its message.timeout.ms with messages still
    queued (it aborts), past its transaction.timeout.ms once they are delivered (the coordinator
    aborts it, with markers to the other brokers' partitions; the app is fenced and starts a new
    producer), and while a new instance fences it (the zombie exits when continued). Each branch
    runs; the output read with read_committed holds every input exactly once, in order."""
    from eos_loop import STOP_TIMEOUTS_MS, AppProcess, Feeder, check_exactly_once, kills, stop_past_timeouts_and_fence

    src, dst, group, partitions = "stop-in", "stop-out", "stop-cluster", 3
    brokers = start_cluster(broker_factory)
    wait_for("the cluster", lambda: cluster_view(brokers[0])[0] == [1, 2, 3])
    fs = admin(brokers[0]).create_topics(
        [NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"}) for t in (src, dst)], operation_timeout=15)
    for f in fs.values():
        f.result(20)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    feeder = Feeder(bootstrap, src, partitions)
    feeder.feed(100)
    app = AppProcess(bootstrap, src, dst, group, partitions, per_txn=10, timeouts_ms=STOP_TIMEOUTS_MS)
    rounds = max(1, kills(5) // 5)  # the long mode (SF_EOS_KILLS=N): N / 5 rounds of the three stops
    started = time.monotonic()
    app.start()
    try:
        app.wait_progress(0, "at the start")
        app = stop_past_timeouts_and_fence(app, lambda: feeder.feed(100), rounds)
        app.finish()
    finally:
        if app.proc is not None:
            app.kill()
    check_exactly_once(bootstrap, src, dst, group, partitions, feeder.n)
    branches = app.branches
    assert branches.get("abort", 0) >= rounds and branches.get("reinit", 0) >= rounds, branches
    assert branches.get("fenced") == 2 * rounds, branches
    # The re-initialisations followed the coordinator's own timeout aborts.
    timeout_aborts = sum(b.log_path.read_text(errors="replace").count(
        f"aborting a transaction past its timeout transactional_id={group}-app") for b in brokers)
    assert timeout_aborts >= rounds, timeout_aborts
    print(f"{rounds} rounds, {feeder.n} inputs, {time.monotonic() - started:.1f} s; branches: {branches}, "
          f"{timeout_aborts} timeout aborts; app: {app.stats}")

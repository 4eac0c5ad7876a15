"""Consumer groups (issue 5) with real clients: confluent-kafka members as child processes
(so they can be SIGKILLed), kafka-python's group consumer, and the AdminClient group APIs."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from group_helpers import Member, balanced, create_topic, produce, wait_for

PARTITIONS = 10
SETTLE_TIMEOUT_S = 60
# Short initial delay so tests do not wait Kafka's 3 s default for every new group.
BROKER_ARGS = ["--group-initial-rebalance-delay-ms", "300"]


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(extra_args=BROKER_ARGS)


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_members_share_partitions_rebalance_on_join_and_on_kill(gbroker, topic_name, strategy):
    create_topic(gbroker.bootstrap, topic_name, PARTITIONS)
    group = group_name()
    members = [Member(gbroker.bootstrap, group, topic_name, strategy) for _ in range(3)]
    try:
        # Cooperative rebalancing moves partitions over several rounds (revoke, then assign),
        # and the members report at different moments, so a covered but uneven share can be
        # seen on the way: wait for the final, even one.
        sizes = lambda: sorted(len(m.current()) for m in members)  # noqa: E731
        wait_for(lambda: balanced(members, PARTITIONS) and sizes() == [3, 3, 4], SETTLE_TIMEOUT_S,
                 f"3 members to share {PARTITIONS} partitions evenly")

        members.append(Member(gbroker.bootstrap, group, topic_name, strategy))
        wait_for(lambda: balanced(members, PARTITIONS) and sizes() == [2, 2, 3, 3],
                 SETTLE_TIMEOUT_S, "the fourth member to get its share of the partitions")

        victim = members.pop(1)
        orphaned = set(victim.current())
        victim.kill()  # no LeaveGroup: only the session timeout tells the coordinator
        killed_at = time.monotonic()
        wait_for(lambda: balanced(members, PARTITIONS), SETTLE_TIMEOUT_S,
                 "the killed member's partitions to move")
        moved_after_s = time.monotonic() - killed_at
        assert orphaned <= {p for m in members for p in m.current()}
        # They move because the session (6 s) expired, not sooner.
        assert moved_after_s >= 3.0, moved_after_s
        admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert len(desc.members) == 3
        assert str(desc.state).endswith("STABLE")
        assert desc.partition_assignor == strategy
    finally:
        for m in members:
            m.stop()


def test_kafka_python_group_consumer(gbroker, topic_name):
    from kafka import KafkaConsumer

    create_topic(gbroker.bootstrap, topic_name, 4)
    produce(gbroker.bootstrap, topic_name, 400, 4)
    group = group_name()
    consumer = KafkaConsumer(topic_name, bootstrap_servers=gbroker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=10000, heartbeat_interval_ms=1000,
                             consumer_timeout_ms=20000)
    seen = set()
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while len(seen) < 400 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    seen.add((r.partition, r.offset))
        assert len(seen) == 400
        assert consumer.assignment() == {
            __import__("kafka").TopicPartition(topic_name, p) for p in range(4)}
        consumer.commit()
        second = KafkaConsumer(topic_name, bootstrap_servers=gbroker.bootstrap, group_id=group,
                               session_timeout_ms=10000, heartbeat_interval_ms=1000)
        # Each consumer polls in its own thread, as an application would. Polling both from one
        # thread in turns makes kafka-python 3.0 (3.0.12) loop: a JoinGroup that completes while
        # the *other* consumer is polling is dropped and sent again, and the leader's second
        # JoinGroup starts a new rebalance (as it does on Kafka).
        stop = threading.Event()
        assigned = {}

        def poll_loop(name, c):
            while not stop.is_set():
                c.poll(timeout_ms=200)
                assigned[name] = set(c.assignment())

        threads = [threading.Thread(target=poll_loop, args=(n, c), daemon=True)
                   for n, c in (("first", consumer), ("second", second))]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while time.monotonic() < deadline:
                a, b = assigned.get("first", set()), assigned.get("second", set())
                if a and b and len(a) + len(b) == 4 and not (a & b):
                    break
                time.sleep(0.05)
            else:
                pytest.fail("kafka-python consumers did not share the partitions")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
            second.close()
    finally:
        consumer.close()
    # Committed offsets are visible to another client.
    check = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(topic_name, p) for p in range(4)], timeout=30)
    check.close()
    assert [tp.offset for tp in committed] == [100, 100, 100, 100]


@pytest.mark.slow
@pytest.mark.parametrize("commit", ["auto", "manual"])
def test_every_message_consumed_across_rebalances_and_broker_sigkill(gbroker, topic_name, commit):
    """Produce N; consume with two members that join at different times, SIGKILL the broker in
    the middle and restart it: every message is consumed, committed offsets survive."""
    n, partitions = 3000, 6
    create_topic(gbroker.bootstrap, topic_name, partitions)
    produce(gbroker.bootstrap, topic_name, n, partitions)
    everything = {(p, o) for p in range(partitions) for o in range(n // partitions)}
    group = group_name()

    def committed() -> dict[int, int]:
        # A fresh client each time: one that lived through the broker restart may still be in
        # its reconnect backoff.
        admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p)
                                                  for p in range(partitions)])])
        tps = res[group].result(timeout=30).topic_partitions
        return {tp.partition: tp.offset for tp in tps}

    first = Member(gbroker.bootstrap, group, topic_name, commit=commit, report_messages=True)
    members = [first]
    try:
        wait_for(lambda: len(first.consumed_set()) > 0, SETTLE_TIMEOUT_S, "consumption to start")
        members.append(Member(gbroker.bootstrap, group, topic_name, commit=commit,
                              report_messages=True))
        wait_for(lambda: balanced(members, partitions), SETTLE_TIMEOUT_S, "the second member")
        wait_for(lambda: sum(c >= 0 for c in committed().values()) > 0, SETTLE_TIMEOUT_S,
                 "a commit")
        before = committed()
        gbroker.kill()
        gbroker.start()
        after = committed()
        for p, offset in before.items():
            assert after[p] >= offset, f"partition {p}: committed {offset} lost ({after[p]})"
        wait_for(lambda: set().union(*(m.consumed_set() for m in members)) >= everything,
                 SETTLE_TIMEOUT_S * 2, "every message to be consumed")
        for m in members:
            m.stop()
        expected = {p: n // partitions for p in range(partitions)}
        wait_for(lambda: committed() == expected, SETTLE_TIMEOUT_S, "the final commits")
    finally:
        for m in members:
            m.stop()


def test_committed_offsets_and_metadata_survive_sigkill(gbroker, topic_name):
    create_topic(gbroker.bootstrap, topic_name, 3)
    group = group_name()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic_name, 0, 17, metadata="hello"),
                      TopicPartition(topic_name, 2, 5)], asynchronous=False)
    c.close()
    gbroker.kill()
    gbroker.start()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    got = c.committed([TopicPartition(topic_name, p) for p in range(3)], timeout=30)
    c.close()
    assert [tp.offset for tp in got] == [17, -1001, 5]
    assert got[0].metadata == "hello"


def test_admin_lists_describes_deletes_groups_and_offsets(gbroker, topic_name):
    create_topic(gbroker.bootstrap, topic_name, 4)
    produce(gbroker.bootstrap, topic_name, 40, 4)
    group = group_name()
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    member = Member(gbroker.bootstrap, group, topic_name, commit="manual")
    try:
        wait_for(lambda: balanced([member], 4), SETTLE_TIMEOUT_S, "the member to own everything")

        def all_committed():
            res = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p)
                                                      for p in range(4)])])
            tps = res[group].result(timeout=30).topic_partitions
            return all(tp.offset == 10 for tp in tps)

        wait_for(all_committed, SETTLE_TIMEOUT_S, "the member to commit everything it consumed")
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert len(desc.members) == 1
        assigned = {tp.partition for tp in desc.members[0].assignment.topic_partitions}
        assert assigned == {0, 1, 2, 3}
        # A group with members cannot be deleted.
        with pytest.raises(Exception):
            admin.delete_consumer_groups([group])[group].result(timeout=30)
    finally:
        member.stop()
    wait_for(lambda: str(admin.describe_consumer_groups([group])[group].result(timeout=30).state)
             .endswith("EMPTY"), SETTLE_TIMEOUT_S, "the group to become empty")
    # OffsetDelete through kafka-python's admin client (confluent-kafka has no binding for it).
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    kadmin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
    try:
        result = kadmin.delete_group_offsets(group, [KTopicPartition(topic_name, 0)])
        assert [e.__name__ for e in result.values()] == ["NoError"], result
    finally:
        kadmin.close()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    got = c.committed([TopicPartition(topic_name, p) for p in range(4)], timeout=30)
    c.close()
    assert got[0].offset == -1001, "offset deleted"
    assert all(tp.offset >= 0 for tp in got[1:]), got
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    listed = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in listed.valid}


def test_static_member_restart_keeps_assignment_without_rebalance(gbroker, topic_name):
    create_topic(gbroker.bootstrap, topic_name, 4)
    group = group_name()
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    a = Member(gbroker.bootstrap, group, topic_name, instance_id="a", session_timeout_ms=30000)
    b = Member(gbroker.bootstrap, group, topic_name, instance_id="b", session_timeout_ms=30000)
    members = [a, b]
    try:
        wait_for(lambda: balanced(members, 4), SETTLE_TIMEOUT_S, "two static members")
        before = sorted(b.current())
        b.kill()
        b2 = Member(gbroker.bootstrap, group, topic_name, instance_id="b", session_timeout_ms=30000)
        members[1] = b2
        wait_for(lambda: sorted(b2.current()) == before, SETTLE_TIMEOUT_S,
                 "the restarted static member to get its old partitions back")
        assert sorted(a.current()) == sorted(set(range(4)) - set(before))
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert sorted(m.group_instance_id for m in desc.members) == ["a", "b"]
    finally:
        for m in members:
            m.stop()

"""Preferred-leader election across three real brokers, through confluent-kafka's
`AdminClient.elect_leaders` (ElectLeaders, forwarded to the active controller): a broker killed
and restarted does not get its leaderships back by itself while the automatic rebalance is off;
an ElectLeaders (preferred) moves them back, and asking again answers ELECTION_NOT_NEEDED. With
`--leader-imbalance-check-interval-seconds 2` the controller moves them back by itself.
"""

from __future__ import annotations

import time

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

import wire
from test_cluster import admin, cluster_view, create, start_cluster, wait_for

TOPIC = "preferred"
# Every broker prefers some partitions (placement spreads leaders within one of even).
PARTITIONS = 6
# From kill -9 to a broker back in every ISR, on a loaded 2-core machine.
WAIT_S = 30


def node_id(b) -> int:
    return int(b.extra_args[b.extra_args.index("--node-id") + 1])


def placement_on(b, topics):
    """{(topic, partition): (leader, replicas, isr)} in `b`'s own Metadata answer (asked of `b`
    alone: a client may send its Metadata to any broker it knows); None if `b` does not answer
    or a partition has no leader."""
    try:
        with wire.connect(b.port, timeout_s=2.0, host=b.host) as sock:
            md = wire.metadata_v1(sock, topics)
    except (OSError, wire.WireError):
        return None
    out = {(t, p): v for t, parts in md["partitions"].items() for p, v in parts.items()}
    return out if out and all(v[0] >= 0 for v in out.values()) else None


def all_topics_on(b):
    return placement_on(b, [TOPIC, "__consumer_offsets"])


def full_isr_on(b):
    p = all_topics_on(b)
    return p if p and all(sorted(v[2]) == [1, 2, 3] for v in p.values()) else None


def preferred_by(p, node):
    return sorted(tp for tp, (_, replicas, _) in p.items() if replicas[0] == node)


def kill_and_restart_a_follower_of_the_controller(brokers):
    """Kill -9 a broker that is not the active controller, wait until its leaderships have
    moved, restart it and wait until it is back in every ISR. Returns (broker, its preferred
    partitions)."""
    controller = wait_for("a controller", lambda: (lambda v: v[1] if v[0] == [1, 2, 3] and v[1] > 0
                                                   else None)(cluster_view(brokers[0])))
    victim = next(b for b in brokers if node_id(b) != controller)
    witness = brokers[controller - 1]
    vid = node_id(victim)
    mine = preferred_by(wait_for("the ISRs full", lambda: full_isr_on(witness), WAIT_S), vid)
    assert any(t == TOPIC for t, _ in mine), mine
    victim.kill()
    wait_for("leaders off the killed broker", lambda: (lambda p: p and all(
        p[tp][0] != vid for tp in mine))(all_topics_on(witness)), WAIT_S)
    victim.start(timeout_s=WAIT_S)
    wait_for("the restarted broker in every ISR", lambda: full_isr_on(witness), WAIT_S)
    return victim, mine, witness


def as_code(result):
    """A partition's answer from elect_leaders: None, or its Kafka error code."""
    if result is None:
        return None
    error = result.args[0] if isinstance(result, KafkaException) else result
    return error.code()


def test_elect_leaders_moves_leadership_back_and_then_answers_election_not_needed(broker_factory):
    started = time.monotonic()
    brokers = start_cluster(broker_factory, extra_args=["--auto-leader-rebalance-enable", "false"])
    create(brokers[0], TOPIC, PARTITIONS, 3)
    victim, mine, witness = kill_and_restart_a_follower_of_the_controller(brokers)
    vid = node_id(victim)
    p = all_topics_on(witness)
    assert all(p[tp][0] != vid for tp in mine), f"leadership came back by itself: {p}"

    named = [TopicPartition(t, part) for t, part in mine if t == TOPIC]
    elected = admin(witness).elect_leaders(ElectionType.PREFERRED, named).result(WAIT_S)
    assert {(tp.topic, tp.partition): as_code(r) for tp, r in elected.items()} == {
        (tp.topic, tp.partition): None for tp in named}
    # Answered once applied on the broker that served it (the controller, which librdkafka
    # asks); the others replay it within moments.
    for b in brokers:
        wait_for("the preferred leader back", lambda b=b: (lambda p: p and all(
            p[(tp.topic, tp.partition)][0] == vid for tp in named))(all_topics_on(b)), 10)

    again = admin(witness).elect_leaders(ElectionType.PREFERRED, named).result(WAIT_S)
    assert {as_code(r) for r in again.values()} == {KafkaError.ELECTION_NOT_NEEDED}

    # All partitions (null): the internal topic's partitions move back too; those already led
    # by their preferred replica are left out of the answer, as Kafka does.
    everything = admin(witness).elect_leaders(ElectionType.PREFERRED, None).result(WAIT_S)
    rest = {(tp.topic, tp.partition) for tp in everything}
    assert rest == {tp for tp in mine if tp[0] != TOPIC}, everything
    assert all(as_code(r) is None for r in everything.values()), everything
    assert admin(witness).elect_leaders(ElectionType.PREFERRED, None).result(WAIT_S) == {}

    unknown = [TopicPartition(TOPIC, PARTITIONS + 1), TopicPartition("no-such-topic", 0)]
    answer = admin(witness).elect_leaders(ElectionType.PREFERRED, unknown).result(WAIT_S)
    assert {as_code(r) for r in answer.values()} == {KafkaError.UNKNOWN_TOPIC_OR_PART}
    print(f"test took {time.monotonic() - started:.1f} s")


def test_the_controller_moves_leadership_back_by_itself_within_the_check_interval(broker_factory):
    started = time.monotonic()
    brokers = start_cluster(broker_factory,
                            extra_args=["--leader-imbalance-check-interval-seconds", "2"])
    create(brokers[0], TOPIC, PARTITIONS, 3)
    victim, mine, witness = kill_and_restart_a_follower_of_the_controller(brokers)
    vid = node_id(victim)
    back_in_isr = time.monotonic()
    # The check runs every 2 s; the broker's heartbeat had to unfence it before it could
    # rejoin the ISRs, so the next check moves every preferred partition back.
    wait_for("leadership back on the preferred replica", lambda: (lambda p: p and all(
        p[tp][0] == vid for tp in mine))(all_topics_on(witness)), 10)
    took = time.monotonic() - back_in_isr
    print(f"leadership back {took * 1000:.0f} ms after the broker rejoined every ISR; "
          f"test took {time.monotonic() - started:.1f} s")
    assert took < 10

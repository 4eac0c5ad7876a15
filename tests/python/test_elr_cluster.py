"""KIP-966 (eligible leader replicas) across three real broker processes: RF=3 with
min.insync.replicas=2 and an idempotent acks=all producer; all three brokers are killed -9 at
once. None of them finds its clean-shutdown marker on restart, so the controller takes each out
of every ISR and ELR as it registers, and the partitions come back only through the last known
leader (a reported unclean election). kill -9 keeps the page cache, so that leader holds every
acknowledged record: none may be missing (read once the followers are back in the ISR: a leader
alone is under min ISR and its high watermark waits), and Metadata shows a leader inside its ISR.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from test_cluster import wait_for
from test_replication_cluster import (
    WAIT_S,
    Checker,
    check_acknowledged,
    placement_seen_by,
    read_all,
    setup,
    wait_full_isr,
)


def test_a_whole_cluster_killed_at_once_comes_back_with_every_acknowledged_record(broker_factory):
    brokers, bootstrap = setup(broker_factory)
    with Checker(bootstrap) as checker:
        wait_for("acks", lambda: checker.acked_count() > 500)
        checker.finish()
    before = placement_seen_by(brokers[0])
    for b in brokers:
        b.kill()
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda b: b.start(timeout_s=WAIT_S), brokers))
    after = wait_for("every partition led again", lambda: placement_seen_by(brokers[0]))
    for p, (leader, replicas, isr) in after.items():
        assert leader in isr, f"partition {p}: leader {leader} outside its ISR {isr}"
        assert set(isr) <= set(replicas) and sorted(replicas) == sorted(before[p][1]), (before, after)
    # The followers catch up with the recovered leaders and rejoin. Only then is everything
    # visible: a leader alone in its ISR is under min.insync.replicas=2, so its high watermark
    # stays at its checkpointed one until a follower is back (KIP-966's strict min ISR).
    wait_full_isr(brokers, brokers[0])
    got = read_all(bootstrap)
    check_acknowledged(checker, got)
    print(f"{checker.acked_count()} acknowledged before the kill; all present after it: {after}")

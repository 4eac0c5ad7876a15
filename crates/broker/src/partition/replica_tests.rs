//! One test per rule of the leader-side replica state, with an explicit clock (`now_ms`).

use super::IsrChangeOutcome::{Committed, Refused, Superseded, Unknown};
use super::*;

const LAG: i64 = 10_000;

fn config(min_isr: usize) -> ReplicaConfig {
    ReplicaConfig {
        replica_lag_time_max_ms: LAG,
        min_insync_replicas: min_isr,
    }
}

/// Broker 1 leads replicas [1, 2, 3] with the given ISR, its log ending at `leo`.
fn leader(isr: &[BrokerId], leo: i64, min_isr: usize) -> LeaderState {
    let state = LeaderAndIsr {
        leader_epoch: 5,
        partition_epoch: 7,
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
    };
    LeaderState::new(1, state, config(min_isr), leo, 0, 0)
}

#[test]
fn the_high_watermark_is_the_smallest_log_end_of_the_isr() {
    let mut l = leader(&[1, 2, 3], 0, 1);
    assert_eq!(l.on_local_append(10), None, "followers not heard from");
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    assert_eq!(l.high_watermark(), 0, "follower 3 has nothing yet");
    let out = l.on_follower_fetch(3, 6, 10, 1).unwrap();
    assert_eq!(out.high_watermark, Some(6));
    let out = l.on_follower_fetch(3, 10, 10, 2).unwrap();
    assert_eq!((out.high_watermark, l.high_watermark()), (Some(10), 10));
}

#[test]
fn replicas_outside_the_isr_do_not_hold_the_high_watermark_back() {
    // Epoch starts at 10: replica 3 at 0 is not eligible to join.
    let mut l = leader(&[1, 2], 10, 1);
    l.on_follower_fetch(3, 0, 10, 1).unwrap();
    let out = l.on_follower_fetch(2, 10, 10, 1).unwrap();
    assert_eq!(out.high_watermark, Some(10));
}

#[test]
fn the_high_watermark_never_moves_backwards() {
    let mut l = leader(&[1, 2], 0, 1);
    l.on_local_append(10);
    l.on_follower_fetch(2, 8, 10, 1).unwrap();
    assert_eq!(l.high_watermark(), 8);
    // A follower that restarted and fetches from an older offset.
    l.on_follower_fetch(2, 3, 10, 2).unwrap();
    assert_eq!(l.high_watermark(), 8);
    // A new leader that starts with a checkpointed high watermark keeps it.
    let state = LeaderAndIsr {
        leader_epoch: 6,
        partition_epoch: 8,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    let l = LeaderState::new(1, state, config(1), 10, 8, 0);
    assert_eq!(l.high_watermark(), 8);
}

#[test]
fn a_lone_leader_commits_on_append() {
    let mut l = leader(&[1], 0, 1);
    assert_eq!(l.on_local_append(4), Some(4));
    assert_eq!(l.replication(4), Replication::Done);
}

#[test]
fn a_follower_at_the_log_end_is_caught_up_now() {
    let mut l = leader(&[1, 2], 10, 1);
    l.on_follower_fetch(2, 10, 10, 5_000).unwrap();
    assert_eq!(l.follower(2).unwrap().last_caught_up_ms, 5_000);
}

#[test]
fn a_follower_that_reached_the_previous_log_end_was_caught_up_at_its_previous_fetch() {
    let mut l = leader(&[1, 2], 10, 1);
    l.on_follower_fetch(2, 4, 10, 1_000).unwrap();
    // The leader appended meanwhile: 10 is no longer the end, but it was at the last fetch.
    l.on_follower_fetch(2, 10, 20, 3_000).unwrap();
    assert_eq!(l.follower(2).unwrap().last_caught_up_ms, 1_000);
}

#[test]
fn a_lagging_isr_member_is_proposed_for_removal_after_the_lag_time_and_not_before() {
    let mut l = leader(&[1, 2, 3], 10, 1);
    l.on_follower_fetch(2, 10, 10, 0).unwrap();
    l.on_follower_fetch(3, 10, 10, 0).unwrap();
    l.on_local_append(20);
    l.on_follower_fetch(2, 20, 20, LAG).unwrap();
    assert_eq!(
        l.maybe_shrink(LAG),
        None,
        "exactly the lag time is not more"
    );
    let change = l.maybe_shrink(LAG + 1).unwrap();
    assert_eq!(
        change,
        IsrChange {
            new_isr: vec![1, 2],
            leader_epoch: 5,
            partition_epoch: 7
        }
    );
    // Until the controller answers, the ISR is unchanged and nothing else is proposed.
    assert_eq!(l.isr(), &[1, 2, 3]);
    assert_eq!(l.maybe_shrink(LAG * 5), None);
}

#[test]
fn a_follower_at_the_log_end_is_never_out_of_sync() {
    let mut l = leader(&[1, 2], 10, 1);
    l.on_follower_fetch(2, 10, 10, 0).unwrap();
    // No appends, no fetches for a long time: it still has everything.
    assert_eq!(l.maybe_shrink(LAG * 10), None);
}

#[test]
fn the_isr_changes_only_when_the_controller_accepts() {
    let mut l = leader(&[1, 2, 3], 10, 1);
    l.on_follower_fetch(2, 10, 10, 0).unwrap();
    l.on_follower_fetch(3, 10, 10, 0).unwrap();
    l.on_local_append(20);
    l.on_follower_fetch(2, 20, 20, 1).unwrap();
    assert_eq!(l.high_watermark(), 10, "3 holds it back");
    let change = l.maybe_shrink(LAG + 1).unwrap();
    // Refused (e.g. INELIGIBLE_REPLICA): nothing changes; a tick after the backoff proposes
    // again, none before it.
    assert_eq!(l.on_isr_change_result(&change, Refused), None);
    assert_eq!(l.isr(), &[1, 2, 3]);
    assert_eq!(l.maybe_shrink(LAG + 2), None);
    assert_eq!(
        l.maybe_shrink(LAG + 2 + ISR_CHANGE_RETRY_BACKOFF_MS - 1),
        None
    );
    assert_eq!(
        l.maybe_shrink(LAG + 2 + ISR_CHANGE_RETRY_BACKOFF_MS),
        Some(change.clone())
    );
    // Accepted with the next partition epoch: the shrink lets the high watermark advance.
    assert_eq!(
        l.on_isr_change_result(&change, Committed(vec![1, 2], 8)),
        Some(20)
    );
    assert_eq!((l.isr(), l.partition_epoch()), (&[1, 2][..], 8));
    // A stale answer (older partition epoch) is ignored.
    l.maybe_shrink(0);
    assert_eq!(l.on_isr_change_result(&change, Committed(vec![1], 8)), None);
    assert_eq!(l.isr(), &[1, 2]);
}

#[test]
fn a_replica_that_reaches_the_high_watermark_is_proposed_for_the_isr() {
    let mut l = leader(&[1, 2], 0, 1);
    l.on_local_append(10);
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    let out = l.on_follower_fetch(3, 5, 10, 1).unwrap();
    assert_eq!(out.isr_change, None, "below the high watermark");
    let out = l.on_follower_fetch(3, 10, 10, 2).unwrap();
    let change = out.isr_change.unwrap();
    assert_eq!(change.new_isr, vec![1, 2, 3]);
    // Pending expansion counts for the high watermark (maximal ISR).
    l.on_local_append(15);
    l.on_follower_fetch(2, 15, 15, 3).unwrap();
    assert_eq!(l.high_watermark(), 10, "3 is in the maximal ISR");
    l.on_follower_fetch(3, 15, 15, 3).unwrap();
    assert_eq!(l.high_watermark(), 15);
    l.on_isr_change_result(&change, Committed(vec![1, 2, 3], 8));
    assert_eq!(l.isr(), &[1, 2, 3]);
}

#[test]
fn a_replica_joins_only_once_it_has_the_start_of_this_leader_epoch() {
    // A new leader whose log ends at 10 but whose high watermark is still 4.
    let state = LeaderAndIsr {
        leader_epoch: 5,
        partition_epoch: 7,
        replicas: vec![1, 2],
        isr: vec![1],
    };
    let mut l = LeaderState::new(1, state, config(1), 10, 4, 0);
    assert_eq!(l.high_watermark(), 10, "alone in the ISR");
    let out = l.on_follower_fetch(2, 6, 10, 1).unwrap();
    assert_eq!(out.isr_change, None, "6 < the epoch start 10");
    let out = l.on_follower_fetch(2, 10, 10, 2).unwrap();
    assert!(out.isr_change.is_some());
}

#[test]
fn a_fetch_from_a_broker_outside_the_assignment_is_refused() {
    let mut l = leader(&[1, 2], 0, 1);
    assert_eq!(
        l.on_follower_fetch(9, 0, 0, 0),
        Err(ReplicaError::NotAReplica(9))
    );
}

#[test]
fn min_insync_replicas_is_checked_before_and_after_the_append() {
    let mut l = leader(&[1, 2], 0, 2);
    assert_eq!(l.check_enough_replicas(), Ok(()));
    l.on_local_append(10);
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    l.on_local_append(20);
    assert_eq!(l.replication(20), Replication::Pending);
    // The ISR shrinks to the leader before the follower got the second batch.
    let shrink = l.maybe_shrink(LAG + 2).unwrap();
    l.on_isr_change_result(&shrink, Committed(vec![1], 8));
    // The first batch passed the high watermark with two replicas, but a wait that looks
    // only now finds one (Kafka's checkEnoughReplicasReachOffset).
    assert_eq!(l.replication(10), Replication::NotEnoughReplicasAfterAppend);
    // The second can no longer be committed under min ISR: it waits (REQUEST_TIMED_OUT).
    assert_eq!(l.replication(20), Replication::Pending);
    assert_eq!(
        l.check_enough_replicas(),
        Err(ReplicaError::NotEnoughReplicas { isr: 1, min: 2 })
    );
}

#[test]
fn the_high_watermark_stays_while_the_isr_is_under_min_isr_and_resumes_when_it_grows_back() {
    let mut l = leader(&[1, 2], 0, 2);
    l.on_local_append(10);
    assert_eq!(
        l.on_follower_fetch(2, 10, 10, 1).unwrap().high_watermark,
        Some(10)
    );
    l.on_local_append(12);
    let shrink = l.maybe_shrink(LAG + 2).unwrap();
    assert_eq!(shrink.new_isr, vec![1]);
    // Before the controller accepts, 2 still holds the high watermark (as before).
    assert_eq!(l.on_local_append(15), None);
    // Committed: ISR [1] < min ISR 2. Kafka would have moved the HW to the leader's LEO
    // here before KIP-966; now it stays, and acks=0/1 appends are not visible.
    assert_eq!(l.on_isr_change_result(&shrink, Committed(vec![1], 8)), None);
    assert!(l.is_under_min_isr());
    assert_eq!(l.on_local_append(30), None);
    assert_eq!(l.high_watermark(), 10);
    // 2 comes back at the high watermark: proposed at once. A pending expansion is in the
    // maximal ISR, but the committed ISR is still under min ISR: the HW waits for the commit.
    let out = l.on_follower_fetch(2, 10, 30, LAG + 3).unwrap();
    let expand = out.isr_change.unwrap();
    assert_eq!(
        (expand.new_isr.clone(), out.high_watermark),
        (vec![1, 2], None)
    );
    assert_eq!(
        l.on_follower_fetch(2, 30, 30, LAG + 4)
            .unwrap()
            .high_watermark,
        None
    );
    assert_eq!(l.high_watermark(), 10);
    // The expansion commits: the HW jumps to the smallest log end of the new ISR.
    assert_eq!(
        l.on_isr_change_result(&expand, Committed(vec![1, 2], 9)),
        Some(30)
    );
    assert!(!l.is_under_min_isr());
}

#[test]
fn metadata_that_brings_the_isr_back_to_min_isr_releases_the_high_watermark() {
    let mut l = leader(&[1], 0, 2);
    assert_eq!(l.on_local_append(10), None);
    l.on_follower_fetch(3, 10, 10, 1).unwrap();
    assert_eq!(l.high_watermark(), 0);
    assert_eq!(l.on_metadata_isr(vec![1, 3], 8), Some(10));
}

#[test]
fn the_effective_min_isr_is_min_insync_replicas_at_most_the_replica_count() {
    // Kafka's effectiveMinIsr: min(min.insync.replicas, replicas). Three replicas, min 5.
    let mut l = leader(&[1, 2, 3], 0, 5);
    assert_eq!(l.effective_min_isr(), 3);
    assert_eq!(l.check_enough_replicas(), Ok(()));
    l.on_local_append(10);
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    l.on_follower_fetch(3, 10, 10, 1).unwrap();
    assert_eq!(
        (l.high_watermark(), l.replication(10)),
        (10, Replication::Done)
    );
    // RF=1 with min.insync.replicas=2: never under min ISR, acks=all is accepted.
    let state = LeaderAndIsr {
        leader_epoch: 1,
        partition_epoch: 1,
        replicas: vec![1],
        isr: vec![1],
    };
    let mut lone = LeaderState::new(1, state, config(2), 0, 0, 0);
    assert_eq!(lone.effective_min_isr(), 1);
    assert_eq!(lone.check_enough_replicas(), Ok(()));
    assert_eq!(lone.on_local_append(4), Some(4));
    assert_eq!(lone.replication(4), Replication::Done);
    // A replica added within the leadership raises the cap (and the ISR is then under it).
    let mut l = leader(&[1, 2], 0, 3);
    l.on_metadata_replicas(&[1, 2]);
    assert_eq!(l.effective_min_isr(), 2);
    l.on_metadata_replicas(&[1, 2, 3]);
    assert_eq!((l.effective_min_isr(), l.is_under_min_isr()), (3, true));
}

#[test]
fn a_lower_min_isr_releases_the_high_watermark_at_once() {
    let mut l = leader(&[1], 0, 2);
    assert_eq!(l.on_local_append(10), None);
    assert_eq!(l.set_config(config(2)), None);
    assert_eq!(l.set_config(config(1)), Some(10));
    // And a higher one holds it again.
    assert_eq!(l.set_config(config(2)), None);
    assert_eq!(l.on_local_append(20), None);
    assert_eq!(l.high_watermark(), 10);
}

#[test]
fn min_insync_replicas_comes_from_the_topic_config() {
    let configs = [("min.insync.replicas".to_string(), "2".to_string())].into();
    assert_eq!(
        ReplicaConfig::default()
            .with_topic_configs(&configs)
            .min_insync_replicas,
        2
    );
}

#[test]
fn truncation_follows_the_leaders_epoch_end() {
    // Follower epochs: 1 from 0, 3 from 10; log end 15. Leader: epoch 3 ended at 12.
    let local = |e: i32| match e {
        0..=2 => Some((1, 10)),
        3 => Some((3, 15)),
        _ => None,
    };
    assert_eq!(truncation_offset((3, 12), local, 15, 5), (12, true));
    // Leader never had epoch 3: it answers its largest epoch below, 2, ending at 8. The
    // follower has no epoch 2 (its floor is 1), so it truncates to epoch 1's end and asks again.
    assert_eq!(truncation_offset((2, 8), local, 15, 5), (10, false));
    // An end beyond the follower's log truncates nothing.
    assert_eq!(truncation_offset((3, 40), local, 15, 5), (15, true));
    // The leader knows no epochs: keep only what was committed.
    assert_eq!(truncation_offset((-1, -1), local, 15, 5), (5, true));
}

#[test]
fn a_refused_expansion_is_proposed_again_only_after_the_backoff() {
    // 3 is caught up but still fenced at the controller: INELIGIBLE_REPLICA.
    let mut l = leader(&[1, 2], 10, 1);
    let first = l.on_follower_fetch(3, 10, 10, 100).unwrap().isr_change;
    assert_eq!(
        first.as_ref().map(|c| c.new_isr.clone()),
        Some(vec![1, 2, 3])
    );
    assert_eq!(
        l.on_isr_change_result(first.as_ref().unwrap(), Refused),
        None
    );
    // Its fetches keep coming every few milliseconds: none re-sends the refused change.
    for t in [101, 150, 100 + ISR_CHANGE_RETRY_BACKOFF_MS] {
        assert_eq!(
            l.on_follower_fetch(3, 10, 10, t).unwrap().isr_change,
            None,
            "at {t}"
        );
    }
    let again = l
        .on_follower_fetch(3, 10, 10, 101 + ISR_CHANGE_RETRY_BACKOFF_MS)
        .unwrap();
    assert_eq!(again.isr_change, first);
}

/// Leader 1 with ISR [1, 2] proposes adding 3 (caught up at 10), and the answer is lost.
fn expansion_with_a_lost_answer() -> (LeaderState, IsrChange) {
    let mut l = leader(&[1, 2], 10, 1);
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    let change = l
        .on_follower_fetch(3, 10, 10, 1)
        .unwrap()
        .isr_change
        .unwrap();
    assert_eq!(change.new_isr, vec![1, 2, 3]);
    (l, change)
}

#[test]
fn an_expansion_whose_answer_was_lost_still_holds_the_high_watermark() {
    // The controller may have committed [1, 2, 3]: 3 could be elected with only what it has,
    // so what 3 lacks must not count as committed until the metadata says which it is.
    let (mut l, change) = expansion_with_a_lost_answer();
    assert_eq!(l.on_isr_change_result(&change, Unknown), None);
    assert_eq!(l.pending_isr(), Some(&[1, 2, 3][..]));
    l.on_local_append(20);
    l.on_follower_fetch(2, 20, 20, 2).unwrap();
    assert_eq!(l.high_watermark(), 10, "3 still counts");
    // The same proposal goes out again after the backoff, not before.
    assert_eq!(l.maybe_shrink(3), None);
    assert_eq!(l.maybe_shrink(3 + ISR_CHANGE_RETRY_BACKOFF_MS - 1), None);
    assert_eq!(
        l.maybe_shrink(3 + ISR_CHANGE_RETRY_BACKOFF_MS),
        Some(change.clone())
    );
    // The retry finds a newer epoch (the first try had committed): wait for the metadata.
    assert_eq!(l.on_isr_change_result(&change, Superseded), None);
    assert_eq!(
        l.maybe_shrink(10 * ISR_CHANGE_RETRY_BACKOFF_MS),
        None,
        "not re-sent"
    );
    l.on_follower_fetch(2, 20, 20, 4).unwrap();
    assert_eq!(l.high_watermark(), 10, "3 still counts");
    // The metadata brings the commit: 3 is in the ISR for good.
    l.on_metadata_isr(vec![1, 2, 3], 8);
    assert_eq!((l.isr(), l.pending_isr()), (&[1, 2, 3][..], None));
    l.on_follower_fetch(3, 20, 20, 5).unwrap();
    assert_eq!(l.high_watermark(), 20);
}

#[test]
fn metadata_without_the_expansion_ends_it() {
    // The controller never took it (another change came first): the new ISR is the truth,
    // and 3 is proposed again from there.
    let (mut l, change) = expansion_with_a_lost_answer();
    l.on_isr_change_result(&change, Superseded);
    l.on_local_append(20);
    l.on_follower_fetch(2, 20, 20, 2).unwrap();
    assert_eq!(l.high_watermark(), 10);
    assert_eq!(l.on_metadata_isr(vec![1, 2], 8), Some(20));
    assert_eq!(l.pending_isr(), None);
    let again = l
        .on_follower_fetch(3, 20, 20, 3)
        .unwrap()
        .isr_change
        .unwrap();
    assert_eq!((again.new_isr, again.partition_epoch), (vec![1, 2, 3], 8));
}

#[test]
fn a_late_answer_to_an_earlier_proposal_leaves_the_pending_one_alone() {
    let (mut l, first) = expansion_with_a_lost_answer();
    l.on_metadata_isr(vec![1, 2], 8);
    let second = l
        .on_follower_fetch(3, 10, 10, 2)
        .unwrap()
        .isr_change
        .unwrap();
    assert_ne!(first, second);
    for late in [Refused, Unknown, Superseded, Committed(vec![1, 2], 8)] {
        l.on_isr_change_result(&first, late);
        assert_eq!(l.pending_isr(), Some(&[1, 2, 3][..]));
    }
    l.on_isr_change_result(&second, Committed(vec![1, 2, 3], 9));
    assert_eq!((l.isr(), l.pending_isr()), (&[1, 2, 3][..], None));
}

#[test]
fn a_replica_added_within_the_leadership_is_tracked_and_joins_the_isr_once_caught_up() {
    // A reassignment (KIP-455) adds 4 without a new leader epoch.
    let mut l = leader(&[1, 2, 3], 10, 1);
    assert_eq!(
        l.on_follower_fetch(4, 0, 10, 1),
        Err(ReplicaError::NotAReplica(4))
    );
    l.on_metadata_replicas(&[1, 2, 3, 4]);
    assert_eq!(l.replicas(), &[1, 2, 3, 4]);
    assert_eq!(
        l.isr(),
        &[1, 2, 3],
        "an added replica starts outside the ISR"
    );
    let out = l.on_follower_fetch(4, 4, 10, 1).unwrap();
    assert_eq!(out.isr_change, None, "behind the high watermark");
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    l.on_follower_fetch(3, 10, 10, 1).unwrap();
    let out = l.on_follower_fetch(4, 10, 10, 2).unwrap();
    assert_eq!(out.isr_change.map(|c| c.new_isr), Some(vec![1, 2, 3, 4]));
}

#[test]
fn a_replica_that_left_the_assignment_no_longer_holds_the_high_watermark() {
    let mut l = leader(&[1, 2, 3], 0, 1);
    l.on_local_append(10);
    l.on_follower_fetch(2, 10, 10, 1).unwrap();
    assert_eq!(l.high_watermark(), 0, "3 has nothing yet");
    assert_eq!(l.on_metadata_replicas(&[1, 2]), Some(10));
    assert_eq!(l.isr(), &[1, 2]);
    assert_eq!(
        l.on_follower_fetch(3, 10, 10, 2),
        Err(ReplicaError::NotAReplica(3))
    );
}

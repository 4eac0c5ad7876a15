//! Broker liveness: registration, heartbeats, fencing after the session timeout, unfencing when
//! caught up, controlled shutdown, and producer-id blocks.

use kafka_protocol::ResponseError;

use super::{BrokerHeartbeat, BrokerRegistration, Controller, Effects, HeartbeatReply};
use super::{ProducerIdBlock, Reply};
use crate::records::{BrokerId, ProducerIdsRecord, Record, RegisterBroker};

impl Controller {
    /// BrokerRegistration: a new broker, or a restart (new incarnation) of one whose session has
    /// ended. A different incarnation while the old one is alive is a duplicate id.
    pub(super) fn register(
        &mut self,
        r: BrokerRegistration,
        now_ms: u64,
        fx: &mut Effects,
    ) -> Reply {
        // Node ids are non-negative (-1 means "no leader" in every partition).
        if r.broker_id < 0 {
            return Reply::BrokerRegistration(Err(ResponseError::InvalidRequest));
        }
        if let Some(old) = self.image.broker(r.broker_id).cloned() {
            let alive = !old.fenced && !self.session_expired(r.broker_id, now_ms);
            if old.incarnation_id != r.incarnation_id && alive {
                return Reply::BrokerRegistration(Err(ResponseError::DuplicateBrokerRegistration));
            }
            if r.previous_broker_epoch != old.epoch {
                // No proof of a clean stop: the page cache may be gone, and with it records
                // this broker had acknowledged (KIP-966, Kafka's ClusterControlManager).
                tracing::info!(
                    broker = r.broker_id,
                    previous_broker_epoch = r.previous_broker_epoch,
                    broker_epoch = old.epoch,
                    "broker restarted after an unclean shutdown: out of every ISR and ELR"
                );
                for (topic_id, partition, change) in
                    self.changes_after_unclean_shutdown(r.broker_id)
                {
                    self.emit_partition_change(topic_id, partition, change, fx);
                }
            }
            // The old incarnation's leaderships and ISR places go before the new one joins.
            self.fence(r.broker_id, fx);
        }
        let broker_epoch = self.image.broker_epoch_max() + 1;
        self.emit(
            Record::RegisterBroker(RegisterBroker {
                broker_id: r.broker_id,
                broker_epoch,
                incarnation_id: r.incarnation_id,
                endpoints: r.endpoints,
                rack: r.rack,
                fenced: true,
            }),
            fx,
        );
        self.last_contact_ms.insert(r.broker_id, now_ms);
        Reply::BrokerRegistration(Ok(broker_epoch))
    }

    /// BrokerHeartbeat: renew the session; unfence once caught up; fence or shut down on request.
    pub(super) fn heartbeat(&mut self, h: BrokerHeartbeat, now_ms: u64, fx: &mut Effects) -> Reply {
        if let Err(e) = self.check_broker_epoch(h.broker_id, h.broker_epoch) {
            return Reply::BrokerHeartbeat(Err(e));
        }
        self.last_contact_ms.insert(h.broker_id, now_ms);
        let registered_at = self.registered_at.get(&h.broker_id).copied();
        let is_caught_up = registered_at.is_some_and(|at| h.metadata_offset >= at);
        let fenced = !self.image.is_unfenced(h.broker_id);
        if h.wants_shutdown {
            if !fenced {
                self.fence(h.broker_id, fx);
            }
            let reply = HeartbeatReply {
                is_caught_up,
                is_fenced: true,
                should_shut_down: true,
            };
            return Reply::BrokerHeartbeat(Ok(reply));
        }
        if h.wants_fence && !fenced {
            self.fence(h.broker_id, fx);
        } else if !h.wants_fence && fenced && is_caught_up {
            self.unfence(h.broker_id, fx);
        }
        let is_fenced = !self.image.is_unfenced(h.broker_id);
        let reply = HeartbeatReply {
            is_caught_up,
            is_fenced,
            should_shut_down: false,
        };
        Reply::BrokerHeartbeat(Ok(reply))
    }

    /// STALE_BROKER_EPOCH unless `id` is registered with exactly `epoch` (KRaft's
    /// `checkBrokerEpoch`, which answers an unknown broker the same way).
    pub(super) fn check_broker_epoch(&self, id: BrokerId, epoch: i64) -> Result<(), ResponseError> {
        match self.image.broker(id) {
            Some(b) if b.epoch == epoch => Ok(()),
            _ => Err(ResponseError::StaleBrokerEpoch),
        }
    }

    pub(super) fn session_expired(&self, id: BrokerId, now_ms: u64) -> bool {
        let last = self.last_contact_ms.get(&id).copied().unwrap_or(0);
        now_ms.saturating_sub(last) > self.config.broker_session_timeout_ms
    }

    /// Tick: fence every unfenced broker silent for longer than the session timeout, then run
    /// the periodic preferred-leader rebalance.
    pub(super) fn tick(&mut self, now_ms: u64, fx: &mut Effects) {
        let silent: Vec<BrokerId> = self
            .image
            .unfenced_brokers()
            .map(|b| b.id)
            .filter(|&id| self.session_expired(id, now_ms))
            .collect();
        for id in silent {
            tracing::info!(broker = id, "fencing a broker whose session timed out");
            self.fence(id, fx);
        }
        let interval = self.config.leader_imbalance_check_interval_ms;
        if self.config.auto_leader_rebalance_enable
            && now_ms.saturating_sub(self.last_rebalance_ms) >= interval
        {
            self.last_rebalance_ms = now_ms;
            self.rebalance_preferred_leaders(fx);
        }
    }

    /// Take `id` out of every ISR (into the ELR where the ISR falls below min ISR, KIP-966),
    /// move its leaderships to the next eligible replica, then fence it. Partition changes come first so no committed prefix of
    /// the batch has a fenced leader.
    pub(super) fn fence(&mut self, id: BrokerId, fx: &mut Effects) {
        for (topic_id, partition, change) in self.changes_without(id) {
            self.emit_partition_change(topic_id, partition, change, fx);
        }
        if let Some(b) = self.image.broker(id)
            && !b.fenced
        {
            let broker_epoch = b.epoch;
            self.emit(
                Record::FenceBroker {
                    broker_id: id,
                    broker_epoch,
                },
                fx,
            );
        }
    }

    /// Unfence `id`, then give it the partitions that have no leader and can take it.
    fn unfence(&mut self, id: BrokerId, fx: &mut Effects) {
        let Some(broker_epoch) = self.image.broker(id).map(|b| b.epoch) else {
            return;
        };
        self.emit(
            Record::UnfenceBroker {
                broker_id: id,
                broker_epoch,
            },
            fx,
        );
        self.elect_leaderless(fx);
    }

    /// AllocateProducerIds: the next block, unique across the cluster because the block's end
    /// is a committed record before any id of it is used.
    pub(super) fn allocate_producer_ids(
        &mut self,
        broker_id: BrokerId,
        broker_epoch: i64,
        fx: &mut Effects,
    ) -> Reply {
        if let Err(e) = self.check_broker_epoch(broker_id, broker_epoch) {
            return Reply::AllocateProducerIds(Err(e));
        }
        let start = self.image.next_producer_id();
        let len = self.config.producer_id_block_size;
        let Some(next_producer_id) = start.checked_add(len) else {
            return Reply::AllocateProducerIds(Err(ResponseError::UnknownServerError));
        };
        self.emit(
            Record::ProducerIds(ProducerIdsRecord {
                broker_id,
                broker_epoch,
                next_producer_id,
            }),
            fx,
        );
        Reply::AllocateProducerIds(Ok(ProducerIdBlock { start, len }))
    }
}

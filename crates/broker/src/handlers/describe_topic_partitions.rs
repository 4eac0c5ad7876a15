//! DescribeTopicPartitions (75, KIP-966): the partitions of the named topics, or of every topic,
//! one page at a time, with each partition's eligible leader replicas (ELR) and last known ELR
//! as the metadata image holds them. Kafka 4's `kafka-topics --describe` and
//! `Admin.describeTopics` use it when the broker advertises it (the ELR columns come only from
//! here; over Metadata the tool prints `Elr: N/A`).
//!
//! The rules are Kafka 4.1's (`DescribeTopicPartitionsRequestHandler`,
//! `KRaftMetadataCache.describeTopicResponse`):
//! - an empty topic list means every topic; only the topics at or after the cursor's topic
//!   (by name) are described, in name order, each named topic once;
//! - a cursor whose topic is not among the listed topics, or whose partition is negative, makes
//!   the whole request INVALID_REQUEST (every listed topic answered with it);
//! - a page holds at most `response_partition_limit` partitions, capped at
//!   [`RESPONSE_PARTITIONS_MAX`] and at least one. The cursor's topic starts at the cursor's
//!   partition, every other topic at 0. When the page fills inside a topic, `next_cursor` names
//!   the first partition left out; when it fills at a topic's end, the next topic at 0;
//! - a named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for
//!   a name no topic may have), takes no room on the page, and is answered only while the page
//!   has room left;
//! - DESCRIBE on the topic: a named topic without it is TOPIC_AUTHORIZATION_FAILED (after the
//!   page, with no id, whether it exists or not); listing every topic leaves it out.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId as WireBrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};
use streamforge_metadata::{BrokerId, MetadataImage, NO_LEADER, PartitionState, TopicImage};
use streamforge_protocol::{RequestFrame, ResponseError};
use uuid::Uuid;

use crate::BrokerState;
use crate::handlers::topic_name;
use crate::replica_manager::{is_internal_topic, validate_topic_name};
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation, Resource};

/// Kafka's `max.request.partition.size.limit` (default 2000): the most partitions one response
/// holds, whatever the request's `response_partition_limit` asks.
pub const RESPONSE_PARTITIONS_MAX: i32 = 2000;

pub async fn handle(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeTopicPartitionsRequest = req.decode()?;
    let image = state.replicas.image();
    let offline_here = |topic: &str| offline_here(&state, topic);
    let view = ReplicaView {
        image: &image,
        node: state.node_id(),
        listener: state.security.endpoint(req.listener).protocol.name(),
        offline_here: &offline_here,
    };
    let access = Access::of(&state, &req);
    // Listing every topic only filters: no INFO line per topic left out (as Metadata).
    let filter = if request.topics.is_empty() {
        access.quiet()
    } else {
        access.clone()
    };
    let auth = Authorization {
        may_describe: &|name| filter.topic(Operation::Describe, name),
        operations: &|name| access.operations(&Resource::topic(name)),
    };
    let resp = describe(&request, &view, &auth).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "DescribeTopicPartitions refused");
        error_response(&request, ResponseError::InvalidRequest)
    });
    Ok(Some(req.respond(&resp)?))
}

/// Partitions of `topic` hosted here whose log could not be opened: offline replicas here (and
/// no leader, as the Metadata handler reports them).
fn offline_here(state: &BrokerState, topic: &str) -> BTreeSet<i32> {
    let Some(topic) = state.replicas.topic(topic) else {
        return BTreeSet::new();
    };
    topic
        .hosted()
        .filter(|p| p.offline_reason().is_some())
        .map(|p| p.index)
        .collect()
}

/// What a partition looks like from this broker: the image, plus which of its own replicas
/// are offline.
pub(crate) struct ReplicaView<'a> {
    pub image: &'a MetadataImage,
    /// This broker's id.
    pub node: BrokerId,
    /// The listener the request came in on, by the name brokers register it under.
    pub listener: &'a str,
    /// The partitions of a topic hosted here whose log is offline.
    pub offline_here: &'a dyn Fn(&str) -> BTreeSet<i32>,
}

/// The request principal's rights: DESCRIBE on a topic, and a topic's KIP-430 bit field.
pub(crate) struct Authorization<'a> {
    pub may_describe: &'a dyn Fn(&str) -> bool,
    pub operations: &'a dyn Fn(&str) -> i32,
}

/// Why a request is INVALID_REQUEST as a whole (Kafka's `InvalidRequestException`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidCursor {
    #[error("DescribeTopicPartitionsRequest topic list should contain the cursor topic: {0}")]
    TopicNotListed(String),
    #[error("DescribeTopicPartitionsRequest cursor partition must be valid: {0}")]
    NegativePartition(i32),
}

/// The response to `request`, or why the request is invalid.
pub(crate) fn describe(
    request: &DescribeTopicPartitionsRequest,
    view: &ReplicaView<'_>,
    auth: &Authorization<'_>,
) -> Result<DescribeTopicPartitionsResponse, InvalidCursor> {
    let fetch_all = request.topics.is_empty();
    let cursor = request
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.as_str(), c.partition_index));
    let cursor_topic = cursor.map_or("", |(topic, _)| topic);
    let names = topics_to_describe(request, view.image, cursor_topic);
    if let Some((topic, index)) = cursor {
        if !fetch_all && !names.contains(topic) {
            return Err(InvalidCursor::TopicNotListed(topic.to_string()));
        }
        if index < 0 {
            return Err(InvalidCursor::NegativePartition(index));
        }
    }
    let (allowed, denied): (Vec<&str>, Vec<&str>) =
        names.iter().partition(|name| (auth.may_describe)(name));
    let limit = request
        .response_partition_limit
        .clamp(1, RESPONSE_PARTITIONS_MAX);
    let start = |name: &str| match cursor {
        Some((topic, index)) if topic == name => index,
        _ => 0,
    };
    let (mut topics, next_cursor) = page(view, &allowed, start, limit, fetch_all);
    for t in &mut topics {
        if let Some(name) = &t.name {
            t.topic_authorized_operations = (auth.operations)(name.0.as_str());
        }
    }
    if !fetch_all {
        // Kafka does not reveal whether these exist: no id, no partitions.
        topics.extend(
            denied
                .into_iter()
                .map(|name| error_topic(name, ResponseError::TopicAuthorizationFailed, false)),
        );
    }
    let mut resp = DescribeTopicPartitionsResponse::default();
    resp.topics = topics;
    resp.next_cursor = next_cursor;
    Ok(resp)
}

/// The listed topics (every topic of the image when none is), from the cursor's topic on, once
/// each, in name order.
fn topics_to_describe<'r>(
    request: &'r DescribeTopicPartitionsRequest,
    image: &'r MetadataImage,
    cursor_topic: &str,
) -> BTreeSet<&'r str> {
    let names: Box<dyn Iterator<Item = &'r str>> = if request.topics.is_empty() {
        Box::new(image.topics().map(|t| t.name.as_str()))
    } else {
        Box::new(request.topics.iter().map(|t| t.name.0.as_str()))
    };
    names.filter(|name| *name >= cursor_topic).collect()
}

/// One page: the topics `names` (sorted) from `start(name)` on, at most `limit` partitions in
/// all, and where the next page starts when they do not all fit.
fn page(
    view: &ReplicaView<'_>,
    names: &[&str],
    start: impl Fn(&str) -> i32,
    limit: i32,
    fetch_all: bool,
) -> (Vec<DescribeTopicPartitionsResponseTopic>, Option<Cursor>) {
    let mut topics = Vec::new();
    let mut remaining = limit;
    for &name in names {
        if remaining == 0 {
            // The page ended with the previous topic's last partition.
            return (topics, Some(cursor_at(name, 0)));
        }
        let Some(topic) = view.image.topic_by_name(name) else {
            if !fetch_all {
                topics.push(unknown_topic(name));
            }
            continue;
        };
        let (partitions, next) = view.partitions(topic, start(name), remaining);
        remaining -= i32::try_from(partitions.len()).expect("at most `remaining` partitions");
        assert!(remaining >= 0, "a page holds at most its limit");
        topics.push(topic_entry(topic, partitions));
        if let Some(next) = next {
            return (topics, Some(cursor_at(name, next)));
        }
    }
    (topics, None)
}

impl ReplicaView<'_> {
    /// Partitions `start..` of `topic`, at most `max` of them, and the index of the first one
    /// left out (None when the topic ends on this page).
    fn partitions(
        &self,
        topic: &TopicImage,
        start: i32,
        max: i32,
    ) -> (Vec<DescribeTopicPartitionsResponsePartition>, Option<i32>) {
        let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
        let upper = count.min(start.saturating_add(max));
        let next = (upper < count).then_some(upper);
        if start >= upper {
            return (Vec::new(), next);
        }
        let offline_here = (self.offline_here)(&topic.name);
        let partitions = topic
            .partitions
            .range(start..upper)
            .map(|(&index, s)| self.partition(index, s, offline_here.contains(&index)))
            .collect();
        (partitions, next)
    }

    fn partition(
        &self,
        index: i32,
        s: &PartitionState,
        offline_here: bool,
    ) -> DescribeTopicPartitionsResponsePartition {
        let mut p = DescribeTopicPartitionsResponsePartition::default();
        p.error_code = 0;
        p.partition_index = index;
        p.leader_id = WireBrokerId(self.leader(s, offline_here));
        p.leader_epoch = s.leader_epoch;
        p.replica_nodes = ids(&s.replicas);
        p.isr_nodes = ids(&s.isr);
        // Never null: Kafka's clients read both lists without a null check.
        p.eligible_leader_replicas = Some(ids(&s.elr));
        p.last_known_elr = Some(ids(&s.last_known_elr));
        p.offline_replicas = s
            .replicas
            .iter()
            .copied()
            .filter(|&r| self.is_offline(r, offline_here))
            .map(WireBrokerId)
            .collect();
        p
    }

    /// The image's leader when it is a registered broker with this listener and, if it is this
    /// broker, its log is online; else -1 (Kafka's "no leader").
    fn leader(&self, s: &PartitionState, offline_here: bool) -> BrokerId {
        let here_offline = s.leader == self.node && offline_here;
        let registered = self.image.broker(s.leader).is_some_and(|b| {
            b.id == self.node || b.endpoints.iter().any(|e| e.name == self.listener)
        });
        if s.leader == NO_LEADER || !registered || here_offline {
            NO_LEADER
        } else {
            s.leader
        }
    }

    /// Kafka's offline replica: its broker is unknown, fenced or without this listener, or (here)
    /// its log could not be opened.
    fn is_offline(&self, replica: BrokerId, offline_here: bool) -> bool {
        if replica == self.node && offline_here {
            return true;
        }
        self.image.broker(replica).is_none_or(|b| {
            b.fenced || (b.id != self.node && !b.endpoints.iter().any(|e| e.name == self.listener))
        })
    }
}

fn ids(brokers: &[BrokerId]) -> Vec<WireBrokerId> {
    brokers.iter().copied().map(WireBrokerId).collect()
}

fn cursor_at(topic: &str, partition_index: i32) -> Cursor {
    let mut c = Cursor::default();
    c.topic_name = topic_name(topic);
    c.partition_index = partition_index;
    c
}

fn topic_entry(
    topic: &TopicImage,
    partitions: Vec<DescribeTopicPartitionsResponsePartition>,
) -> DescribeTopicPartitionsResponseTopic {
    let mut t = DescribeTopicPartitionsResponseTopic::default();
    t.error_code = 0;
    t.name = Some(topic_name(&topic.name));
    t.topic_id = topic.id;
    t.is_internal = is_internal_topic(&topic.name);
    t.partitions = partitions;
    t
}

/// A named topic the image does not have.
fn unknown_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let code = match validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(_) => ResponseError::InvalidTopicException,
    };
    error_topic(name, code, is_internal_topic(name))
}

fn error_topic(
    name: &str,
    code: ResponseError,
    is_internal: bool,
) -> DescribeTopicPartitionsResponseTopic {
    let mut t = DescribeTopicPartitionsResponseTopic::default();
    t.error_code = code.code();
    t.name = Some(topic_name(name));
    t.topic_id = Uuid::nil();
    t.is_internal = is_internal;
    t
}

/// A request refused as a whole: every listed topic with `code`, as Kafka's
/// `DescribeTopicPartitionsRequest.getErrorResponse` answers (listing every topic: none).
pub(crate) fn error_response(
    request: &DescribeTopicPartitionsRequest,
    code: ResponseError,
) -> DescribeTopicPartitionsResponse {
    let mut resp = DescribeTopicPartitionsResponse::default();
    resp.topics = request
        .topics
        .iter()
        .map(|t| error_topic(t.name.0.as_str(), code, false))
        .collect();
    resp
}

#[cfg(test)]
#[path = "describe_topic_partitions_tests.rs"]
mod tests;

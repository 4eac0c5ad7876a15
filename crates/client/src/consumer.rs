//! The consumer: assign or subscribe (classic group protocol), pipelined fetches, auto and
//! manual commit, seek by offset or timestamp, decompression and CRC verification.
//!
//! Fetching, as Kafka's Java consumer and librdkafka do it: each leader broker has at most one
//! Fetch in flight, for its assigned partitions that have a position, no Fetch in flight and no
//! records waiting to be returned. Each broker's response is delivered as soon as it arrives,
//! and that broker gets its next Fetch without waiting for the others, so one broker's empty
//! long poll (`fetch_max_wait_ms`) never holds back records another broker already returned.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::assignor::Assignor;
use crate::cluster::{ClientConfig, Cluster};
use crate::error::{ClientError, Result};
use crate::group::{self, GroupConfig, Membership};
use crate::offsets::{self, CommittedOffset, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition};
use crate::records::{Header, split_batches};
use kafka_protocol::ResponseError;
use kafka_protocol::error::ParseResponseErrorCode;

mod batches;

pub use batches::ConsumedBatch;

const FETCH_MAX_VERSION: i16 = 12;

/// Where to start when there is no committed offset (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail instead of guessing.
    None,
}

impl std::str::FromStr for OffsetReset {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            o => Err(format!(
                "offset reset must be earliest, latest or none, not '{o}'"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub client: ClientConfig,
    pub group_id: Option<String>,
    pub auto_offset_reset: OffsetReset,
    pub enable_auto_commit: bool,
    pub auto_commit_interval_ms: u64,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub heartbeat_interval_ms: u64,
    pub assignors: Vec<Assignor>,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait_ms: i32,
    pub max_partition_fetch_bytes: i32,
    /// Verify each batch's CRC-32C (`check.crcs`).
    pub check_crcs: bool,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            client: ClientConfig::default(),
            group_id: None,
            auto_offset_reset: OffsetReset::Latest,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5_000,
            session_timeout_ms: 45_000,
            rebalance_timeout_ms: 300_000,
            heartbeat_interval_ms: 3_000,
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 * 1024 * 1024,
            fetch_max_wait_ms: 500,
            max_partition_fetch_bytes: 1024 * 1024,
            check_crcs: true,
            isolation_level: 0,
        }
    }
}

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

/// Raw data of one partition from one fetch.
#[derive(Debug)]
struct PartitionFetch {
    tp: (Arc<str>, i32),
    fetch_offset: i64,
    error_code: i16,
    high_watermark: i64,
    records: Bytes,
}

/// What one broker's Fetch task hands back.
struct BrokerFetch {
    leader: i32,
    /// The consumer's epoch when the Fetch was sent; a different one now means stale.
    epoch: u64,
    /// The partitions the Fetch asked for (in flight until this comes back).
    tps: Vec<(Arc<str>, i32)>,
    result: Result<Vec<PartitionFetch>>,
}

/// An async Kafka consumer.
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    subscription: Vec<String>,
    /// Next offset to fetch per assigned partition; `None` until looked up.
    positions: HashMap<(Arc<str>, i32), Option<i64>>,
    high_watermarks: HashMap<(Arc<str>, i32), i64>,
    membership: Option<Membership>,
    /// One Fetch task per broker with a Fetch in flight (never more than one per broker).
    in_flight: FuturesUnordered<JoinHandle<BrokerFetch>>,
    /// Brokers with a Fetch in flight.
    fetching_brokers: HashSet<i32>,
    /// Partitions with a Fetch in flight: a partition is never in two Fetches at once.
    fetching_partitions: HashSet<(Arc<str>, i32)>,
    /// Bumped on every seek or assignment change; stale prefetches are dropped.
    epoch: u64,
    buffered: VecDeque<ConsumerRecord>,
    /// Whole batches for [`Consumer::poll_batches`] (the records are not materialised).
    buffered_batches: VecDeque<ConsumedBatch>,
    /// What the fetch being processed is turned into.
    delivery: Delivery,
    last_auto_commit: Instant,
}

impl Consumer {
    pub fn new(config: ConsumerConfig) -> Self {
        let cluster = Cluster::new(config.client.clone());
        Self {
            config,
            cluster,
            subscription: Vec::new(),
            positions: HashMap::new(),
            high_watermarks: HashMap::new(),
            membership: None,
            in_flight: FuturesUnordered::new(),
            fetching_brokers: HashSet::new(),
            fetching_partitions: HashSet::new(),
            epoch: 0,
            buffered: VecDeque::new(),
            buffered_batches: VecDeque::new(),
            delivery: Delivery::Records,
            last_auto_commit: Instant::now(),
        }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Consumes exactly these partitions (no group membership; commits still use `group_id`).
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        self.subscription.clear();
        self.set_assignment(
            partitions
                .iter()
                .map(|(t, p)| (Arc::from(t.as_str()), *p))
                .collect(),
        );
    }

    /// Joins the consumer group and consumes the partitions it assigns.
    pub fn subscribe(&mut self, topics: &[String]) -> Result<()> {
        if self.config.group_id.is_none() {
            return Err(ClientError::InvalidArgument(
                "subscribe needs a group id".into(),
            ));
        }
        self.subscription = topics.to_vec();
        self.membership = None;
        self.set_assignment(Vec::new());
        Ok(())
    }

    fn set_assignment(&mut self, tps: Vec<(Arc<str>, i32)>) {
        self.positions = tps.into_iter().map(|tp| (tp, None)).collect();
        self.invalidate_prefetch();
    }

    fn invalidate_prefetch(&mut self) {
        self.epoch += 1;
        self.buffered.clear();
        self.buffered_batches.clear();
        self.abort_fetches();
    }

    /// Drops every Fetch in flight (their responses are never looked at).
    fn abort_fetches(&mut self) {
        for handle in self.in_flight.iter() {
            handle.abort();
        }
        self.in_flight = FuturesUnordered::new();
        self.fetching_brokers.clear();
        self.fetching_partitions.clear();
    }

    /// Partitions currently assigned.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self
            .positions
            .keys()
            .map(|(t, p)| (t.to_string(), *p))
            .collect();
        v.sort();
        v
    }

    /// The next offset to be returned for a partition, if known.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.positions
            .iter()
            .find(|((t, p), _)| &**t == topic && *p == partition)
            .and_then(|(_, o)| *o)
    }

    /// The last high watermark seen for a partition.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.high_watermarks
            .iter()
            .find(|((t, p), _)| &**t == topic && *p == partition)
            .map(|(_, o)| *o)
    }

    /// Continues from `offset` on a partition.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) -> Result<()> {
        let key = self
            .positions
            .keys()
            .find(|(t, p)| &**t == topic && *p == partition)
            .cloned();
        let Some(key) = key else {
            return Err(ClientError::InvalidArgument(format!(
                "{topic}-{partition} is not assigned"
            )));
        };
        self.positions.insert(key, Some(offset));
        self.invalidate_prefetch();
        Ok(())
    }

    /// Seeks every assigned partition to the first offset with timestamp >= `timestamp_ms`
    /// (or the end when there is none).
    pub async fn seek_to_timestamp(&mut self, timestamp_ms: i64) -> Result<()> {
        self.seek_all(timestamp_ms).await
    }

    pub async fn seek_to_beginning(&mut self) -> Result<()> {
        self.seek_all(EARLIEST_TIMESTAMP).await
    }

    pub async fn seek_to_end(&mut self) -> Result<()> {
        self.seek_all(LATEST_TIMESTAMP).await
    }

    async fn seek_all(&mut self, ts: i64) -> Result<()> {
        self.ensure_membership().await?;
        let query: Vec<(TopicPartition, i64)> = self
            .positions
            .keys()
            .map(|(t, p)| ((t.to_string(), *p), ts))
            .collect();
        let found = offsets::list_offsets(&self.cluster, &query).await?;
        let ends = if ts >= 0 {
            let q: Vec<(TopicPartition, i64)> = query
                .iter()
                .map(|(tp, _)| (tp.clone(), LATEST_TIMESTAMP))
                .collect();
            offsets::list_offsets(&self.cluster, &q).await?
        } else {
            HashMap::new()
        };
        for (tp, pos) in self.positions.iter_mut() {
            let k = (tp.0.to_string(), tp.1);
            let o = found
                .get(&k)
                .map(|o| o.offset)
                .filter(|o| *o >= 0)
                .or_else(|| ends.get(&k).map(|o| o.offset));
            *pos = o;
        }
        self.invalidate_prefetch();
        Ok(())
    }

    async fn ensure_membership(&mut self) -> Result<()> {
        if self.subscription.is_empty() {
            return Ok(());
        }
        let needs_join = match &self.membership {
            None => true,
            Some(m) => m.rejoin_needed.load(Ordering::Acquire),
        };
        if !needs_join {
            return Ok(());
        }
        let old = self.membership.take();
        if let Some(old) = &old
            && self.config.enable_auto_commit
        {
            // Commit what we consumed before giving partitions away.
            if let Err(e) = self.commit_with(old).await {
                debug!(error = %e, "commit before rejoin failed");
            }
        }
        let member_id = old
            .as_ref()
            .map(|m| m.member_id.clone())
            .unwrap_or_default();
        drop(old);
        let group_config = GroupConfig {
            group_id: self.config.group_id.clone().unwrap_or_default(),
            session_timeout_ms: self.config.session_timeout_ms,
            rebalance_timeout_ms: self.config.rebalance_timeout_ms,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignors: self.config.assignors.clone(),
        };
        let m = group::join(&self.cluster, &group_config, &self.subscription, member_id).await?;
        let tps: Vec<(Arc<str>, i32)> = m
            .assignment
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (Arc::from(t.as_str()), *p)))
            .collect();
        self.membership = Some(m);
        self.set_assignment(tps);
        Ok(())
    }

    /// Looks up the start position of partitions that have none: committed offset, else the
    /// reset policy.
    async fn resolve_positions(&mut self) -> Result<()> {
        let missing: Vec<TopicPartition> = self
            .positions
            .iter()
            .filter(|(_, o)| o.is_none())
            .map(|((t, p), _)| (t.to_string(), *p))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut committed = HashMap::new();
        if let Some(g) = &self.config.group_id {
            let coord = match &self.membership {
                Some(m) => m.coordinator.clone(),
                None => group::find_coordinator(&self.cluster, g).await?.1,
            };
            committed = offsets::fetch_committed(&coord, g, Some(&missing)).await?;
        }
        let mut need_reset = Vec::new();
        for tp in &missing {
            match committed.get(tp) {
                Some(c) => self.set_position(tp, c.offset),
                None => need_reset.push(tp.clone()),
            }
        }
        if !need_reset.is_empty() {
            let ts = match self.config.auto_offset_reset {
                OffsetReset::Earliest => EARLIEST_TIMESTAMP,
                OffsetReset::Latest => LATEST_TIMESTAMP,
                OffsetReset::None => {
                    return Err(ClientError::InvalidArgument(format!(
                        "no committed offset for {} and offset reset is none",
                        need_reset
                            .iter()
                            .map(|(topic, partition)| format!("{topic}-{partition}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            };
            let q: Vec<(TopicPartition, i64)> = need_reset.into_iter().map(|tp| (tp, ts)).collect();
            for (tp, o) in offsets::list_offsets(&self.cluster, &q).await? {
                self.set_position(&tp, o.offset);
            }
        }
        Ok(())
    }

    fn set_position(&mut self, tp: &TopicPartition, offset: i64) {
        if let Some((_, pos)) = self
            .positions
            .iter_mut()
            .find(|((t, p), _)| **t == *tp.0 && *p == tp.1)
        {
            *pos = Some(offset);
        }
    }

    /// Returns the next records, waiting up to `timeout` for some to arrive (empty on timeout).
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        self.delivery = Delivery::Records;
        self.poll_inner(timeout).await?;
        let mut out: Vec<ConsumerRecord> = self.buffered.drain(..).collect();
        // Batches left by an earlier `poll_batches` are handed out as records.
        for b in std::mem::take(&mut self.buffered_batches) {
            out.extend(b.records()?);
        }
        // Pipelining: every record is handed out, so the next Fetches run while the caller
        // handles these.
        self.start_fetches();
        Ok(out)
    }

    fn has_buffered(&self) -> bool {
        !self.buffered.is_empty() || !self.buffered_batches.is_empty()
    }

    /// Fetches until something is buffered or `timeout` passes.
    async fn poll_inner(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.ensure_membership().await?;
            self.maybe_auto_commit().await;
            if self.has_buffered() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if self.positions.is_empty() {
                if left.is_zero() {
                    return Ok(());
                }
                tokio::time::sleep(left.min(Duration::from_millis(100))).await;
                continue;
            }
            self.resolve_positions().await?;
            if let Err(e) = self.refresh_leaders().await {
                if !e.is_retriable() {
                    return Err(e);
                }
                debug!(error = %e, "leader lookup failed, retrying");
                self.cluster.invalidate_metadata();
                let backoff = Duration::from_millis(self.config.client.retry_backoff_ms);
                tokio::time::sleep(backoff.min(left)).await;
                if Instant::now() >= deadline {
                    return Ok(());
                }
                continue;
            }
            self.start_fetches();
            if self.in_flight.is_empty() {
                // No partition has a known leader yet.
                if left.is_zero() {
                    return Ok(());
                }
                let backoff = Duration::from_millis(self.config.client.retry_backoff_ms);
                tokio::time::sleep(backoff.min(left)).await;
                continue;
            }
            let done = match tokio::time::timeout(left, self.in_flight.next()).await {
                Err(_) => return Ok(()),
                Ok(None) => continue,
                Ok(Some(done)) => done,
            };
            self.finish_fetch(done)?;
            // Other brokers' responses that are already here are delivered with it (at most one
            // per broker: each has one Fetch in flight).
            while let Some(Some(done)) = self.in_flight.next().now_or_never() {
                self.finish_fetch(done)?;
            }
            if self.has_buffered() || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    /// Makes sure the metadata of the topics of partitions about to be fetched is fresh (a
    /// NOT_LEADER or fenced-epoch answer invalidates it) and names a leader for each partition.
    async fn refresh_leaders(&self) -> Result<()> {
        let mut topics: Vec<&Arc<str>> = self
            .positions
            .iter()
            .filter(|(tp, o)| o.is_some() && !self.fetching_partitions.contains(*tp))
            .map(|((t, _), _)| t)
            .collect();
        topics.sort();
        topics.dedup();
        for t in topics {
            self.cluster.topic(t, false).await?;
        }
        Ok(())
    }

    /// Sends a Fetch to each leader that has none in flight, for its partitions that have a
    /// position and are not in a Fetch already. Only called with no records buffered (they
    /// were all handed out), so no partition has data waiting to be returned.
    fn start_fetches(&mut self) {
        debug_assert!(!self.has_buffered());
        let metadata = self.cluster.metadata();
        let mut by_leader: HashMap<i32, Vec<Wanted>> = HashMap::new();
        for (tp, o) in &self.positions {
            let Some(o) = *o else { continue };
            if self.fetching_partitions.contains(tp) {
                continue;
            }
            // Without a known leader the partition waits for `refresh_leaders`.
            let Some(leader) = metadata.leader(&tp.0, tp.1) else {
                continue;
            };
            if self.fetching_brokers.contains(&leader) {
                continue;
            }
            by_leader.entry(leader).or_default().push((tp.clone(), o));
        }
        for (leader, parts) in by_leader {
            let tps: Vec<(Arc<str>, i32)> = parts.iter().map(|(tp, _)| tp.clone()).collect();
            self.fetching_brokers.insert(leader);
            self.fetching_partitions.extend(tps.iter().cloned());
            let cluster = self.cluster.clone();
            let cfg = self.config.clone();
            let epoch = self.epoch;
            self.in_flight.push(tokio::spawn(async move {
                let result = fetch_from(&cluster, &cfg, leader, parts).await;
                if let Err(e) = &result
                    && e.is_retriable()
                {
                    // Back off this broker only; the others keep fetching.
                    tokio::time::sleep(Duration::from_millis(cfg.client.retry_backoff_ms)).await;
                }
                BrokerFetch {
                    leader,
                    epoch,
                    tps,
                    result,
                }
            }));
        }
    }

    /// Takes one broker's Fetch result: its partitions may be fetched again, and its records
    /// are buffered unless a seek or assignment change made it stale.
    fn finish_fetch(
        &mut self,
        done: std::result::Result<BrokerFetch, tokio::task::JoinError>,
    ) -> Result<()> {
        let done = match done {
            Ok(d) => d,
            Err(e) => {
                // Which broker is unknown: start every Fetch afresh.
                warn!(error = %e, "fetch task failed");
                self.abort_fetches();
                return Ok(());
            }
        };
        self.fetching_brokers.remove(&done.leader);
        for tp in &done.tps {
            self.fetching_partitions.remove(tp);
        }
        if done.epoch != self.epoch {
            return Ok(());
        }
        match done.result {
            Ok(fetched) => self.process_fetch(fetched),
            Err(e) if e.is_retriable() => {
                debug!(error = %e, broker = done.leader, "fetch failed, retrying");
                self.cluster.invalidate_metadata();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn process_fetch(&mut self, fetched: Vec<PartitionFetch>) -> Result<()> {
        let mut refresh = false;
        for pf in fetched {
            let Some(Some(pos)) = self.positions.get(&pf.tp).copied() else {
                continue;
            };
            if pos != pf.fetch_offset {
                continue;
            }
            match pf.error_code.err() {
                None => {}
                Some(ResponseError::OffsetOutOfRange) => {
                    warn!(topic = %pf.tp.0, partition = pf.tp.1, offset = pos, "offset out of range, resetting");
                    self.positions.insert(pf.tp.clone(), None);
                    continue;
                }
                Some(_) => {
                    let e =
                        ClientError::kafka(pf.error_code, format!("fetch {}-{}", pf.tp.0, pf.tp.1));
                    if !e.is_retriable() {
                        return Err(e);
                    }
                    refresh = true;
                    continue;
                }
            }
            self.high_watermarks
                .insert(pf.tp.clone(), pf.high_watermark);
            let mut next = pos;
            for batch in split_batches(pf.records)? {
                if batch.header.last_offset() < next {
                    continue;
                }
                if self.config.check_crcs {
                    batch.verify_crc()?;
                }
                if self.delivery == Delivery::Batches {
                    let last = batch.header.last_offset();
                    if let Some(b) = ConsumedBatch::new(&pf.tp, batch, next)? {
                        self.buffered_batches.push_back(b);
                    }
                    next = last + 1;
                    continue;
                }
                if !batch.header.is_control() {
                    for r in batch.records()? {
                        let r = r?;
                        if r.offset < next {
                            continue;
                        }
                        self.buffered.push_back(ConsumerRecord {
                            topic: pf.tp.0.clone(),
                            partition: pf.tp.1,
                            offset: r.offset,
                            timestamp_ms: r.timestamp_ms,
                            key: r.key,
                            value: r.value,
                            headers: r.headers,
                        });
                    }
                }
                next = batch.header.last_offset() + 1;
            }
            self.positions.insert(pf.tp, Some(next));
        }
        if refresh {
            self.cluster.invalidate_metadata();
        }
        Ok(())
    }

    async fn maybe_auto_commit(&mut self) {
        if !self.config.enable_auto_commit || self.config.group_id.is_none() {
            return;
        }
        if self.last_auto_commit.elapsed()
            < Duration::from_millis(self.config.auto_commit_interval_ms)
        {
            return;
        }
        self.last_auto_commit = Instant::now();
        if let Err(e) = self.commit().await {
            debug!(error = %e, "auto-commit failed");
        }
    }

    /// Offsets that `commit` would store: the next offset to consume per partition. Records
    /// already returned by `poll` count as consumed; prefetched ones do not.
    pub fn consumed_offsets(&self) -> HashMap<TopicPartition, CommittedOffset> {
        let mut first_buffered: HashMap<(Arc<str>, i32), i64> = HashMap::new();
        for r in &self.buffered {
            first_buffered
                .entry((r.topic.clone(), r.partition))
                .or_insert(r.offset);
        }
        for b in &self.buffered_batches {
            first_buffered
                .entry((b.topic.clone(), b.partition))
                .or_insert(b.first_offset);
        }
        self.positions
            .iter()
            .filter_map(|(tp, o)| {
                let o = first_buffered.get(tp).copied().or(*o)?;
                Some((
                    (tp.0.to_string(), tp.1),
                    CommittedOffset {
                        offset: o,
                        metadata: None,
                    },
                ))
            })
            .collect()
    }

    /// Commits the consumed positions of all assigned partitions.
    pub async fn commit(&mut self) -> Result<()> {
        let offsets = self.consumed_offsets();
        self.commit_offsets(&offsets).await
    }

    async fn commit_with(&self, m: &Membership) -> Result<()> {
        let offsets = self.consumed_offsets();
        if offsets.is_empty() {
            return Ok(());
        }
        offsets::commit(
            &m.coordinator,
            &m.group_id,
            m.generation_id,
            &m.member_id,
            &offsets,
        )
        .await
    }

    /// Commits explicit offsets (the next offset to consume, as Kafka stores them).
    pub async fn commit_offsets(
        &mut self,
        offsets: &HashMap<TopicPartition, CommittedOffset>,
    ) -> Result<()> {
        let Some(g) = self.config.group_id.clone() else {
            return Err(ClientError::InvalidArgument(
                "commit needs a group id".into(),
            ));
        };
        if offsets.is_empty() {
            return Ok(());
        }
        match &self.membership {
            Some(m) => {
                offsets::commit(&m.coordinator, &g, m.generation_id, &m.member_id, offsets).await
            }
            None => {
                let (_, coord) = group::find_coordinator(&self.cluster, &g).await?;
                offsets::commit(&coord, &g, -1, "", offsets).await
            }
        }
    }

    /// Commits (if auto-commit is on) and leaves the group.
    pub async fn close(mut self) -> Result<()> {
        self.abort_fetches();
        if self.config.enable_auto_commit && self.config.group_id.is_some() {
            let _ = self.commit().await;
        }
        if let Some(m) = self.membership.take() {
            let _ = group::leave(&m).await;
        }
        Ok(())
    }
}

/// What fetched data is turned into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    Records,
    Batches,
}

/// A partition to fetch and the offset to fetch from.
type Wanted = ((Arc<str>, i32), i64);

/// Fetches `parts` from their leader `leader` (one Fetch request).
async fn fetch_from(
    cluster: &Arc<Cluster>,
    cfg: &ConsumerConfig,
    leader: i32,
    parts: Vec<Wanted>,
) -> Result<Vec<PartitionFetch>> {
    let conn = cluster.broker(leader).await?;
    let version = conn.version_for::<FetchRequest>(FETCH_MAX_VERSION)?;
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((t, p), off) in &parts {
        let fp = FetchPartition::default()
            .with_partition(*p)
            .with_fetch_offset(*off)
            .with_current_leader_epoch(-1)
            .with_last_fetched_epoch(-1)
            .with_log_start_offset(-1)
            .with_partition_max_bytes(cfg.max_partition_fetch_bytes);
        match topics.iter_mut().find(|ft| ft.topic.0.as_str() == &**t) {
            Some(ft) => ft.partitions.push(fp),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                    .with_partitions(vec![fp]),
            ),
        }
    }
    let req = FetchRequest::default()
        .with_max_wait_ms(cfg.fetch_max_wait_ms)
        .with_min_bytes(cfg.fetch_min_bytes)
        .with_max_bytes(cfg.fetch_max_bytes)
        .with_isolation_level(cfg.isolation_level)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    let r = conn.send(&req, version).await?;
    ClientError::check(r.error_code, || "Fetch".into())?;
    let offsets: HashMap<(&str, i32), i64> =
        parts.iter().map(|((t, p), o)| ((&**t, *p), *o)).collect();
    let mut out = Vec::new();
    for t in r.responses {
        let name = t.topic.0.as_str();
        let Some(((arc, _), _)) = parts.iter().find(|((n, _), _)| &**n == name) else {
            continue;
        };
        for p in t.partitions {
            let Some(&fetch_offset) = offsets.get(&(name, p.partition_index)) else {
                continue;
            };
            out.push(PartitionFetch {
                tp: (arc.clone(), p.partition_index),
                fetch_offset,
                error_code: p.error_code,
                high_watermark: p.high_watermark,
                records: p.records.unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

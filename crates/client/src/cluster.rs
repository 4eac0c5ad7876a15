//! Bootstrap, the metadata cache and one pooled connection per broker.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Mutex as AsyncMutex;
use tracing::debug;

use crate::conn::{Connection, ConnectionConfig};
use crate::error::{ClientError, Result};
use kafka_protocol::ResponseError;
use kafka_protocol::error::ParseResponseErrorCode;

/// Highest Metadata version this client speaks (v10+ carries topic ids).
const METADATA_MAX_VERSION: i16 = 12;
/// Attempts (with backoff) when waiting for a topic's leaders to appear.
pub const MAX_METADATA_ATTEMPTS: u32 = 20;
/// Metadata requests that may answer UNKNOWN_TOPIC_OR_PARTITION for a topic before it is
/// reported unknown (without auto-creation): metadata propagation between brokers, bounded
/// (0.6 s at the default backoff).
const UNKNOWN_TOPIC_ATTEMPTS: u32 = 3;

/// Settings shared by producer, consumer and admin.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` list to bootstrap from.
    pub bootstrap: Vec<String>,
    pub connection: ConnectionConfig,
    /// Backoff between retries of a failed request.
    pub retry_backoff_ms: u64,
    /// Metadata older than this is refreshed before use.
    pub metadata_max_age_ms: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap: vec!["localhost:9092".into()],
            connection: ConnectionConfig::default(),
            retry_backoff_ms: 100,
            metadata_max_age_ms: 300_000,
        }
    }
}

impl ClientConfig {
    /// A config bootstrapping from a comma-separated `host:port` list.
    pub fn new(bootstrap: &str) -> Self {
        Self {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline: Vec<i32>,
    pub error_code: i16,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TopicInfo {
    pub name: String,
    #[serde(skip)]
    pub topic_id: [u8; 16],
    pub is_internal: bool,
    pub error_code: i16,
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    pub fn partition_count(&self) -> i32 {
        self.partitions.len() as i32
    }
    pub fn topic_id_string(&self) -> String {
        uuid_string(&self.topic_id)
    }
}

/// Formats a 16-byte id the way Kafka prints topic ids (URL-safe base64, no padding).
pub fn uuid_string(id: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for &b in id {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 0x3f) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 0x3f) as usize] as char);
    }
    out
}

/// A snapshot of cluster metadata.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: HashMap<i32, BrokerInfo>,
    pub topics: HashMap<String, TopicInfo>,
}

impl Metadata {
    fn from_response(r: MetadataResponse) -> Self {
        let brokers = r
            .brokers
            .into_iter()
            .map(|b| {
                let info = BrokerInfo {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.map(|r| r.to_string()),
                };
                (info.node_id, info)
            })
            .collect();
        let topics = r
            .topics
            .into_iter()
            .filter_map(|t| {
                let name = t.name?.0.to_string();
                let mut partitions: Vec<PartitionInfo> = t
                    .partitions
                    .into_iter()
                    .map(|p| PartitionInfo {
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                        offline: p.offline_replicas.iter().map(|b| b.0).collect(),
                        error_code: p.error_code,
                    })
                    .collect();
                partitions.sort_by_key(|p| p.partition);
                Some((
                    name.clone(),
                    TopicInfo {
                        name,
                        topic_id: *t.topic_id.as_bytes(),
                        is_internal: t.is_internal,
                        error_code: t.error_code,
                        partitions,
                    },
                ))
            })
            .collect();
        Metadata {
            cluster_id: r.cluster_id.map(|s| s.to_string()),
            controller_id: r.controller_id.0,
            brokers,
            topics,
        }
    }

    /// The leader of a partition, if known and available.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let t = self.topics.get(topic)?;
        let p = t.partitions.get(usize::try_from(partition).ok()?)?;
        (p.partition == partition && p.leader >= 0).then_some(p.leader)
    }
}

/// A pooled connection slot; the async mutex serialises (re)connecting.
type ConnSlot = Arc<AsyncMutex<Option<Arc<Connection>>>>;

/// Shared cluster state: bootstrap list, metadata cache, connection pool.
#[derive(Debug)]
pub struct Cluster {
    config: ClientConfig,
    metadata: RwLock<(Arc<Metadata>, Option<Instant>)>,
    /// One connection per broker address; the async mutex serialises connecting.
    conns: Mutex<HashMap<String, ConnSlot>>,
}

impl Cluster {
    pub fn new(config: ClientConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            metadata: RwLock::new((Arc::new(Metadata::default()), None)),
            conns: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The current metadata snapshot (possibly empty).
    pub fn metadata(&self) -> Arc<Metadata> {
        self.metadata.read().0.clone()
    }

    fn metadata_is_fresh(&self) -> bool {
        let g = self.metadata.read();
        g.1.is_some_and(|t| t.elapsed() < Duration::from_millis(self.config.metadata_max_age_ms))
    }

    /// A connection to `addr`, reusing a live one.
    pub async fn connection_to(&self, addr: &str) -> Result<Arc<Connection>> {
        let slot = self
            .conns
            .lock()
            .entry(addr.to_string())
            .or_default()
            .clone();
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let c = Arc::new(Connection::connect(addr, self.config.connection.clone()).await?);
        *guard = Some(c.clone());
        Ok(c)
    }

    /// A connection to broker `node_id` (from metadata).
    pub async fn broker(&self, node_id: i32) -> Result<Arc<Connection>> {
        let addr = match self.metadata().brokers.get(&node_id) {
            Some(b) => b.addr(),
            None => {
                self.refresh_metadata(&[]).await?;
                self.metadata()
                    .brokers
                    .get(&node_id)
                    .map(BrokerInfo::addr)
                    .ok_or_else(|| ClientError::Protocol(format!("unknown broker id {node_id}")))?
            }
        };
        self.connection_to(&addr).await
    }

    /// Any reachable broker: known brokers first, then the bootstrap list.
    pub async fn any_broker(&self) -> Result<Arc<Connection>> {
        let mut addrs: Vec<String> = self
            .metadata()
            .brokers
            .values()
            .map(BrokerInfo::addr)
            .collect();
        addrs.sort();
        addrs.extend(self.config.bootstrap.iter().cloned());
        let mut last_err = None;
        for addr in &addrs {
            match self.connection_to(addr).await {
                Ok(c) => return Ok(c),
                Err(e) => {
                    debug!(addr, error = %e, "broker unreachable");
                    last_err = Some(e);
                }
            }
        }
        Err(match last_err {
            Some(e) if addrs.len() == 1 => e,
            _ => ClientError::NoBrokers(addrs.join(",")),
        })
    }

    /// Fetches metadata for `topics` (all topics when empty) and merges it into the cache.
    pub async fn refresh_metadata(&self, topics: &[String]) -> Result<Arc<Metadata>> {
        self.fetch_metadata(topics, false).await
    }

    /// Like [`Self::refresh_metadata`], asking the broker to auto-create missing topics.
    pub async fn fetch_metadata(
        &self,
        topics: &[String],
        allow_auto_create: bool,
    ) -> Result<Arc<Metadata>> {
        let conn = self.any_broker().await?;
        let version = conn.version_for::<MetadataRequest>(METADATA_MAX_VERSION)?;
        let req = MetadataRequest::default()
            .with_topics(if topics.is_empty() && version >= 1 {
                None
            } else {
                Some(
                    topics
                        .iter()
                        .map(|t| {
                            MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                        })
                        .collect(),
                )
            })
            .with_allow_auto_topic_creation(allow_auto_create && version >= 4);
        let resp = conn.send(&req, version).await?;
        let fresh = Metadata::from_response(resp);
        let mut g = self.metadata.write();
        let merged = if topics.is_empty() {
            fresh
        } else {
            let mut m = (*g.0).clone();
            m.cluster_id = fresh.cluster_id;
            m.controller_id = fresh.controller_id;
            m.brokers = fresh.brokers;
            m.topics.extend(fresh.topics);
            m
        };
        let merged = Arc::new(merged);
        *g = (merged.clone(), Some(Instant::now()));
        Ok(merged)
    }

    /// Metadata for one topic whose partitions all have leaders, refreshing (and optionally
    /// auto-creating) with backoff until they do.
    pub async fn topic(&self, topic: &str, allow_auto_create: bool) -> Result<TopicInfo> {
        if self.metadata_is_fresh()
            && let Some(t) = self.metadata().topics.get(topic)
            && t.error_code == 0
            && !t.partitions.is_empty()
            && t.partitions.iter().all(|p| p.leader >= 0)
        {
            return Ok(t.clone());
        }
        let topics = [topic.to_string()];
        let mut last_code = ResponseError::UnknownTopicOrPartition.code();
        for attempt in 0..MAX_METADATA_ATTEMPTS {
            let m = self.fetch_metadata(&topics, allow_auto_create).await?;
            if let Some(t) = m.topics.get(topic) {
                if t.error_code == 0
                    && !t.partitions.is_empty()
                    && t.partitions.iter().all(|p| p.leader >= 0)
                {
                    return Ok(t.clone());
                }
                last_code = t.error_code;
                // An unknown topic is asked about again a few times even without
                // auto-creation: in a cluster the broker asked may not have applied a topic
                // another broker just created (Kafka's producer waits up to max.block.ms).
                let unknown = t.error_code == ResponseError::UnknownTopicOrPartition.code();
                let retriable = matches!(
                    t.error_code.err(),
                    None | Some(ResponseError::LeaderNotAvailable)
                ) || (unknown
                    && (allow_auto_create || attempt < UNKNOWN_TOPIC_ATTEMPTS));
                if !retriable {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(
                self.config.retry_backoff_ms * u64::from(attempt + 1).min(10),
            ))
            .await;
        }
        if last_code == ResponseError::UnknownTopicOrPartition.code() {
            return Err(ClientError::UnknownTopicOrPartition(topic.to_string()));
        }
        Err(ClientError::kafka(
            last_code,
            format!("metadata for topic {topic}"),
        ))
    }

    /// Marks metadata stale so the next lookup refreshes it.
    pub fn invalidate_metadata(&self) {
        self.metadata.write().1 = None;
    }

    /// The connection to the leader of a partition.
    pub async fn leader_connection(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i32, Arc<Connection>)> {
        let leader = match self.metadata().leader(topic, partition) {
            Some(l) => l,
            None => {
                let t = self.topic(topic, false).await?;
                t.partitions
                    .get(usize::try_from(partition).unwrap_or(usize::MAX))
                    .map(|p| p.leader)
                    .filter(|l| *l >= 0)
                    .ok_or_else(|| {
                        ClientError::UnknownTopicOrPartition(format!("{topic}-{partition}"))
                    })?
            }
        };
        Ok((leader, self.broker(leader).await?))
    }
}

/// `BrokerId` from a plain id.
pub fn broker_id(id: i32) -> BrokerId {
    BrokerId(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_like_kafka() {
        assert_eq!(uuid_string(&[0u8; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(uuid_string(&[0xffu8; 16]).len(), 22);
    }

    #[test]
    fn bootstrap_list_is_split() {
        let c = ClientConfig::new("a:1, b:2,,");
        assert_eq!(c.bootstrap, vec!["a:1", "b:2"]);
    }
}

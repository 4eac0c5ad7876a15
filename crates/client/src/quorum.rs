//! DescribeCluster v2 (every registered broker, fenced ones too: KIP-1073) and DescribeQuorum
//! (the metadata quorum's leader, epoch and voters), for `streamforge cluster`.
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{DescribeClusterRequest, DescribeQuorumRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::admin::Admin;
use crate::error::{ClientError, Result};

const DESCRIBE_CLUSTER_MAX_VERSION: i16 = 2;
const DESCRIBE_QUORUM_MAX_VERSION: i16 = 2;
const METADATA_TOPIC: &str = "__cluster_metadata";

/// A registered broker and whether the controller has fenced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// The metadata quorum as the answering broker knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumInfo {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumVoter>,
    pub observers: Vec<QuorumVoter>,
}

/// A quorum member; `log_end_offset` is -1 when the answering node does not know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumVoter {
    pub replica_id: i32,
    pub log_end_offset: i64,
    /// The leader's high watermark minus this member's log end, when both are known.
    pub lag: Option<i64>,
    pub last_caught_up_timestamp: i64,
}

impl Admin {
    /// Every broker the cluster has registered. Brokers without DescribeCluster v2 do not say
    /// which are fenced: they list the live ones only (`fenced` false).
    pub async fn describe_brokers(&self) -> Result<Vec<ClusterBroker>> {
        let conn = self.cluster().any_broker().await?;
        let version = conn.version_for::<DescribeClusterRequest>(DESCRIBE_CLUSTER_MAX_VERSION)?;
        let req = DescribeClusterRequest::default().with_include_fenced_brokers(version >= 2);
        let r = conn.send(&req, version).await?;
        ClientError::check(r.error_code, || "describe cluster".to_string())?;
        let mut brokers: Vec<ClusterBroker> = r
            .brokers
            .into_iter()
            .map(|b| ClusterBroker {
                node_id: b.broker_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.map(|r| r.to_string()),
                fenced: b.is_fenced,
            })
            .collect();
        brokers.sort_by_key(|b| b.node_id);
        Ok(brokers)
    }

    /// The metadata quorum (`__cluster_metadata-0`), as `kafka-metadata-quorum describe` shows it,
    /// asked of the active controller (the quorum leader knows every voter's lag).
    pub async fn describe_quorum(&self) -> Result<QuorumInfo> {
        let conn = self.controller().await?;
        let version = conn.version_for::<DescribeQuorumRequest>(DESCRIBE_QUORUM_MAX_VERSION)?;
        let req = DescribeQuorumRequest::default().with_topics(vec![
            TopicData::default()
                .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
        ]);
        let r = conn.send(&req, version).await?;
        ClientError::check(r.error_code, || "describe quorum".to_string())?;
        let p = r
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == 0)
            .ok_or_else(|| {
                ClientError::kafka(
                    kafka_protocol::ResponseError::UnknownTopicOrPartition.code(),
                    "describe quorum: no __cluster_metadata-0",
                )
            })?;
        ClientError::check(p.error_code, || "describe quorum".to_string())?;
        let hw = p.high_watermark;
        let member =
            |s: kafka_protocol::messages::describe_quorum_response::ReplicaState| QuorumVoter {
                replica_id: s.replica_id.0,
                log_end_offset: s.log_end_offset,
                lag: (s.log_end_offset >= 0 && hw >= 0).then(|| (hw - s.log_end_offset).max(0)),
                last_caught_up_timestamp: s.last_caught_up_timestamp,
            };
        Ok(QuorumInfo {
            leader_id: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            high_watermark: hw,
            voters: p.current_voters.into_iter().map(member).collect(),
            observers: p.observers.into_iter().map(member).collect(),
        })
    }
}

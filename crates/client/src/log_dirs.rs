//! DescribeLogDirs (35): the on-disk size of partitions, asked of each partition's leader.
use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::DescribeLogDirsRequest;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::protocol::StrBytes;

use crate::admin::Admin;
use crate::cluster::TopicInfo;
use crate::error::{ClientError, Result};
use crate::offsets::TopicPartition;

const DESCRIBE_LOG_DIRS_MAX_VERSION: i16 = 4;

impl Admin {
    /// Bytes of each online partition of `topics` in its leader's log dirs (summed over the
    /// dirs, as `rpk topic describe -p` shows). A partition the leader does not report is absent.
    pub async fn partition_sizes(
        &self,
        topics: &[TopicInfo],
    ) -> Result<HashMap<TopicPartition, i64>> {
        // leader -> topic -> partitions: one request per leader.
        let mut by_leader: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
        for t in topics {
            for p in t
                .partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.leader >= 0)
            {
                by_leader
                    .entry(p.leader)
                    .or_default()
                    .entry(&t.name)
                    .or_default()
                    .push(p.partition);
            }
        }
        let mut sizes = HashMap::new();
        for (leader, asked) in by_leader {
            let conn = self.cluster().broker(leader).await?;
            let version =
                conn.version_for::<DescribeLogDirsRequest>(DESCRIBE_LOG_DIRS_MAX_VERSION)?;
            let req = DescribeLogDirsRequest::default().with_topics(Some(
                asked
                    .into_iter()
                    .map(|(name, partitions)| {
                        DescribableLogDirTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(name.to_string())))
                            .with_partitions(partitions)
                    })
                    .collect(),
            ));
            let r = conn.send(&req, version).await?;
            ClientError::check(r.error_code, || {
                format!("describe log dirs of broker {leader}")
            })?;
            // A dir with an error (offline) reports no partitions; the others are summed.
            for dir in r.results.into_iter().filter(|d| d.error_code == 0) {
                for t in dir.topics {
                    for p in t.partitions.into_iter().filter(|p| !p.is_future_key) {
                        *sizes
                            .entry((t.name.0.to_string(), p.partition_index))
                            .or_insert(0) += p.partition_size;
                    }
                }
            }
        }
        Ok(sizes)
    }
}

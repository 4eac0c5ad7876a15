//! DescribeLogDirs (35): the broker's one log directory (the data dir) with the local size of
//! every partition asked for, as `kafka-log-dirs --describe` and `Admin.describeLogDirs` read it.

use std::path::Path;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::RequestFrame;

use crate::BrokerState;
use crate::replica_manager::Topic;
use crate::router::HandlerResult;
use crate::security::acl::{Access, Operation};

/// Kafka's `DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES`: the disk size could not be read.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

pub async fn handle_describe_log_dirs(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeLogDirsRequest = req.decode()?;
    if !Access::of(&state, &req).cluster(Operation::Describe) {
        // Kafka: CLUSTER_AUTHORIZATION_FAILED and no directories.
        let mut resp = DescribeLogDirsResponse::default();
        resp.error_code = streamforge_protocol::ResponseError::ClusterAuthorizationFailed.code();
        return Ok(Some(req.respond(&resp)?));
    }
    let data_dir = state.replicas.data_dir();
    let topics: Vec<DescribeLogDirsTopic> = match &request.topics {
        // null asks for every partition on the broker.
        None => state
            .replicas
            .topics()
            .iter()
            .filter_map(|t| describe_topic(t, None))
            .collect(),
        // Kafka answers only the partitions it hosts: an unknown topic or partition is absent.
        Some(asked) => asked
            .iter()
            .filter_map(|a| {
                let topic = state.replicas.topic(a.topic.as_str())?;
                describe_topic(&topic, Some(&a.partitions))
            })
            .collect(),
    };
    let (total_bytes, usable_bytes) = volume_bytes(data_dir);
    let mut dir = DescribeLogDirsResult::default();
    dir.error_code = 0;
    dir.log_dir = StrBytes::from_string(absolute(data_dir));
    dir.topics = topics;
    dir.total_bytes = total_bytes;
    dir.usable_bytes = usable_bytes;
    let mut resp = DescribeLogDirsResponse::default();
    resp.error_code = 0;
    resp.results = vec![dir];
    Ok(Some(req.respond(&resp)?))
}

/// One topic's partitions (all, or those in `only`) with their local log size; `None` when
/// none of them is here. A partition whose log is offline is left out, as Kafka leaves out
/// partitions of an offline log dir.
fn describe_topic(topic: &Topic, only: Option<&[i32]>) -> Option<DescribeLogDirsTopic> {
    let partitions: Vec<DescribeLogDirsPartition> = topic
        .hosted()
        .filter(|p| only.is_none_or(|o| o.contains(&p.index)))
        .filter_map(|p| {
            let size = p.size_bytes().ok()?;
            let mut out = DescribeLogDirsPartition::default();
            out.partition_index = p.index;
            out.partition_size = i64::try_from(size).unwrap_or(i64::MAX);
            out.offset_lag = 0; // no future replica moves between log dirs
            out.is_future_key = false;
            Some(out)
        })
        .collect();
    if partitions.is_empty() {
        return None;
    }
    let mut t = DescribeLogDirsTopic::default();
    t.name = crate::handlers::topic_name(&topic.name);
    t.partitions = partitions;
    Some(t)
}

/// The volume's total and usable bytes (Kafka's `getTotalSpace` / `getUsableSpace`).
fn volume_bytes(dir: &Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(s) => (
            i64::try_from(s.f_blocks.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX),
            i64::try_from(s.f_bavail.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX),
        ),
        Err(_) => (UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES),
    }
}

/// The log dir as Kafka names it: an absolute path.
fn absolute(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

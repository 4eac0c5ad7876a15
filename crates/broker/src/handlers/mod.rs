//! Request handlers, one module per API family. Each `handle*` function decodes its request,
//! calls the state owners and encodes the response; routing lives in `crate::router`.

pub mod acls;
pub mod admin;
pub mod api_versions;
pub mod broker_configs;
pub mod client_quotas;
pub mod cluster;
pub mod configs;
mod coordinator_lookup;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod fetch_session;
pub mod group_protocol;
pub mod groups;
mod groups_acl;
pub mod groups_admin;
pub mod log_dirs;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod produce_txn;
pub mod producer;
pub mod reassign;
pub mod scram_users;
pub mod txn;
pub mod txn_admin;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// A `TopicName` from a `&str`.
pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// An optional error message.
pub(crate) fn message(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

//! Topic, partition and message-browser endpoints, and the create/delete actions.

use std::collections::HashMap;

use axum::Json;
use axum::extract::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Serialize;

use crate::auth::{Action, Caller, Operation, Resource};
use crate::facade::{
    BatchInfo, ConfigEntry, CreateTopic, Message, MessageQuery, PartitionInfo, ReadStart, TopicInfo,
};
use crate::payload::{self, Payload, PayloadFormat};
use crate::routes::{ApiError, ApiResult, AppState};

/// Most messages one browse request returns.
pub const MESSAGES_LIMIT_MAX: usize = 500;
pub const MESSAGES_LIMIT_DEFAULT: usize = 50;
/// Kafka's limits for topic names and partition counts we accept from the UI.
pub const TOPIC_NAME_LEN_MAX: usize = 249;
pub const PARTITIONS_MAX: i32 = 10_000;

#[derive(Serialize)]
pub struct TopicJson {
    #[serde(flatten)]
    pub topic: TopicInfo,
    pub partition_count: usize,
    /// Messages currently retained: the sum of high watermark minus log start offset.
    pub messages: i64,
    pub size_bytes: u64,
    pub remote_size_bytes: Option<u64>,
}

impl From<TopicInfo> for TopicJson {
    fn from(topic: TopicInfo) -> TopicJson {
        let messages = topic
            .partitions
            .iter()
            .map(|p| (p.high_watermark - p.log_start_offset).max(0))
            .sum();
        let size_bytes = topic.partitions.iter().map(|p| p.size_bytes).sum();
        let remote: Vec<u64> = topic
            .partitions
            .iter()
            .filter_map(|p| p.remote_size_bytes)
            .collect();
        let remote_size_bytes = (!remote.is_empty()).then(|| remote.iter().sum());
        TopicJson {
            partition_count: topic.partitions.len(),
            messages,
            size_bytes,
            remote_size_bytes,
            topic,
        }
    }
}

/// Only the topics the caller may Describe (as Kafka's Metadata lists them).
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Vec<TopicJson>>> {
    let mut topics = state.view.topics().await?;
    topics.retain(|t| {
        caller.allows(&Action::new(
            Operation::Describe,
            Resource::Topic(t.name.clone()),
        ))
    });
    topics.sort_by(|a, b| (a.internal, &a.name).cmp(&(b.internal, &b.name)));
    Ok(Json(topics.into_iter().map(TopicJson::from).collect()))
}

#[derive(Serialize)]
pub struct TopicDetailJson {
    #[serde(flatten)]
    pub topic: TopicJson,
    pub configs: Vec<ConfigEntry>,
}

pub async fn detail(
    State(state): State<AppState>,
    Path(topic): Path<String>,
) -> ApiResult<Json<TopicDetailJson>> {
    let detail = state.view.topic(topic).await?;
    Ok(Json(TopicDetailJson {
        topic: detail.topic.into(),
        configs: detail.configs,
    }))
}

#[derive(Serialize)]
pub struct PartitionJson {
    pub topic: String,
    #[serde(flatten)]
    pub partition: PartitionInfo,
    pub messages: i64,
}

pub async fn partition(
    State(state): State<AppState>,
    Path((topic, partition)): Path<(String, String)>,
) -> ApiResult<Json<PartitionJson>> {
    let index = parse_partition(&partition)?;
    let info = find_partition(&state, &topic, index).await?;
    Ok(Json(PartitionJson {
        messages: (info.high_watermark - info.log_start_offset).max(0),
        topic,
        partition: info,
    }))
}

async fn find_partition(state: &AppState, topic: &str, partition: i32) -> ApiResult<PartitionInfo> {
    let detail = state.view.topic(topic.to_string()).await?;
    detail
        .topic
        .partitions
        .into_iter()
        .find(|p| p.partition == partition)
        .ok_or_else(|| ApiError::not_found(format!("topic '{topic}' has no partition {partition}")))
}

fn parse_partition(raw: &str) -> ApiResult<i32> {
    raw.parse::<i32>().ok().filter(|p| *p >= 0).ok_or_else(|| {
        ApiError::bad_request(format!(
            "partition must be a non-negative integer, got '{raw}'"
        ))
    })
}

#[derive(Serialize)]
pub struct MessageJson {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Payload>,
    pub value: Option<Payload>,
    pub headers: Vec<HeaderJson>,
    pub batch: BatchInfo,
}

#[derive(Serialize)]
pub struct HeaderJson {
    pub key: String,
    pub value: Option<Payload>,
}

#[derive(Serialize)]
pub struct MessagesJson {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub next_offset: i64,
    pub messages: Vec<MessageJson>,
}

pub(crate) fn message_json(m: Message, format: PayloadFormat) -> MessageJson {
    MessageJson {
        offset: m.offset,
        timestamp_ms: m.timestamp_ms,
        key: m.key.as_deref().map(|k| payload::render(k, format)),
        value: m.value.as_deref().map(|v| payload::render(v, format)),
        headers: m
            .headers
            .into_iter()
            .map(|(key, value)| HeaderJson {
                key,
                value: value.as_deref().map(|v| payload::render(v, format)),
            })
            .collect(),
        batch: m.batch,
    }
}

/// `GET .../messages?offset=N | timestamp=MS | from=earliest|latest, &limit=N, &format=auto|text|hex`
pub async fn messages(
    State(state): State<AppState>,
    Path((topic, partition)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<MessagesJson>> {
    const KNOWN: &[&str] = &["offset", "timestamp", "from", "limit", "format"];
    if let Some(unknown) = params.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown parameter '{unknown}' (known: offset, timestamp, from, limit, format)"
        )));
    }
    let partition = parse_partition(&partition)?;
    let limit = match params.get("limit") {
        None => MESSAGES_LIMIT_DEFAULT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=MESSAGES_LIMIT_MAX).contains(l))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be an integer from 1 to {MESSAGES_LIMIT_MAX}, got '{raw}'"
                ))
            })?,
    };
    let format = PayloadFormat::parse(params.get("format").map_or("auto", String::as_str))
        .map_err(ApiError::bad_request)?;
    let given: Vec<&str> = ["offset", "timestamp", "from"]
        .into_iter()
        .filter(|k| params.contains_key(*k))
        .collect();
    if given.len() > 1 {
        return Err(ApiError::bad_request(format!(
            "give only one of offset, timestamp or from (got {})",
            given.join(", ")
        )));
    }
    let start = if let Some(raw) = params.get("offset") {
        let offset = raw.parse::<i64>().ok().filter(|o| *o >= 0).ok_or_else(|| {
            ApiError::bad_request(format!(
                "offset must be a non-negative integer, got '{raw}'"
            ))
        })?;
        ReadStart::Offset(offset)
    } else if let Some(raw) = params.get("timestamp") {
        let ts = raw.parse::<i64>().ok().filter(|t| *t >= 0).ok_or_else(|| {
            ApiError::bad_request(format!(
                "timestamp must be milliseconds since the epoch, got '{raw}'"
            ))
        })?;
        ReadStart::Timestamp(ts)
    } else {
        match params.get("from").map_or("earliest", String::as_str) {
            "earliest" => ReadStart::Offset(0),
            "latest" => {
                let info = find_partition(&state, &topic, partition).await?;
                ReadStart::Offset((info.high_watermark - limit as i64).max(info.log_start_offset))
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "from must be earliest or latest, got '{other}'"
                )));
            }
        }
    };
    let page = state
        .view
        .read_messages(MessageQuery {
            topic: topic.clone(),
            partition,
            start,
            limit,
        })
        .await?;
    Ok(Json(MessagesJson {
        topic,
        partition,
        log_start_offset: page.log_start_offset,
        high_watermark: page.high_watermark,
        next_offset: page.next_offset,
        messages: page
            .messages
            .into_iter()
            .take(limit)
            .map(|m| message_json(m, format))
            .collect(),
    }))
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name must not be empty".to_string());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be '{name}'"));
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return Err(format!(
            "topic name is longer than {TOPIC_NAME_LEN_MAX} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name '{name}' contains '{c}'; use only letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<CreateTopic>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let Json(request) = body
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))?;
    validate_topic_name(&request.name).map_err(ApiError::bad_request)?;
    caller.check(Action::new(
        Operation::Create,
        Resource::Topic(request.name.clone()),
    ))?;
    if !(1..=PARTITIONS_MAX).contains(&request.partitions) {
        return Err(ApiError::bad_request(format!(
            "partitions must be from 1 to {PARTITIONS_MAX}, got {}",
            request.partitions
        )));
    }
    if request.replication_factor < 1 {
        return Err(ApiError::bad_request(format!(
            "replication_factor must be at least 1, got {}",
            request.replication_factor
        )));
    }
    let name = request.name.clone();
    tracing::info!(topic = %name, partitions = request.partitions, "creating topic from the dashboard");
    state.view.create_topic(request).await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "created": name })),
    ))
}

/// `DELETE /api/topics/{topic}?confirm={topic}`: the name must be repeated, so a stray request
/// (or a slip in the UI) cannot delete data.
pub async fn delete(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    match params.get("confirm") {
        Some(confirm) if *confirm == topic => {}
        Some(confirm) => {
            return Err(ApiError::bad_request(format!(
                "confirm must repeat the topic name '{topic}', got '{confirm}'"
            )));
        }
        None => {
            return Err(ApiError::bad_request(format!(
                "deleting needs ?confirm={topic} (the topic name again)"
            )));
        }
    }
    tracing::info!(topic = %topic, "deleting topic from the dashboard");
    state.view.delete_topic(topic.clone()).await?;
    Ok(Json(serde_json::json!({ "deleted": topic })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").unwrap_err().contains("' '"));
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }
}

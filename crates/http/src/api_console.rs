//! The console's topic actions (edit configs, add partitions, delete records, produce), a
//! topic's consumers with their lag, and the broker page.

use axum::Json;
use axum::extract::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::auth::{Action, Caller, Operation, Resource};
use crate::console::{BrokerDetail, ConfigChange, ProduceMessage, Produced};
use crate::lag::partition_lag;
use crate::routes::{ApiError, ApiResult, AppState};

/// Largest key, value or header value the produce form accepts (Kafka's default
/// `max.message.bytes` is about 1 MiB; the broker still checks the topic's own limit).
pub const PRODUCE_FIELD_BYTES_MAX: usize = 1024 * 1024;
/// Most headers on one produced message.
pub const PRODUCE_HEADERS_MAX: usize = 64;
/// Most config changes in one request (Kafka has about 40 topic configs).
pub const CONFIG_CHANGES_MAX: usize = 100;

fn body<T>(body: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    body.map(|Json(b)| b)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))
}

pub(crate) fn parse_partition(raw: &str) -> ApiResult<i32> {
    raw.parse::<i32>().ok().filter(|p| *p >= 0).ok_or_else(|| {
        ApiError::bad_request(format!(
            "partition must be a non-negative integer, got '{raw}'"
        ))
    })
}

#[derive(Deserialize)]
pub struct ConfigsBody {
    configs: Vec<ConfigChange>,
}

/// `PATCH /api/topics/{t}/configs` `{"configs": [{"name", "value": "..." | null}]}`.
pub async fn alter_configs(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    request: Result<Json<ConfigsBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let request = body(request)?;
    if request.configs.is_empty() || request.configs.len() > CONFIG_CHANGES_MAX {
        return Err(ApiError::bad_request(format!(
            "configs must list 1 to {CONFIG_CHANGES_MAX} changes, got {}",
            request.configs.len()
        )));
    }
    tracing::info!(topic = %topic, changes = request.configs.len(), "altering topic configs from the dashboard");
    state
        .view
        .alter_topic_configs(topic.clone(), request.configs)
        .await?;
    Ok(Json(serde_json::json!({ "altered": topic })))
}

#[derive(Deserialize)]
pub struct PartitionsBody {
    /// The new total number of partitions.
    count: i32,
}

/// `POST /api/topics/{t}/partitions` `{"count": N}`.
pub async fn create_partitions(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    request: Result<Json<PartitionsBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let request = body(request)?;
    tracing::info!(topic = %topic, count = request.count, "adding partitions from the dashboard");
    state
        .view
        .create_partitions(topic.clone(), request.count)
        .await?;
    Ok(Json(
        serde_json::json!({ "topic": topic, "partitions": request.count }),
    ))
}

#[derive(Deserialize)]
pub struct DeleteRecordsBody {
    /// Records below this offset are deleted; -1 means up to the high watermark (Kafka's rule).
    before_offset: i64,
}

/// `POST /api/topics/{t}/partitions/{p}/delete-records` `{"before_offset": N}`.
pub async fn delete_records(
    State(state): State<AppState>,
    Path((topic, partition)): Path<(String, String)>,
    request: Result<Json<DeleteRecordsBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let partition = parse_partition(&partition)?;
    let request = body(request)?;
    tracing::info!(topic = %topic, partition, before = request.before_offset, "deleting records from the dashboard");
    let low = state
        .view
        .delete_records(topic.clone(), partition, request.before_offset)
        .await?;
    Ok(Json(
        serde_json::json!({ "topic": topic, "partition": partition, "low_watermark": low }),
    ))
}

#[derive(Deserialize)]
pub struct HeaderBody {
    key: String,
    value: Option<String>,
}

#[derive(Deserialize)]
pub struct ProduceBody {
    partition: Option<i32>,
    key: Option<String>,
    value: Option<String>,
    #[serde(default)]
    headers: Vec<HeaderBody>,
}

fn field(name: &str, value: Option<String>) -> ApiResult<Option<Bytes>> {
    match value {
        Some(v) if v.len() > PRODUCE_FIELD_BYTES_MAX => Err(ApiError::bad_request(format!(
            "{name} is {} bytes; at most {PRODUCE_FIELD_BYTES_MAX} bytes",
            v.len()
        ))),
        v => Ok(v.map(Bytes::from)),
    }
}

/// `POST /api/topics/{t}/messages` `{"partition"?, "key"?, "value"?, "headers"?: [{key, value}]}`
/// (text, UTF-8) -> 201 `{"partition", "offset", "timestamp_ms"}`.
pub async fn produce(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    request: Result<Json<ProduceBody>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Produced>)> {
    let request = body(request)?;
    if request.headers.len() > PRODUCE_HEADERS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {PRODUCE_HEADERS_MAX} headers, got {}",
            request.headers.len()
        )));
    }
    if let Some(p) = request.partition
        && p < 0
    {
        return Err(ApiError::bad_request(format!(
            "partition must be a non-negative integer, got {p}"
        )));
    }
    let mut headers = Vec::with_capacity(request.headers.len());
    for h in request.headers {
        if h.key.is_empty() {
            return Err(ApiError::bad_request("a header key must not be empty"));
        }
        headers.push((h.key, field("a header value", h.value)?));
    }
    let message = ProduceMessage {
        topic,
        partition: request.partition,
        key: field("key", request.key)?,
        value: field("value", request.value)?,
        headers,
    };
    let produced = state.view.produce(message).await?;
    Ok((StatusCode::CREATED, Json(produced)))
}

#[derive(Serialize)]
pub struct TopicConsumerJson {
    pub group_id: String,
    pub state: String,
    pub member_count: usize,
    /// Sum of the known per-partition lags on this topic.
    pub lag: i64,
    pub partitions: Vec<ConsumerPartitionJson>,
}

#[derive(Serialize)]
pub struct ConsumerPartitionJson {
    pub partition: i32,
    pub committed_offset: i64,
    pub high_watermark: Option<i64>,
    pub lag: Option<i64>,
}

/// `GET /api/topics/{t}/consumers`: every group with committed offsets on the topic.
/// The groups on one topic (Describe on the topic, checked by the route), only those the
/// caller may Describe.
pub async fn topic_consumers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(topic): Path<String>,
) -> ApiResult<Json<Vec<TopicConsumerJson>>> {
    state.view.topic(topic.clone()).await?;
    let mut out = Vec::new();
    for g in state.view.groups().await? {
        let group = Resource::Group(g.group_id.clone());
        if !caller.allows(&Action::new(Operation::Describe, group)) {
            continue;
        }
        let mut partitions: Vec<ConsumerPartitionJson> = g
            .offsets
            .iter()
            .filter(|o| o.topic == topic)
            .map(|o| ConsumerPartitionJson {
                partition: o.partition,
                committed_offset: o.committed_offset,
                high_watermark: o.high_watermark,
                lag: partition_lag(o),
            })
            .collect();
        let consumes = g
            .members
            .iter()
            .any(|m| m.assignment.iter().any(|a| a.topic == topic));
        if partitions.is_empty() && !consumes {
            continue;
        }
        partitions.sort_by_key(|p| p.partition);
        out.push(TopicConsumerJson {
            lag: partitions.iter().filter_map(|p| p.lag).sum(),
            group_id: g.group_id,
            state: g.state,
            member_count: g.members.len(),
            partitions,
        });
    }
    out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Ok(Json(out))
}

#[derive(Serialize)]
pub struct BrokerJson {
    #[serde(flatten)]
    pub broker: BrokerDetail,
    pub uptime_ms: i64,
}

/// `GET /api/broker`: this broker's version, data directory, disk use, uptime and configs.
pub async fn broker(State(state): State<AppState>) -> ApiResult<Json<BrokerJson>> {
    let broker = state.view.broker_detail().await?;
    Ok(Json(BrokerJson {
        uptime_ms: (crate::now_ms() - broker.started_at_ms).max(0),
        broker,
    }))
}

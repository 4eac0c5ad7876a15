//! The console's group actions (reset offsets, delete offsets, delete the group) and the
//! group's lag history.

use std::collections::HashMap;

use axum::Json;
use axum::extract::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use crate::auth::{Action, Caller, Operation, Resource};
use crate::console::{OffsetReset, OffsetTarget, ResetOffset};
use crate::lag_history::{LAG_HISTORY_POINTS_MAX, LAG_SAMPLE_INTERVAL, LagPoint};
use crate::routes::{ApiError, ApiResult, AppState};

/// Most partitions named in one offsets request.
pub const GROUP_PARTITIONS_MAX: usize = 10_000;

#[derive(Deserialize)]
pub struct ResetBody {
    topic: String,
    /// Empty or missing: every partition of the topic.
    #[serde(default)]
    partitions: Vec<i32>,
    #[serde(flatten)]
    target: OffsetTarget,
}

fn check_partitions(partitions: &[i32]) -> ApiResult<()> {
    if partitions.len() > GROUP_PARTITIONS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {GROUP_PARTITIONS_MAX} partitions, got {}",
            partitions.len()
        )));
    }
    if let Some(p) = partitions.iter().find(|p| **p < 0) {
        return Err(ApiError::bad_request(format!(
            "partitions must be non-negative, got {p}"
        )));
    }
    Ok(())
}

#[derive(Serialize)]
pub struct ResetJson {
    group: String,
    offsets: Vec<ResetOffset>,
}

/// `POST /api/groups/{g}/reset-offsets`
/// `{"topic", "partitions"?: [..], "to": "earliest"|"latest"|"offset"|"timestamp", "value"?: N}`.
/// Read on the group (checked by the route) and on the topic, as OffsetCommit asks.
pub async fn reset_offsets(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(group): Path<String>,
    body: Result<Json<ResetBody>, JsonRejection>,
) -> ApiResult<Json<ResetJson>> {
    let Json(body) = body
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))?;
    caller.check(Action::new(
        Operation::Read,
        Resource::Topic(body.topic.clone()),
    ))?;
    check_partitions(&body.partitions)?;
    match body.target {
        OffsetTarget::Offset(o) if o < 0 => {
            return Err(ApiError::bad_request(format!(
                "offset must be non-negative, got {o}"
            )));
        }
        OffsetTarget::Timestamp(t) if t < 0 => {
            return Err(ApiError::bad_request(format!(
                "timestamp must be milliseconds since the epoch, got {t}"
            )));
        }
        _ => {}
    }
    tracing::info!(group = %group, topic = %body.topic, target = ?body.target, "resetting offsets from the dashboard");
    let offsets = state
        .view
        .reset_offsets(OffsetReset {
            group: group.clone(),
            topic: body.topic,
            partitions: body.partitions,
            target: body.target,
        })
        .await?;
    Ok(Json(ResetJson { group, offsets }))
}

#[derive(Deserialize)]
pub struct DeleteOffsetsBody {
    topic: String,
    #[serde(default)]
    partitions: Vec<i32>,
}

/// `DELETE /api/groups/{g}/offsets` `{"topic", "partitions"?: [..]}`.
/// Delete on the group (checked by the route) and Read on the topic, as OffsetDelete asks.
pub async fn delete_offsets(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(group): Path<String>,
    body: Result<Json<DeleteOffsetsBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Json(body) = body
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))?;
    caller.check(Action::new(
        Operation::Read,
        Resource::Topic(body.topic.clone()),
    ))?;
    check_partitions(&body.partitions)?;
    tracing::info!(group = %group, topic = %body.topic, "deleting group offsets from the dashboard");
    state
        .view
        .delete_group_offsets(group.clone(), body.topic.clone(), body.partitions)
        .await?;
    Ok(Json(
        serde_json::json!({ "group": group, "deleted_offsets_of": body.topic }),
    ))
}

/// `DELETE /api/groups/{g}?confirm={g}`.
pub async fn delete_group(
    State(state): State<AppState>,
    Path(group): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    if params.get("confirm") != Some(&group) {
        return Err(ApiError::bad_request(format!(
            "deleting needs ?confirm={group} (the group id again)"
        )));
    }
    tracing::info!(group = %group, "deleting group from the dashboard");
    state.view.delete_group(group.clone()).await?;
    Ok(Json(serde_json::json!({ "deleted": group })))
}

#[derive(Serialize)]
pub struct LagHistoryJson {
    group: String,
    interval_ms: u64,
    points_max: usize,
    points: Vec<LagPoint>,
}

/// `GET /api/groups/{g}/lag-history`: the broker's record of the group's lag (last hour).
pub async fn lag_history(
    State(state): State<AppState>,
    Path(group): Path<String>,
) -> Json<LagHistoryJson> {
    Json(LagHistoryJson {
        points: state.lag_history.points(&group),
        group,
        interval_ms: LAG_SAMPLE_INTERVAL.as_millis() as u64,
        points_max: LAG_HISTORY_POINTS_MAX,
    })
}

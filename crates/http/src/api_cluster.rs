//! Cluster, groups, live numbers, benchmarks and `/metrics`.

use std::convert::Infallible;

use axum::Json;
use axum::extract::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Serialize;

use crate::auth::{Action, Caller, Operation, Resource};
use crate::bench::{BenchRequest, BenchRun};
use crate::facade::{ClusterInfo, GroupInfo, GroupOffset};
use crate::lag::partition_lag;
use crate::live::LiveSnapshot;
use crate::routes::{ApiError, ApiResult, AppState};
use crate::{now_ms, prom_text};

#[derive(Serialize)]
pub struct ClusterJson {
    #[serde(flatten)]
    pub cluster: ClusterInfo,
    pub uptime_ms: i64,
    pub topic_count: usize,
    pub partition_count: usize,
    pub group_count: usize,
}

pub async fn cluster(State(state): State<AppState>) -> ApiResult<Json<ClusterJson>> {
    let cluster = state.view.cluster().await?;
    let topics = state.view.topics().await?;
    let groups = state.view.groups().await?;
    Ok(Json(ClusterJson {
        uptime_ms: (now_ms() - cluster.started_at_ms).max(0),
        topic_count: topics.len(),
        partition_count: topics.iter().map(|t| t.partitions.len()).sum(),
        group_count: groups.len(),
        cluster,
    }))
}

#[derive(Serialize)]
pub struct GroupOffsetJson {
    #[serde(flatten)]
    pub offset: GroupOffset,
    pub lag: Option<i64>,
}

#[derive(Serialize)]
pub struct GroupJson {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub generation: i32,
    pub coordinator: i32,
    pub member_count: usize,
    pub members: Vec<crate::facade::GroupMember>,
    /// Sum of the per-partition lags that are known.
    pub total_lag: i64,
    pub offsets: Vec<GroupOffsetJson>,
}

impl From<GroupInfo> for GroupJson {
    fn from(g: GroupInfo) -> GroupJson {
        let mut offsets: Vec<GroupOffsetJson> = g
            .offsets
            .into_iter()
            .map(|o| GroupOffsetJson {
                lag: partition_lag(&o),
                offset: o,
            })
            .collect();
        offsets.sort_by(|a, b| {
            (&a.offset.topic, a.offset.partition).cmp(&(&b.offset.topic, b.offset.partition))
        });
        GroupJson {
            total_lag: offsets.iter().filter_map(|o| o.lag).sum(),
            member_count: g.members.len(),
            group_id: g.group_id,
            state: g.state,
            protocol_type: g.protocol_type,
            protocol: g.protocol,
            generation: g.generation,
            coordinator: g.coordinator,
            members: g.members,
            offsets,
        }
    }
}

/// Only the groups the caller may Describe (as Kafka's ListGroups lists them).
pub async fn groups(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Vec<GroupJson>>> {
    let mut groups: Vec<GroupJson> = state
        .view
        .groups()
        .await?
        .into_iter()
        .filter(|g| {
            caller.allows(&Action::new(
                Operation::Describe,
                Resource::Group(g.group_id.clone()),
            ))
        })
        .map(GroupJson::from)
        .collect();
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Ok(Json(groups))
}

pub async fn group(
    State(state): State<AppState>,
    Path(group): Path<String>,
) -> ApiResult<Json<GroupJson>> {
    Ok(Json(state.view.group(group).await?.into()))
}

#[derive(Serialize)]
pub struct LiveJson {
    pub interval_ms: u64,
    pub latest: Option<LiveSnapshot>,
    pub history: Vec<LiveSnapshot>,
}

/// The latest snapshot plus the recent history (what a page draws before the stream starts).
pub async fn live(State(state): State<AppState>) -> Json<LiveJson> {
    Json(LiveJson {
        interval_ms: crate::live::LIVE_INTERVAL.as_millis() as u64,
        latest: state.live.latest().map(|s| (*s).clone()),
        history: state.live.history().iter().map(|s| (**s).clone()).collect(),
    })
}

/// Server-sent events: one `live` event a second with a [`LiveSnapshot`].
pub async fn live_stream(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = state.live.subscribe();
    let mut shutdown = state.shutdown.clone();
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(snapshot) => {
                    let data =
                        serde_json::to_string(&*snapshot).unwrap_or_else(|_| "{}".to_string());
                    return Some((Ok(Event::default().event("live").data(data)), receiver));
                }
                // A slow subscriber skips ahead to the newest numbers.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let stream = futures::StreamExt::take_until(stream, stopped);
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Serialize)]
pub struct BenchListJson {
    /// False when the broker has no benchmark runner (the page says so).
    pub available: bool,
    pub runs: Vec<BenchRun>,
}

pub async fn bench_list(State(state): State<AppState>) -> Json<BenchListJson> {
    Json(BenchListJson {
        available: state.bench.available(),
        runs: state.bench.runs(),
    })
}

pub async fn bench_start(
    State(state): State<AppState>,
    body: Result<Json<BenchRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let Json(request) = body
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))?;
    let params = request.validate().map_err(ApiError::bad_request)?;
    let id = state.bench.start(state.view.clone(), params)?;
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id }))))
}

pub async fn bench_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<BenchRun>> {
    let id = id.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "benchmark id must be a positive integer, got '{id}'"
        ))
    })?;
    state
        .bench
        .run(id)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no benchmark with id {id}")))
}

/// Prometheus text format: the recorder's counters and histograms, then the families read from
/// the cluster view at scrape time, then process metrics.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut out = state.metrics.prometheus.render();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    let cluster = state.view.cluster().await;
    match state.view.topics().await {
        Ok(topics) => {
            prom_text::render_topics(&mut out, &topics);
            crate::prom_replication::render_replication(&mut out, cluster.as_ref().ok(), &topics);
            if let Ok(cluster) = &cluster {
                prom_text::render_cluster(&mut out, cluster, &topics);
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: could not list topics"),
    }
    match state.view.groups().await {
        Ok(groups) => prom_text::render_groups(&mut out, &groups),
        Err(e) => tracing::warn!(error = %e, "metrics: could not list groups"),
    }
    let started_at_ms = cluster.map(|c| c.started_at_ms).unwrap_or_default();
    prom_text::render_process(&mut out, started_at_ms);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

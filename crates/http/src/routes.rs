//! The router: which path is served by which handler, the shared state, and API errors.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::bench::BenchHub;
use crate::facade::{ClusterView, ViewError};
use crate::live::LiveSampler;
use crate::metrics_tap::MetricsHub;
use crate::{api_cluster, api_topics, ui};

/// Everything a handler may need.
#[derive(Clone)]
pub struct AppState {
    pub view: Arc<dyn ClusterView>,
    pub metrics: Arc<MetricsHub>,
    pub live: Arc<LiveSampler>,
    pub bench: Arc<BenchHub>,
    /// Turns `true` at shutdown: open SSE streams end at once instead of holding it up.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// An error answer: a status and a message the operator can act on, as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<ViewError> for ApiError {
    fn from(e: ViewError) -> ApiError {
        let status = match &e {
            ViewError::NotFound(_) => StatusCode::NOT_FOUND,
            ViewError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            ViewError::Conflict(_) => StatusCode::CONFLICT,
            ViewError::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
            ViewError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ViewError::Forbidden(_) => StatusCode::FORBIDDEN,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "dashboard request failed");
        }
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/cluster", get(api_cluster::cluster))
        .route("/topics", get(api_topics::list).post(api_topics::create))
        .route(
            "/topics/{topic}",
            get(api_topics::detail).delete(api_topics::delete),
        )
        .route(
            "/topics/{topic}/partitions/{partition}",
            get(api_topics::partition),
        )
        .route(
            "/topics/{topic}/partitions/{partition}/messages",
            get(api_topics::messages),
        )
        .route("/groups", get(api_cluster::groups))
        .route("/groups/{group}", get(api_cluster::group))
        .route("/live", get(api_cluster::live))
        .route("/live/stream", get(api_cluster::live_stream))
        .route(
            "/bench",
            get(api_cluster::bench_list).post(api_cluster::bench_start),
        )
        .route("/bench/{id}", get(api_cluster::bench_run))
        .fallback(api_not_found);
    Router::new()
        .nest("/api", api)
        .route("/metrics", get(api_cluster::metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/static/{*path}", get(ui::asset))
        .fallback(ui::page)
        .with_state(state)
}

async fn api_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no API endpoint at {}", uri.path()))
}

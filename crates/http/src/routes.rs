//! The router: which path is served by which handler, the shared state, and API errors.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};

use crate::bench::BenchHub;
use crate::facade::{ClusterView, ViewError};
use crate::live::LiveSampler;
use crate::metrics_tap::MetricsHub;
use crate::{api_browse, api_cluster, api_console, api_groups, api_topics, auth, transactions, ui};

/// Everything a handler may need.
#[derive(Clone)]
pub struct AppState {
    pub view: Arc<dyn ClusterView>,
    pub metrics: Arc<MetricsHub>,
    pub live: Arc<LiveSampler>,
    pub bench: Arc<BenchHub>,
    pub lag_history: Arc<crate::lag_history::LagHistory>,
    /// Login, sessions and the authorization hook.
    pub auth: Arc<crate::auth::AuthState>,
    /// Turns `true` at shutdown: open SSE streams end at once instead of holding it up.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// An error answer: a status and a message the operator can act on, as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Kafka's error for the same request (name like `INVALID_CONFIG`, and code), when the
    /// broker refused the action the way it refuses the Kafka request.
    pub kafka: Option<(String, i16)>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kafka: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kafka: None,
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
            ViewError::Kafka(error, _) => crate::kafka_error::http_status(*error),
        };
        let kafka = match &e {
            ViewError::Kafka(error, _) => Some((crate::kafka_error::name(*error), error.code())),
            _ => None,
        };
        ApiError {
            status,
            message: e.to_string(),
            kafka,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "dashboard request failed");
        }
        let body = match self.kafka {
            Some((name, code)) => serde_json::json!({
                "error": self.message, "kafka_error": name, "kafka_code": code,
            }),
            None => serde_json::json!({ "error": self.message }),
        };
        (self.status, Json(body)).into_response()
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
        .route(
            "/topics/{topic}/configs",
            axum::routing::patch(api_console::alter_configs),
        )
        .route(
            "/topics/{topic}/partitions",
            post(api_console::create_partitions),
        )
        .route(
            "/topics/{topic}/partitions/{partition}/delete-records",
            post(api_console::delete_records),
        )
        .route(
            "/topics/{topic}/messages",
            get(api_browse::search).post(api_console::produce),
        )
        .route(
            "/topics/{topic}/consumers",
            get(api_console::topic_consumers),
        )
        .route("/broker", get(api_console::broker))
        .route("/groups", get(api_cluster::groups))
        .route(
            "/groups/{group}",
            get(api_cluster::group).delete(api_groups::delete_group),
        )
        .route(
            "/groups/{group}/reset-offsets",
            post(api_groups::reset_offsets),
        )
        .route(
            "/groups/{group}/offsets",
            delete(api_groups::delete_offsets),
        )
        .route("/groups/{group}/lag-history", get(api_groups::lag_history))
        .route("/transactions", get(transactions::list))
        .route(
            "/transactions/{transactional_id}",
            get(transactions::detail),
        )
        .route(
            "/transactions/{transactional_id}/abort",
            post(transactions::abort),
        )
        .route("/live", get(api_cluster::live))
        .route("/live/stream", get(api_cluster::live_stream))
        .route(
            "/bench",
            get(api_cluster::bench_list).post(api_cluster::bench_start),
        )
        .route("/bench/{id}", get(api_cluster::bench_run))
        .route("/whoami", get(auth::whoami))
        .route_layer(axum::middleware::from_fn(auth::authorize_route))
        .fallback(api_not_found);
    Router::new()
        .nest("/api", api)
        .route("/login", get(auth::login_form).post(auth::login_submit))
        .route("/logout", post(auth::logout))
        .route("/metrics", get(api_cluster::metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/static/{*path}", get(ui::asset))
        .fallback(ui::page)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::gate,
        ))
        .with_state(state)
}

async fn api_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no API endpoint at {}", uri.path()))
}

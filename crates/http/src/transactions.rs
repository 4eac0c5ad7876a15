//! The transactions page's data and API: every transactional id the coordinator knows, with
//! its state, producer id and epoch, the partitions of its transaction, timeout and age; and
//! an abort of an open one (as its timeout would abort it).
//!
//! Authorization follows Kafka's DescribeTransactions / ListTransactions: only the ids the
//! caller may Describe are listed, and of a transaction's partitions only those of topics the
//! caller may Describe. Aborting asks Write on the transactional id (what EndTxn asks).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, Path, State};
use serde::Serialize;

use crate::auth::{Action, Caller, Operation, Resource};
use crate::facade::TopicPartitions;
use crate::routes::{ApiError, ApiResult, AppState};

/// One transactional id as the transaction coordinator holds it.
#[derive(Debug, Clone, Serialize)]
pub struct TransactionInfo {
    pub transactional_id: String,
    /// Kafka's state name: "Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
    /// "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence".
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// `transaction.timeout.ms` the producer asked for.
    pub timeout_ms: i32,
    /// When the open (or completing) transaction started, ms since the epoch; -1 when none.
    pub start_ms: i64,
    /// The last state change, ms since the epoch.
    pub last_update_ms: i64,
    /// Partitions in the transaction (`__consumer_offsets` ones for sent offsets included).
    pub partitions: Vec<TopicPartitions>,
}

impl TransactionInfo {
    /// A transaction is open until its markers are written: Ongoing or a Prepare state.
    pub fn is_open(&self) -> bool {
        matches!(
            self.state.as_str(),
            "Ongoing" | "PrepareCommit" | "PrepareAbort" | "PrepareEpochFence"
        )
    }
}

/// What the API answers for one transactional id: the view's data plus what the page shows
/// computed once, here (open or not, age, time left before the coordinator aborts it).
#[derive(Debug, Serialize)]
pub struct TransactionJson {
    #[serde(flatten)]
    pub txn: TransactionInfo,
    pub open: bool,
    /// Time since the transaction started (None when none is running).
    pub age_ms: Option<i64>,
    /// Time until the coordinator aborts an Ongoing transaction (negative: overdue).
    pub timeout_left_ms: Option<i64>,
}

impl TransactionJson {
    pub fn new(txn: TransactionInfo, now_ms: i64) -> TransactionJson {
        let open = txn.is_open();
        let age_ms = (open && txn.start_ms >= 0).then(|| now_ms.saturating_sub(txn.start_ms));
        let timeout_left_ms = (txn.state == "Ongoing")
            .then_some(age_ms)
            .flatten()
            .map(|age| i64::from(txn.timeout_ms) - age);
        TransactionJson {
            txn,
            open,
            age_ms,
            timeout_left_ms,
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Drops the partitions of topics the caller may not Describe (DescribeTransactions' rule).
fn visible(caller: &Caller, mut txn: TransactionInfo) -> TransactionInfo {
    txn.partitions.retain(|tp| {
        caller.allows(&Action::new(
            Operation::Describe,
            Resource::Topic(tp.topic.clone()),
        ))
    });
    txn
}

/// `GET /api/transactions`: the ids the caller may Describe, open ones first, then by id.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Vec<TransactionJson>>> {
    let now = now_ms();
    let mut txns: Vec<TransactionJson> = state
        .view
        .transactions()
        .await?
        .into_iter()
        .filter(|t| {
            caller.allows(&Action::new(
                Operation::Describe,
                Resource::TransactionalId(t.transactional_id.clone()),
            ))
        })
        .map(|t| TransactionJson::new(visible(&caller, t), now))
        .collect();
    txns.sort_by(|a, b| {
        (!a.open, &a.txn.transactional_id).cmp(&(!b.open, &b.txn.transactional_id))
    });
    Ok(Json(txns))
}

/// `GET /api/transactions/{transactional_id}` (Describe on the id, checked by the route).
pub async fn detail(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(transactional_id): Path<String>,
) -> ApiResult<Json<TransactionJson>> {
    let txn = state
        .view
        .transactions()
        .await?
        .into_iter()
        .find(|t| t.transactional_id == transactional_id)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "transactional id '{transactional_id}' does not exist"
            ))
        })?;
    Ok(Json(TransactionJson::new(visible(&caller, txn), now_ms())))
}

/// `POST /api/transactions/{transactional_id}/abort` with a JSON body (`{}`; the dialog asks
/// for a ticked box). Write on the id, checked by the route.
pub async fn abort(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(transactional_id): Path<String>,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> ApiResult<Json<TransactionJson>> {
    let _ = body
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {}", e.body_text())))?;
    tracing::info!(transactional_id = %transactional_id, "aborting a transaction from the dashboard");
    let txn = state.view.abort_transaction(transactional_id).await?;
    Ok(Json(TransactionJson::new(visible(&caller, txn), now_ms())))
}

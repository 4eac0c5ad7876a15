//! The message browser across every partition of a topic, with filters on key, value, header
//! and time. Bounded per request: at most [`SEARCH_SCAN_MESSAGES_MAX`] messages and
//! [`SEARCH_SCAN_BYTES_MAX`] bytes are examined and [`MESSAGES_LIMIT_MAX`] returned; the
//! answer says when the scan stopped at a bound so the UI can offer to continue.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Serialize;

use crate::api_topics::{MESSAGES_LIMIT_DEFAULT, MESSAGES_LIMIT_MAX, MessageJson, message_json};
use crate::facade::{Message, MessageQuery, ReadStart};
use crate::payload::PayloadFormat;
use crate::routes::{ApiError, ApiResult, AppState};

/// Messages examined per request, over all partitions.
pub const SEARCH_SCAN_MESSAGES_MAX: usize = 20_000;
/// Key, value and header bytes examined per request, over all partitions.
pub const SEARCH_SCAN_BYTES_MAX: usize = 64 * 1024 * 1024;
/// With `from=latest`, how far back from each partition's end the search starts.
pub const SEARCH_LATEST_WINDOW_MESSAGES: i64 = 5_000;
/// Longest filter text.
pub const SEARCH_FILTER_LEN_MAX: usize = 1024;

const KNOWN: &[&str] = &[
    "from",
    "timestamp",
    "until",
    "limit",
    "format",
    "key",
    "value",
    "header",
    "partition",
];

struct Filters {
    key: Option<String>,
    value: Option<String>,
    /// `name` or `name=value-substring`.
    header: Option<(String, Option<String>)>,
    until_ms: Option<i64>,
}

fn contains(bytes: Option<&[u8]>, needle: &str) -> bool {
    bytes.is_some_and(|b| {
        String::from_utf8_lossy(b)
            .to_lowercase()
            .contains(&needle.to_lowercase())
    })
}

impl Filters {
    fn matches(&self, m: &Message) -> bool {
        if self.until_ms.is_some_and(|u| m.timestamp_ms > u) {
            return false;
        }
        if let Some(k) = &self.key
            && !contains(m.key.as_deref(), k)
        {
            return false;
        }
        if let Some(v) = &self.value
            && !contains(m.value.as_deref(), v)
        {
            return false;
        }
        if let Some((name, value)) = &self.header {
            return m.headers.iter().any(|(k, v)| {
                k == name
                    && value
                        .as_ref()
                        .is_none_or(|want| contains(v.as_deref(), want))
            });
        }
        true
    }
}

#[derive(Serialize)]
pub struct FoundJson {
    partition: i32,
    #[serde(flatten)]
    message: MessageJson,
}

#[derive(Serialize)]
pub struct SearchJson {
    topic: String,
    messages: Vec<FoundJson>,
    scanned_messages: usize,
    scanned_bytes: usize,
    /// True when a scan bound stopped the search before every partition was read to its end.
    scan_limited: bool,
}

fn text_param(params: &HashMap<String, String>, name: &str) -> ApiResult<Option<String>> {
    match params.get(name).filter(|v| !v.is_empty()) {
        Some(v) if v.len() > SEARCH_FILTER_LEN_MAX => Err(ApiError::bad_request(format!(
            "{name} filter is longer than {SEARCH_FILTER_LEN_MAX} characters"
        ))),
        v => Ok(v.cloned()),
    }
}

fn int_param(params: &HashMap<String, String>, name: &str) -> ApiResult<Option<i64>> {
    params
        .get(name)
        .filter(|v| !v.is_empty())
        .map(|raw| {
            raw.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{name} must be a non-negative integer, got '{raw}'"
                ))
            })
        })
        .transpose()
}

struct SearchParams {
    limit: usize,
    format: PayloadFormat,
    latest: bool,
    start_ms: Option<i64>,
    partition: Option<i64>,
    filters: Filters,
}

fn parse(params: &HashMap<String, String>) -> ApiResult<SearchParams> {
    if let Some(unknown) = params.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown parameter '{unknown}' (known: {})",
            KNOWN.join(", ")
        )));
    }
    let limit = match int_param(params, "limit")? {
        None => MESSAGES_LIMIT_DEFAULT,
        Some(l) if (1..=MESSAGES_LIMIT_MAX as i64).contains(&l) => l as usize,
        Some(l) => {
            return Err(ApiError::bad_request(format!(
                "limit must be an integer from 1 to {MESSAGES_LIMIT_MAX}, got {l}"
            )));
        }
    };
    let format = PayloadFormat::parse(params.get("format").map_or("auto", String::as_str))
        .map_err(ApiError::bad_request)?;
    let latest = match params.get("from").map_or("earliest", String::as_str) {
        "earliest" => false,
        "latest" => true,
        other => {
            return Err(ApiError::bad_request(format!(
                "from must be earliest or latest, got '{other}'"
            )));
        }
    };
    let header = text_param(params, "header")?.map(|h| match h.split_once('=') {
        Some((k, v)) => (k.to_string(), Some(v.to_string())),
        None => (h, None),
    });
    Ok(SearchParams {
        limit,
        format,
        latest,
        start_ms: int_param(params, "timestamp")?,
        partition: int_param(params, "partition")?,
        filters: Filters {
            key: text_param(params, "key")?,
            value: text_param(params, "value")?,
            header,
            until_ms: int_param(params, "until")?,
        },
    })
}

/// `GET /api/topics/{t}/messages?from=earliest|latest | timestamp=MS, until=MS, key=, value=,
/// header=name[=value], partition=N, limit=1..500, format=auto|text|hex`.
pub async fn search(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<SearchJson>> {
    let q = parse(&params)?;
    let detail = state.view.topic(topic.clone()).await?;
    let mut scan = Scan::default();
    let mut found: Vec<(i32, Message)> = Vec::new();
    for p in detail.topic.partitions {
        if q.partition.is_some_and(|o| o != i64::from(p.partition)) {
            continue;
        }
        let start = match q.start_ms {
            Some(ts) => ReadStart::Timestamp(ts),
            // "latest" looks at the newest part of each partition.
            None if q.latest => ReadStart::Offset(
                (p.high_watermark - SEARCH_LATEST_WINDOW_MESSAGES).max(p.log_start_offset),
            ),
            None => ReadStart::Offset(p.log_start_offset),
        };
        let query = MessageQuery {
            topic: topic.clone(),
            partition: p.partition,
            start,
            limit: MESSAGES_LIMIT_MAX,
        };
        let matched = scan
            .partition(
                &state,
                query,
                p.high_watermark,
                &q.filters,
                q.latest,
                q.limit,
            )
            .await?;
        found.extend(matched.into_iter().map(|m| (p.partition, m)));
    }
    found.sort_by_key(|(p, m)| (m.timestamp_ms, *p, m.offset));
    if q.latest && found.len() > q.limit {
        found.drain(..found.len() - q.limit);
    }
    found.truncate(q.limit);
    Ok(Json(SearchJson {
        topic,
        messages: found
            .into_iter()
            .map(|(partition, m)| FoundJson {
                partition,
                message: message_json(m, q.format),
            })
            .collect(),
        scanned_messages: scan.messages,
        scanned_bytes: scan.bytes,
        scan_limited: scan.limited,
    }))
}

#[derive(Default)]
struct Scan {
    messages: usize,
    bytes: usize,
    limited: bool,
}

impl Scan {
    /// Reads one partition from `query.start` page by page, keeping the matches (the first
    /// `limit`, or with `latest` the last `limit`), within the request's scan bounds.
    async fn partition(
        &mut self,
        state: &AppState,
        mut query: MessageQuery,
        high_watermark: i64,
        filters: &Filters,
        latest: bool,
        limit: usize,
    ) -> ApiResult<Vec<Message>> {
        let mut matched = Vec::new();
        loop {
            if self.messages >= SEARCH_SCAN_MESSAGES_MAX || self.bytes >= SEARCH_SCAN_BYTES_MAX {
                self.limited = true;
                return Ok(matched);
            }
            let page = state.view.read_messages(query.clone()).await?;
            let past_until = page
                .messages
                .last()
                .is_some_and(|m| filters.until_ms.is_some_and(|u| m.timestamp_ms > u));
            let empty = page.messages.is_empty();
            for m in page.messages {
                self.messages += 1;
                self.bytes += m.key.as_ref().map_or(0, |k| k.len())
                    + m.value.as_ref().map_or(0, |v| v.len())
                    + m.headers
                        .iter()
                        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
                        .sum::<usize>();
                if filters.matches(&m) {
                    matched.push(m);
                }
            }
            if latest && matched.len() > limit {
                matched.drain(..matched.len() - limit);
            }
            let done = empty
                || past_until
                || page.next_offset >= high_watermark.min(page.high_watermark)
                || (!latest && matched.len() >= limit);
            if done {
                matched.truncate(limit);
                return Ok(matched);
            }
            query.start = ReadStart::Offset(page.next_offset);
        }
    }
}

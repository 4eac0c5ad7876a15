//! The embedded web UI: one HTML shell for every page (the browser-side router picks the
//! view from the path), plus the scripts, styles and the vendored uPlot charting library.

use axum::extract::Path;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("../ui/index.html");

/// (path under /static/, content type, bytes)
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/app.js"),
    ),
    (
        "pages.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/pages.js"),
    ),
    (
        "bench.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/bench.js"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/console.js"),
    ),
    (
        "browse.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/browse.js"),
    ),
    (
        "broker.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/broker.js"),
    ),
    (
        "transactions.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/transactions.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../ui/favicon.svg"),
    ),
    (
        "vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.iife.min.js"),
    ),
    (
        "vendor/uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.min.css"),
    ),
    (
        "vendor/uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("../ui/vendor/uPlot.LICENSE"),
    ),
];

/// Paths the browser-side router knows; anything else is a 404.
const PAGE_PREFIXES: &[&str] = &[
    "/topics",
    "/groups",
    "/bench",
    "/messages",
    "/broker",
    "/brokers",
    "/transactions",
];

pub async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, content_type, bytes)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

pub async fn page(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    let is_page = path == "/"
        || PAGE_PREFIXES
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")));
    if method != Method::GET || !is_page {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

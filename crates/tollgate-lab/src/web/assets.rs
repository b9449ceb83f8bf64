//! The page, its scripts and its style sheet, embedded in the binary.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("assets/index.html");
const LAB_JS: &str = include_str!("assets/lab.js");
const PLATFORM_JS: &str = include_str!("assets/platform.js");
const LAB_CSS: &str = include_str!("assets/lab.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", LAB_JS)
}

pub(super) async fn platform_script() -> Response {
    asset("text/javascript; charset=utf-8", PLATFORM_JS)
}

pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", LAB_CSS)
}

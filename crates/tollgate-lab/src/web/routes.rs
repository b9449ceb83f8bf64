//! The lab's routes, and serving them until shutdown.

use std::future::IntoFuture;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};

use super::assets::{index, platform_script, script, style};
use super::fields::fields;
use super::lab::{Lab, MAX_REPLAY_BYTES};
use super::plan::expect;
use super::platform::platform;
use super::replay_upload::upload_replay;
use super::reply::json_response;
use super::stream::run;
use super::summary::summary;

impl Lab {
    /// The lab's routes.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(index))
            .route("/lab.js", get(script))
            .route("/platform.js", get(platform_script))
            .route("/lab.css", get(style))
            .route("/api/fields", get(fields))
            .route("/api/expect", get(expect))
            .route("/api/summary", get(summary))
            .route("/api/platform", get(platform))
            .route("/api/run", get(run))
            .route("/api/status", get(status))
            .route(
                "/api/replays",
                post(upload_replay).layer(DefaultBodyLimit::max(MAX_REPLAY_BYTES)),
            )
            .fallback(not_found)
            .with_state(self)
    }
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &serde_json::json!({ "error": "no such page; the lab is at /" }),
    )
}

async fn status(State(lab): State<Lab>) -> Response {
    json_response(StatusCode::OK, &lab.counters.status())
}

/// Serves the lab on `listener` until `shutdown` completes, then stops at once
/// (open streams are cut: a run is only worth something to a browser watching it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    lab: Lab,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::select! {
        served = axum::serve(listener, lab.router()).into_future() => served,
        () = shutdown => Ok(()),
    }
}

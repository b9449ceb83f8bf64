//! `GET /api/summary`: a run's totals, without streaming.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::lab::Lab;
use super::params::ParamError;
use super::query::{Pairs, parse_query_with_store};
use super::reply::{bad_request, json_response};
use crate::RunError;

pub(super) async fn summary(State(lab): State<Lab>, query: Pairs) -> Response {
    let (request, stores) = match parse_query_with_store(&lab, query) {
        Ok(parsed) => parsed,
        Err(error) => return bad_request(&error),
    };
    let outcome =
        tokio::task::spawn_blocking(move || request.scenario.run(stores.as_ref(), |_| {})).await;
    match outcome {
        Ok(Ok(report)) => json_response(StatusCode::OK, &report),
        Ok(Err(RunError::Config(error))) => bad_request(&ParamError {
            field: error.parameter().to_owned(),
            error: error.to_string(),
        }),
        Ok(Err(RunError::Store(error))) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "field": "store", "error": error }),
        ),
        Err(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "error": "the run was cancelled" }),
        ),
    }
}

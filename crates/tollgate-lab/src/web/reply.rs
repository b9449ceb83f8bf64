//! The lab's JSON answers: a body with its status, and the 400 naming a bad field.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::params::ParamError;

pub(super) fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (status, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot format the answer: {error}"),
        )
            .into_response(),
    }
}

pub(super) fn bad_request(error: &ParamError) -> Response {
    json_response(StatusCode::BAD_REQUEST, error)
}

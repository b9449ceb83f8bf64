//! `GET /api/fields`: every parameter's range and default (the platform view's too), the choices, and the stores a run may pick.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use super::lab::Lab;
use super::params::{CHOICES, FIELDS, Field, MAX_LAB_ARRIVALS};
use super::platform::{MAX_PLATFORM_ARRIVALS, PLATFORM_FIELDS};
use super::query::MAX_REMOTE_CALLS;
use super::reply::json_response;

#[derive(Serialize)]
struct FieldsAnswer {
    fields: &'static [Field],
    choices: Vec<Choice>,
    /// The platform view's fields (`/api/platform`).
    platform_fields: &'static [Field],
    /// The most requests a platform run may be offered.
    max_platform_arrivals: f64,
    max_arrivals: f64,
    /// The stores a run may choose with `store=`, the default first.
    stores: Vec<&'static str>,
    /// The most script calls a run on Redis may make.
    max_remote_calls: f64,
}

#[derive(Serialize)]
struct Choice {
    name: &'static str,
    values: &'static [&'static str],
}

pub(super) async fn fields(State(lab): State<Lab>) -> Response {
    json_response(
        StatusCode::OK,
        &FieldsAnswer {
            fields: FIELDS,
            platform_fields: PLATFORM_FIELDS,
            max_platform_arrivals: MAX_PLATFORM_ARRIVALS,
            choices: CHOICES
                .iter()
                .map(|&(name, values)| Choice { name, values })
                .collect(),
            max_arrivals: MAX_LAB_ARRIVALS,
            stores: if lab.redis.is_some() {
                vec!["redis", "memory"]
            } else {
                vec!["memory"]
            },
            max_remote_calls: MAX_REMOTE_CALLS,
        },
    )
}

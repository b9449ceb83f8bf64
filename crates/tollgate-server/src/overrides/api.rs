//! The overrides API's routes: `/v1/overrides` to set, read, list and delete overrides, and `/v1/usage` to read a descriptor's quota without spending it.
//!
//! * `PUT /v1/overrides/{domain}`: the body is one descriptor of a limits
//!   file (YAML or JSON); 200 with the override (201 when new), 400 with
//!   the loader's diagnostics, 413 over `--max-override-bytes`, 409 past
//!   `--max-overrides`, 503 when it cannot be kept.
//! * `GET /v1/overrides/{domain}?key=value&…`: the override at that path
//!   (404 if none); without a query, the domain's overrides.
//! * `GET /v1/overrides`: every override.
//! * `DELETE /v1/overrides/{domain}?key=value&…`: 204, or 404.
//! * `GET /v1/usage/{domain}?key=value&…`: the descriptor's limit, what is
//!   left and when it resets, checked with zero hits, so nothing is spent.
//!
//! Every route first asks [`Access`] who the caller is.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tollgate_core::Clock;
use tollgate_core::duration::ceil_seconds;
use tollgate_protocol::rls::model::{Descriptor, RateLimitRequest};

use super::access::Access;
use super::control::{ChangeError, Overrides};
use super::{InvalidOverride, Override, OverrideKey, OverrideRecord};

/// What the routes share.
struct ApiState<C: Clock> {
    overrides: Arc<Overrides<C>>,
    access: Access,
}

/// The overrides API's routes, answering callers `access` lets in.
pub fn routes<C: Clock + Clone + Send + Sync + 'static>(
    overrides: Arc<Overrides<C>>,
    access: Access,
) -> Router {
    let state = Arc::new(ApiState { overrides, access });
    Router::new()
        .route("/v1/overrides", get(list::<C>))
        .route(
            "/v1/overrides/{domain}",
            get(read::<C>).put(set::<C>).delete(delete::<C>),
        )
        .route("/v1/usage/{domain}", get(usage::<C>))
        .with_state(state)
}

/// An override as the API shows it.
#[derive(Debug, Serialize)]
struct OverrideView {
    id: String,
    domain: String,
    /// The path, `[key, value]` pairs (value `null` for a key alone).
    descriptor: Vec<(String, Option<String>)>,
    body: String,
}

impl From<&Override> for OverrideView {
    fn from(o: &Override) -> Self {
        OverrideView {
            id: o.key.id(),
            domain: o.key.domain.clone(),
            descriptor: o.key.path.clone(),
            body: o.record.body.clone(),
        }
    }
}

/// A plain-text answer ending in a newline.
fn text(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// A JSON answer.
fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec_pretty(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error),
    }
}

/// Why a caller is not let in: the status and the reason.
struct Refusal(u16, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0).unwrap_or(StatusCode::FORBIDDEN);
        let mut reply = text(status, self.1);
        if status == StatusCode::UNAUTHORIZED {
            reply.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        reply
    }
}

/// The caller the listener's [`Access`] let in, named for the change log.
struct Caller(String);

impl<C: Clock + Clone + Send + Sync + 'static> FromRequestParts<Arc<ApiState<C>>> for Caller {
    type Rejection = Refusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState<C>>,
    ) -> Result<Self, Refusal> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr);
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let names = parts
            .extensions
            .get::<tollgate_tls::PeerNames>()
            .and_then(tollgate_tls::PeerNames::get)
            .unwrap_or_default();
        state
            .access
            .admit(authorization, peer, names)
            .map(Caller)
            .map_err(|(status, message)| Refusal(status, message))
    }
}

/// The status of a refused change.
fn refusal(error: &ChangeError) -> Response {
    let status = match error {
        ChangeError::Invalid(InvalidOverride::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
        ChangeError::Invalid(_) => StatusCode::BAD_REQUEST,
        ChangeError::Full { .. } => StatusCode::CONFLICT,
        ChangeError::NotFound(_) => StatusCode::NOT_FOUND,
        ChangeError::Unkept(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    text(status, error)
}

async fn list<C: Clock + Clone + Send + Sync + 'static>(
    State(state): State<Arc<ApiState<C>>>,
    _caller: Caller,
) -> Response {
    let current = state.overrides.current();
    let views: Vec<OverrideView> = current.iter().map(|o| OverrideView::from(&**o)).collect();
    json(StatusCode::OK, &views)
}

async fn read<C: Clock + Clone + Send + Sync + 'static>(
    State(state): State<Arc<ApiState<C>>>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
    _caller: Caller,
) -> Response {
    let current = state.overrides.current();
    match query.filter(|q| !q.is_empty()) {
        None => {
            let views: Vec<OverrideView> = current
                .iter()
                .filter(|o| o.key.domain == domain)
                .map(|o| OverrideView::from(&**o))
                .collect();
            json(StatusCode::OK, &views)
        }
        Some(query) => {
            let key = OverrideKey::from_query(&domain, &query);
            match current.get(&key) {
                Some(found) => json(StatusCode::OK, &OverrideView::from(&**found)),
                None => text(StatusCode::NOT_FOUND, format!("no override at {key}")),
            }
        }
    }
}

async fn set<C: Clock + Clone + Send + Sync + 'static>(
    State(state): State<Arc<ApiState<C>>>,
    Path(domain): Path<String>,
    Caller(who): Caller,
    body: Bytes,
) -> Response {
    let Ok(body) = String::from_utf8(body.to_vec()) else {
        return text(StatusCode::BAD_REQUEST, "the override is not UTF-8 text");
    };
    let record = OverrideRecord { domain, body };
    match state.overrides.set(record, &who).await {
        Ok(outcome) => {
            let status = if outcome.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            #[derive(Serialize)]
            struct SetView {
                #[serde(flatten)]
                set: OverrideView,
                warnings: Vec<String>,
            }
            json(
                status,
                &SetView {
                    set: OverrideView::from(&*outcome.set),
                    warnings: outcome
                        .warnings
                        .all()
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                },
            )
        }
        Err(error) => refusal(&error),
    }
}

async fn delete<C: Clock + Clone + Send + Sync + 'static>(
    State(state): State<Arc<ApiState<C>>>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
    Caller(who): Caller,
) -> Response {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "name the override's descriptor path: DELETE /v1/overrides/DOMAIN?key=value&…",
        );
    };
    let key = OverrideKey::from_query(&domain, &query);
    match state.overrides.delete(&key, &who).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => refusal(&error),
    }
}

/// A descriptor's quota, as `/v1/usage` shows it.
#[derive(Debug, Serialize)]
struct UsageView {
    domain: String,
    descriptor: Vec<(String, String)>,
    /// `OK` or `OVER_LIMIT`: what a request of one hit would get, short of
    /// what other instances spend meanwhile.
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_s: Option<u64>,
    remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    used: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reset_s: Option<u64>,
    /// Where the rule comes from: `file` or `override` (absent: no rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
}

async fn usage<C: Clock + Clone + Send + Sync + 'static>(
    State(state): State<Arc<ApiState<C>>>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
    _caller: Caller,
) -> Response {
    let entries: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    if entries.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "name the descriptor: GET /v1/usage/DOMAIN?key=value&…",
        );
    }
    let request = RateLimitRequest {
        domain: domain.clone(),
        descriptors: vec![Descriptor {
            hits_addend: Some(0),
            ..Descriptor::new(entries.clone())
        }],
        hits_addend: 0,
    };
    let engine = state.overrides.live().engine();
    let source = engine.rules().find(&domain, &entries).map(|rule| {
        if rule.file.as_os_str() == super::OVERRIDE_SOURCE {
            "override"
        } else {
            "file"
        }
    });
    let response = match engine.decide(&request).await {
        Ok(response) => response,
        Err(error) => return text(StatusCode::BAD_REQUEST, error),
    };
    let Some(status) = response.statuses.first() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine answered no status",
        );
    };
    let limit = status.current_limit.as_ref();
    json(
        StatusCode::OK,
        &UsageView {
            domain,
            descriptor: entries,
            code: status.code.name(),
            limit: limit.map(|l| l.requests_per_unit),
            window_s: limit.map(|l| ceil_seconds(l.window)),
            remaining: status.limit_remaining,
            used: limit.map(|l| l.requests_per_unit.saturating_sub(status.limit_remaining)),
            reset_s: status.duration_until_reset.map(ceil_seconds),
            source,
        },
    )
}

//! The HTTP front end: upstream's `/json` endpoint, a native `/v1/check`, health checks and a rules dump.
//!
//! [`router`] builds an axum router over a [`LiveEngine`]:
//!
//! * `POST /json` takes a proto3 JSON `RateLimitRequest` (camelCase fields,
//!   snake_case accepted too) and answers a proto3 JSON `RateLimitResponse`:
//!   200 when the overall code is OK, 429 when it is OVER_LIMIT, 400 with a
//!   plain-text message for JSON that cannot be read or a request the engine
//!   rejects. Every response field is written, defaults included.
//! * `POST /v1/check` takes `{"domain":…,"descriptors":[{"key":"value",…}],"hits":N}`,
//!   where each descriptor is a JSON object whose members are the entries
//!   **in the order written** (order matters: it selects the rule), and
//!   answers `{"allowed":…,"statuses":[…]}` with 200 or 429, plus the
//!   configured response headers ([`ResponseHeaders`]) as HTTP headers.
//! * `GET /healthcheck` (upstream's, `OK`), `GET /healthz` (liveness) and
//!   `GET /readyz` (200 while the readiness flag is set, 503 once shutdown
//!   starts).
//! * `GET /rlconfig` lists the loaded rules, one line per rule.
//! * `GET /metrics` serves [`Metrics`] in the Prometheus text format, when
//!   the state has them ([`HttpState::with_metrics`]).
//!
//! [`serve`] runs the router on a listener until a shutdown future completes.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;
use tollgate_core::{Clock, Unit};
use tollgate_rules::{Limit, RuleSet, WindowLength};

use crate::engine::{
    Code, Descriptor, DescriptorStatus, EngineError, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
use crate::headers::{ResponseHeaders, ceil_seconds};
use crate::metrics::Metrics;
use crate::reload::LiveEngine;

/// What every handler shares: the engine in service, the headers to add and readiness.
pub struct HttpState<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    headers: Arc<ResponseHeaders>,
    ready: Arc<AtomicBool>,
    metrics: Option<Arc<Metrics>>,
}

impl<C: Clock> Clone for HttpState<C> {
    fn clone(&self) -> Self {
        HttpState {
            engine: Arc::clone(&self.engine),
            headers: Arc::clone(&self.headers),
            ready: Arc::clone(&self.ready),
            metrics: self.metrics.clone(),
        }
    }
}

impl<C: Clock> HttpState<C> {
    /// State answering from `engine`, adding what `headers` renders; `/readyz` reads `ready`.
    pub fn new(
        engine: Arc<LiveEngine<C>>,
        headers: Arc<ResponseHeaders>,
        ready: Arc<AtomicBool>,
    ) -> Self {
        HttpState {
            engine,
            headers,
            ready,
            metrics: None,
        }
    }

    /// This state, counting answers in `metrics` (api `http`) and serving them on `/metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The HTTP API's routes over `state`.
pub fn router<C: Clock + 'static>(state: HttpState<C>) -> Router {
    Router::new()
        .route("/json", post(json_endpoint::<C>))
        .route("/v1/check", post(check_endpoint::<C>))
        .route("/healthcheck", get(|| async { "OK" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<C>))
        .route("/rlconfig", get(rlconfig::<C>))
        .route("/metrics", get(metrics_endpoint::<C>))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for the requests in flight.
pub async fn serve<F>(listener: TcpListener, router: Router, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// A 400 response with a plain-text message.
fn bad_request(message: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, message.into()).into_response()
}

/// 200 for OK, 429 for OVER_LIMIT.
fn status_for(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// Runs `request` through the engine in service, counting it in the metrics;
/// the engine's message when it rejects it.
async fn decide<C: Clock>(
    state: &HttpState<C>,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, String> {
    let start = state.metrics.as_ref().map(|m| m.start());
    let engine = state.engine.load();
    let answer = engine.decide(request).await;
    if let (Some(metrics), Some(start)) = (&state.metrics, start) {
        if let Ok(response) = &answer {
            metrics.observe(engine.rules(), request, response);
        }
        metrics.observe_duration("http", start);
    }
    answer.map_err(|EngineError::InvalidArgument(message)| {
        tracing::debug!(domain = %request.domain, %message, "invalid HTTP rate limit request");
        message
    })
}

/// A JSON body with a status code.
fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the response: {error}"),
        )
            .into_response(),
    }
}

// ---------------------------------------------------------------- /json

/// A proto3 JSON `RateLimitRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend", deserialize_with = "de_opt_u32")]
    hits_addend: Option<u32>,
}

/// A proto3 JSON `RateLimitDescriptor`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend", deserialize_with = "de_opt_u64")]
    hits_addend: Option<u64>,
    #[serde(default, alias = "is_negative_hits")]
    is_negative_hits: bool,
}

/// A proto3 JSON descriptor entry.
#[derive(Debug, Deserialize)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

/// A proto3 JSON `RateLimitOverride`; `unit` is the enum's name (or number).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonOverride {
    #[serde(default, alias = "requests_per_unit", deserialize_with = "de_opt_u32")]
    requests_per_unit: Option<u32>,
    #[serde(default, deserialize_with = "de_unit")]
    unit: Option<Unit>,
    #[serde(default, alias = "unit_multiplier", deserialize_with = "de_opt_u32")]
    unit_multiplier: Option<u32>,
}

/// Reads a proto3 JSON integer: a number or a decimal string; `null` is absent.
fn de_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| de::Error::custom(format!("{n} is not an unsigned integer"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| de::Error::custom(format!("{s:?} is not an unsigned integer"))),
        Some(other) => Err(de::Error::custom(format!(
            "expected an unsigned integer, found {other}"
        ))),
    }
}

/// [`de_opt_u64`] limited to `u32`.
fn de_opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match de_opt_u64(d)? {
        None => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| de::Error::custom(format!("{n} does not fit in 32 bits"))),
    }
}

/// Reads a `RateLimitUnit` by name (`MINUTE`) or number; `UNKNOWN` (0) is `None`.
fn de_unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Unit>, D::Error> {
    let unit = match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "UNKNOWN" => None,
            "SECOND" => Some(Unit::Second),
            "MINUTE" => Some(Unit::Minute),
            "HOUR" => Some(Unit::Hour),
            "DAY" => Some(Unit::Day),
            "MONTH" => Some(Unit::Month),
            "YEAR" => Some(Unit::Year),
            _ => {
                return Err(de::Error::custom(format!(
                    "unknown unit {s:?}; expected SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"
                )));
            }
        },
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => None,
            Some(1) => Some(Unit::Second),
            Some(2) => Some(Unit::Minute),
            Some(3) => Some(Unit::Hour),
            Some(4) => Some(Unit::Day),
            Some(5) => Some(Unit::Month),
            Some(6) => Some(Unit::Year),
            _ => return Err(de::Error::custom(format!("unknown unit number {n}"))),
        },
        Some(other) => {
            return Err(de::Error::custom(format!(
                "expected a unit name, found {other}"
            )));
        }
    };
    Ok(unit)
}

impl JsonRequest {
    /// The engine's form of this request.
    fn into_engine(self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain,
            descriptors: self
                .descriptors
                .into_iter()
                .map(|d| Descriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    limit: d.limit.map(|l| LimitOverride {
                        requests_per_unit: l.requests_per_unit.unwrap_or(0),
                        unit: l.unit,
                        unit_multiplier: l.unit_multiplier,
                    }),
                    hits_addend: d.hits_addend,
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
            hits_addend: self.hits_addend.unwrap_or(0),
        }
    }
}

/// A proto3 JSON `RateLimitResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    statuses: Vec<JsonStatus>,
}

/// A proto3 JSON `DescriptorStatus`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

/// A proto3 JSON `RateLimit`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    name: String,
    requests_per_unit: u32,
    unit: &'static str,
    unit_multiplier: u32,
}

/// The proto enum name of a code.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// The proto enum name of a unit.
fn unit_enum_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "SECOND",
        Unit::Minute => "MINUTE",
        Unit::Hour => "HOUR",
        Unit::Day => "DAY",
        Unit::Week => "WEEK",
        Unit::Month => "MONTH",
        Unit::Year => "YEAR",
    }
}

/// The lower-case name of a unit.
fn unit_lower_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "second",
        Unit::Minute => "minute",
        Unit::Hour => "hour",
        Unit::Day => "day",
        Unit::Week => "week",
        Unit::Month => "month",
        Unit::Year => "year",
    }
}

/// A proto3 JSON duration in whole seconds, rounded up (`15s`).
fn duration_string(d: Duration) -> String {
    format!("{}s", ceil_seconds(d))
}

fn json_status(status: &DescriptorStatus) -> JsonStatus {
    JsonStatus {
        code: code_name(status.code),
        current_limit: status.current_limit.as_ref().map(|l| JsonLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: unit_enum_name(l.unit),
            unit_multiplier: l.unit_multiplier.max(1),
        }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(duration_string),
    }
}

async fn json_endpoint<C: Clock + 'static>(
    State(state): State<HttpState<C>>,
    body: Bytes,
) -> Response {
    let request: JsonRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(format!("invalid RateLimitRequest JSON: {error}")),
    };
    let request = request.into_engine();
    let response = match decide(&state, &request).await {
        Ok(response) => response,
        Err(message) => return bad_request(message),
    };
    let body = JsonResponse {
        overall_code: code_name(response.overall),
        statuses: response.statuses.iter().map(json_status).collect(),
    };
    json_response(status_for(response.overall), &body)
}

// ---------------------------------------------------------------- /v1/check

/// The native request: a domain, descriptors as ordered objects, and hits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<OrderedEntries>,
    #[serde(default)]
    hits: Option<u32>,
}

/// A JSON object read as its members in the order written.
#[derive(Debug)]
struct OrderedEntries(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = OrderedEntries;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a descriptor object of string keys and string values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedEntries, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    entries.push((key, value));
                }
                Ok(OrderedEntries(entries))
            }
        }
        d.deserialize_map(EntriesVisitor)
    }
}

/// The native answer.
#[derive(Debug, Serialize)]
struct CheckResponse {
    allowed: bool,
    statuses: Vec<CheckStatus>,
}

/// The native answer for one descriptor; limit fields only when a limit applied.
#[derive(Debug, Serialize)]
struct CheckStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unit: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    reset_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u64>,
}

fn check_status(status: &DescriptorStatus) -> CheckStatus {
    let limit = status.current_limit.as_ref();
    CheckStatus {
        code: code_name(status.code),
        limit: limit.map(|l| l.requests_per_unit),
        unit: limit.map(|l| unit_lower_name(l.unit)),
        window_s: limit.map(|l| ceil_seconds(l.window)),
        name: limit.map(|l| l.name.clone()),
        remaining: status.limit_remaining,
        reset_s: status.duration_until_reset.map(ceil_seconds),
        retry_after_s: status.retry_after.map(ceil_seconds),
    }
}

async fn check_endpoint<C: Clock + 'static>(
    State(state): State<HttpState<C>>,
    body: Bytes,
) -> Response {
    let request: CheckRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(format!("invalid check request JSON: {error}")),
    };
    let request = RateLimitRequest {
        domain: request.domain,
        descriptors: request
            .descriptors
            .into_iter()
            .map(|d| Descriptor::new(d.0))
            .collect(),
        hits_addend: request.hits.unwrap_or(0),
    };
    let response = match decide(&state, &request).await {
        Ok(response) => response,
        Err(message) => return bad_request(message),
    };
    let body = CheckResponse {
        allowed: response.overall == Code::Ok,
        statuses: response.statuses.iter().map(check_status).collect(),
    };
    let mut reply = json_response(status_for(response.overall), &body);
    let rendered = state.headers.render(&request.descriptors, &response);
    append_headers(reply.headers_mut(), rendered.headers);
    reply
}

/// Adds rendered `(name, value)` headers, skipping any that are not valid HTTP.
fn append_headers(map: &mut HeaderMap, headers: Vec<(String, String)>) {
    for (name, value) in headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            (Ok(name), Ok(value)) => {
                map.append(name, value);
            }
            _ => tracing::debug!(%name, %value, "skipping a header that is not valid HTTP"),
        }
    }
}

// ---------------------------------------------------------------- health and rules

async fn readyz<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    if !state.ready.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let remote = state.engine.load().remote().cloned();
    if let Some(remote) = remote
        && let Err(error) = remote.redis().ping().await
    {
        // Still answering, by each rule's on_store_error; but not what it should be.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {error}"),
        )
            .into_response();
    }
    (StatusCode::OK, "ready").into_response()
}

async fn metrics_endpoint<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    let Some(metrics) = &state.metrics else {
        return (StatusCode::NOT_FOUND, "metrics are not enabled").into_response();
    };
    match metrics.render() {
        Ok(text) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {error}"),
        )
            .into_response(),
    }
}

async fn rlconfig<C: Clock + 'static>(State(state): State<HttpState<C>>) -> String {
    rules_dump(state.engine.load().rules())
}

/// One line per rule: `domain.key_value: limit; limit[, shadow_mode]`.
pub fn rules_dump(rules: &RuleSet) -> String {
    let mut out = String::new();
    let mut domains: Vec<&str> = rules.domains().collect();
    domains.sort_unstable();
    for domain in domains {
        for rule in rules.rules(domain) {
            let limits: Vec<String> = rule.limits.iter().map(limit_summary).collect();
            let _ = write!(out, "{}: {}", rule.dotted_path(domain), limits.join("; "));
            if rule.shadow_mode {
                out.push_str(", shadow_mode");
            }
            if rule.detailed_metric {
                out.push_str(", detailed_metric");
            }
            out.push('\n');
        }
    }
    out
}

/// `name=login requests_per_unit=3 window=60s algorithm=fixed_window`, or `unlimited`.
fn limit_summary(limit: &Limit) -> String {
    let mut text = String::new();
    if let Some(name) = &limit.name {
        let _ = write!(text, "name={name} ");
    }
    match limit.window {
        None => text.push_str("unlimited"),
        Some(window) => {
            let _ = write!(
                text,
                "requests_per_unit={} window={} algorithm={}",
                limit.requests_per_unit,
                window_text(window),
                limit.algorithm_kind.name()
            );
            if let Some(burst) = limit.burst {
                let _ = write!(text, " burst={burst}");
            }
        }
    }
    text
}

/// A window's length in seconds (`60s`), or milliseconds when it is not whole seconds.
fn window_text(window: WindowLength) -> String {
    let d = window.duration();
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

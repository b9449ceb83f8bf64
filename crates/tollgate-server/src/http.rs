//! The HTTP front end: upstream's `/json` endpoint, a native `/v1/check`, health checks and a rules dump.
//!
//! [`router`] builds an axum router over a [`LiveEngine`]:
//!
//! * `POST /json` takes a proto3 JSON `RateLimitRequest` (camelCase fields,
//!   snake_case accepted too) and answers a proto3 JSON `RateLimitResponse`
//!   (the protocol crate's wire messages through serde):
//!   200 when the overall code is OK, 429 when it is OVER_LIMIT, 400 with a
//!   plain-text message for JSON that cannot be read or a request the engine
//!   rejects.
//! * `POST /v1/check` takes `{"domain":…,"descriptors":[{"key":"value",…}],"hits":N}`,
//!   where each descriptor is a JSON object whose members are the entries
//!   **in the order written** (order matters: it selects the rule) and
//!   `hits` is what each descriptor costs (1 when absent; 0 checks without
//!   consuming, like a descriptor `hits_addend` of 0), and
//!   answers `{"allowed":…,"statuses":[…]}` with 200 or 429, plus the
//!   configured response headers ([`ResponseHeaders`]) as HTTP headers; a
//!   leaky-bucket shaper's wait is `delay_ms` (the caller holds the request).
//! * `GET /healthcheck` (upstream's, `OK`), `GET /healthz` (liveness),
//!   `GET /readyz` (200 while the readiness flag is set, 503 once shutdown
//!   starts, or, with `ready_requires_store`, while a shared store does not
//!   take a write: down, too slow, or out of memory) and `GET /healthz/store`
//!   (200 while the shared store takes a write or there is none, else 503).
//! * Both POST endpoints take only `Content-Type: application/json`
//!   (parameters such as `charset` allowed), and answer 415 naming the
//!   expected type otherwise: a web page can send a cross-origin `text/plain`
//!   POST without asking, but not an `application/json` one, so no page a
//!   browser visits can spend or refund quota. A body over
//!   [`RequestCaps::max_message_bytes`] is 413, and a request over the
//!   descriptor or entry caps is 400 naming the cap (counted in the JSON
//!   text before the request is built).
//! * `GET /rlconfig` lists the rules in service, one line per rule, each
//!   with its source: `file`, `xds` ([`crate::xds`]) or `override` ([`crate::overrides`]).
//! * `GET /version` answers the build serving as JSON (`version`,
//!   `git_hash`, `profile`, `features`), when the state has it
//!   ([`HttpState::with_build_info`]).
//! * `GET /metrics` serves [`Metrics`] in the Prometheus text format, when
//!   the state has them ([`HttpState::with_metrics`]); `GET /stats` lists
//!   the same statistics under upstream's statsd names, `name: value` a
//!   line, as upstream's debug port does ([`crate::statsd::stats_text`]).
//!   [`prometheus_router`] serves the exposition alone, on a path of its own.
//!
//! [`serve`] runs the router on a listener until a shutdown future completes;
//! [`serve_capped`] also caps its connections and the time a client may take
//! to send a request head ([`HttpLimits`]).

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tollgate_core::Clock;
use tollgate_core::duration::ceil_seconds;
use tollgate_protocol::rls::caps::{JsonEntries, RequestCaps};
use tollgate_protocol::rls::convert::engine_request;
use tollgate_protocol::rls::headers::ResponseHeaders;
use tollgate_protocol::rls::model::{
    Code, Descriptor, DescriptorStatus, RateLimitRequest, RateLimitResponse,
};
use tollgate_protocol::rls::wire;
use tollgate_rules::{Limit, RuleSet, WindowLength};
use tollgate_runtime::{AcceptOptions, ConnectionLimit, serve_connections};
use tollgate_tls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::build_info::BuildInfo;
use crate::engine::EngineError;
use crate::metrics::Metrics;
use crate::reload::LiveEngine;

/// What every handler shares: the engine in service, the headers to add and readiness.
pub struct HttpState<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    headers: Arc<ResponseHeaders>,
    ready: Arc<AtomicBool>,
    metrics: Option<Arc<Metrics>>,
    caps: RequestCaps,
    build: Option<BuildInfo>,
    refunds: Refunds,
}

/// Whether the HTTP API gives units back (`isNegativeHits` in `/json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Refunds {
    /// Anyone who reaches the API may give units back (upstream's behaviour).
    #[default]
    Allowed,
    /// A request that gives units back is refused with 403, spending and giving back nothing.
    Refused,
}

impl<C: Clock> Clone for HttpState<C> {
    fn clone(&self) -> Self {
        HttpState {
            engine: Arc::clone(&self.engine),
            headers: Arc::clone(&self.headers),
            ready: Arc::clone(&self.ready),
            metrics: self.metrics.clone(),
            caps: self.caps,
            build: self.build.clone(),
            refunds: self.refunds,
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
            caps: RequestCaps::default(),
            build: None,
            refunds: Refunds::Allowed,
        }
    }

    /// This state, giving units back or refusing to (`--http-refunds`).
    #[must_use]
    pub fn with_refunds(mut self, refunds: Refunds) -> Self {
        self.refunds = refunds;
        self
    }

    /// This state, refusing bodies and requests over `caps` (the defaults otherwise).
    #[must_use]
    pub fn with_caps(mut self, caps: RequestCaps) -> Self {
        self.caps = caps;
        self
    }

    /// This state, answering `build` on `/version`.
    #[must_use]
    pub fn with_build_info(mut self, build: BuildInfo) -> Self {
        self.build = Some(build);
        self
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
    let body_limit = DefaultBodyLimit::max(state.caps.max_message_bytes);
    Router::new()
        .route("/json", post(json_endpoint::<C>))
        .route("/v1/check", post(check_endpoint::<C>))
        .route("/healthcheck", get(|| async { "OK" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<C>))
        .route("/healthz/store", get(store_health::<C>))
        .route("/rlconfig", get(rlconfig::<C>))
        .route("/metrics", get(metrics_endpoint::<C>))
        .route("/stats", get(stats_endpoint::<C>))
        .route("/version", get(version::<C>))
        .layer(body_limit)
        .with_state(state)
}

/// How long a client may take to send a whole request head unless configured otherwise (the proxy's default).
pub const DEFAULT_REQUEST_HEADERS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the HTTP listener allows a client: how many connections, and how long to send a request head.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// The most connections open at once (`None`: no limit); past it new
    /// clients wait in the listen backlog.
    pub connection_limit: Option<Arc<ConnectionLimit>>,
    /// A connection that has not sent a whole request head this long after
    /// it opened, or after its previous response, is closed.
    pub request_headers_timeout: Duration,
    /// TLS on every connection (`None`: plain HTTP).
    pub tls: Option<TlsAcceptor>,
}

impl Default for HttpLimits {
    /// No connection limit; [`DEFAULT_REQUEST_HEADERS_TIMEOUT`].
    fn default() -> Self {
        HttpLimits {
            connection_limit: None,
            request_headers_timeout: DEFAULT_REQUEST_HEADERS_TIMEOUT,
            tls: None,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for
/// the requests in flight, with the default [`HttpLimits`].
pub async fn serve<F>(listener: TcpListener, router: Router, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    serve_capped(listener, router, HttpLimits::default(), shutdown).await
}

/// [`serve`] within `limits`: HTTP/1.1 through hyper and tollgate-runtime's
/// accept loop, which holds new clients in the listen backlog while the
/// connection limit is reached (logging `connection limit reached`).
pub async fn serve_capped<F>(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_headers_timeout);
    let options = AcceptOptions {
        name: "HTTP",
        drain_timeout: None,
        connection_limit: limits.connection_limit,
        tls: limits.tls,
        max_connection_age: None,
    };
    serve_connections(listener, shutdown, options, |stream, peer| {
        // Handlers that name their caller (the overrides API) read the peer
        // address and the names of its client certificate.
        let names = stream.peer_names();
        let service = router.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                let extensions = request.extensions_mut();
                extensions.insert(axum::extract::ConnectInfo(peer));
                extensions.insert(names.clone());
                request
            },
        );
        http1.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
    })
    .await;
    Ok(())
}

/// A 400 response with a plain-text message.
fn bad_request(message: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, message.into()).into_response()
}

/// The media type both POST endpoints take.
const JSON_TYPE: &str = "application/json";

/// The body of a POST endpoint's request: 415 unless it is [`JSON_TYPE`]
/// (with any parameters), 413 when it is over `caps.max_message_bytes`, 400
/// when its descriptors or their `entries` are over a cap (counted in the
/// JSON text, before the request is built).
async fn json_body(
    request: Request,
    caps: &RequestCaps,
    entries: JsonEntries,
) -> Result<Bytes, Response> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let essence = content_type
        .as_deref()
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if !essence.is_some_and(|essence| essence.eq_ignore_ascii_case(JSON_TYPE)) {
        let found = content_type.map_or_else(|| "none".to_owned(), |value| format!("{value:?}"));
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type must be {JSON_TYPE} (parameters such as charset allowed), not {found}"
            ),
        )
            .into_response());
    }
    let body = Bytes::from_request(request, &())
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "request body over the cap of {} bytes (max-request-bytes)",
                        caps.max_message_bytes
                    ),
                )
                    .into_response()
            } else {
                rejection.into_response()
            }
        })?;
    caps.check_json(&body, entries)
        .map_err(|error| bad_request(error.to_string()))?;
    Ok(body)
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
        metrics.observe_duration(crate::metrics::Api::Http, start);
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
                header::CONTENT_TYPE,
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

/// Upstream's `/json`: the wire messages in their proto3 JSON form.
async fn json_endpoint<C: Clock + 'static>(
    State(state): State<HttpState<C>>,
    request: Request,
) -> Response {
    let body = match json_body(request, &state.caps, JsonEntries::Array).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let request: wire::RateLimitRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(format!("invalid RateLimitRequest JSON: {error}")),
    };
    if state.refunds == Refunds::Refused && request.descriptors.iter().any(|d| d.is_negative_hits) {
        return (
            StatusCode::FORBIDDEN,
            "refunds (isNegativeHits) are refused on this listener (--http-refunds refuse); nothing was spent or given back\n",
        )
            .into_response();
    }
    let request = engine_request(request);
    let response = match decide(&state, &request).await {
        Ok(response) => response,
        Err(message) => return bad_request(message),
    };
    // The headers the gRPC answer carries too (upstream's /json includes them).
    let wire = state.headers.wire_answer(&request.descriptors, &response);
    json_response(status_for(response.overall), &wire)
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
    /// What each descriptor costs; absent means 1, and 0 checks without consuming.
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
    /// A leaky-bucket shaper's wait: hold the request this long before
    /// serving it (the endpoint answers at once; the caller waits).
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
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
        code: status.code.name(),
        limit: limit.map(|l| l.requests_per_unit),
        unit: limit.map(|l| l.unit.name()),
        window_s: limit.map(|l| ceil_seconds(l.window)),
        name: limit.map(|l| l.name.clone()),
        remaining: status.limit_remaining,
        reset_s: status.duration_until_reset.map(ceil_seconds),
        retry_after_s: status.retry_after.map(ceil_seconds),
    }
}

async fn check_endpoint<C: Clock + 'static>(
    State(state): State<HttpState<C>>,
    request: Request,
) -> Response {
    let body = match json_body(request, &state.caps, JsonEntries::Members).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let request: CheckRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return bad_request(format!("invalid check request JSON: {error}")),
    };
    // The cost goes on every descriptor, where 0 is a check (upstream's
    // descriptor-level `hits_addend`), not on the request, where 0 means 1.
    let hits = u64::from(request.hits.unwrap_or(1));
    let request = RateLimitRequest {
        domain: request.domain,
        descriptors: request
            .descriptors
            .into_iter()
            .map(|d| Descriptor {
                hits_addend: Some(hits),
                ..Descriptor::new(d.0)
            })
            .collect(),
        hits_addend: 0,
    };
    let response = match decide(&state, &request).await {
        Ok(response) => response,
        Err(message) => return bad_request(message),
    };
    let body = CheckResponse {
        allowed: response.overall == Code::Ok,
        delay_ms: (!response.delay.is_zero())
            .then(|| u64::try_from(response.delay.as_millis()).unwrap_or(u64::MAX)),
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
        && let Err(error) = remote.check_ready().await
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

async fn store_health<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    let Some(remote) = state.engine.load().remote().cloned() else {
        return (StatusCode::OK, "no shared store").into_response();
    };
    match remote.check_store().await {
        Ok(()) => (StatusCode::OK, "store up").into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {error}"),
        )
            .into_response(),
    }
}

async fn version<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    match &state.build {
        Some(build) => json_response(StatusCode::OK, build),
        None => (StatusCode::NOT_FOUND, "build info is not set").into_response(),
    }
}

async fn metrics_endpoint<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    match &state.metrics {
        Some(metrics) => render_metrics(metrics),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled").into_response(),
    }
}

/// `metrics` in the Prometheus text format, or a 500 saying why not.
fn render_metrics(metrics: &Metrics) -> Response {
    match metrics.render() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::exposition::CONTENT_TYPE),
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

/// Upstream's debug `/stats`: every stat under its statsd name, `name: value` a line.
async fn stats_endpoint<C: Clock + 'static>(State(state): State<HttpState<C>>) -> Response {
    match &state.metrics {
        Some(metrics) => crate::statsd::stats_text(metrics).into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled").into_response(),
    }
}

/// The Prometheus exposition alone, at `path` (upstream's `USE_PROMETHEUS` listener).
pub fn prometheus_router(metrics: Arc<Metrics>, path: &str) -> Router {
    Router::new().route(
        path,
        get(move || {
            let metrics = Arc::clone(&metrics);
            async move { render_metrics(&metrics) }
        }),
    )
}

async fn rlconfig<C: Clock + 'static>(State(state): State<HttpState<C>>) -> String {
    rules_dump(state.engine.load().rules())
}

/// One line per rule: `domain.key_value: limit; limit[, shadow_mode…], source=file|xds|override`
/// (`xds`: from an xDS management server; `override`: set through the
/// overrides API, laid over the files' or the xDS server's rules).
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
            if let Some(lease) = rule.lease {
                let _ = write!(out, ", lease={}", duration_text(lease));
            }
            if rule.stagger {
                out.push_str(", stagger");
            }
            if rule.file.as_os_str() == crate::overrides::OVERRIDE_SOURCE {
                out.push_str(", source=override");
            } else if rule
                .file
                .to_string_lossy()
                .starts_with(crate::xds::XDS_SOURCE_PREFIX)
            {
                out.push_str(", source=xds");
            } else {
                out.push_str(", source=file");
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
            if let Some(delay) = limit.delay {
                let _ = write!(text, " delay={delay}");
            }
        }
    }
    text
}

/// A window's length in seconds (`60s`), or milliseconds when it is not whole seconds.
fn window_text(window: WindowLength) -> String {
    duration_text(window.duration())
}

/// A duration in seconds (`60s`), or milliseconds when it is not whole seconds.
fn duration_text(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

//! Turns every [`ProxyError`] into the response the client gets: the one place replies are made.
//!
//! * Local rate limit (Envoy's local reply): `status` (429), body
//!   `local_rate_limited` as `text/plain`, `response_headers_to_add`,
//!   X-RateLimit-*, `Retry-After` on a 429 when enabled. No
//!   `x-envoy-ratelimited`.
//! * Global rate limit: `rate_limited_status` (429), the RLS's `raw_body`
//!   (`text/plain` unless the RLS sent a content type), its headers,
//!   `x-envoy-ratelimited: true`, X-RateLimit-*, `Retry-After` when enabled.
//! * gRPC requests get HTTP 200 with `grpc-status` 14 (or 8) and
//!   `grpc-message`, for both.
//! * `limit_req`: its `status` (429) with `Retry-After` (when one more
//!   request of the key would pass, or the wait it was refused), body
//!   `rate limited: …` as `text/plain`.
//! * RLS failure with `failure_mode_deny`: `status_on_error` (500), empty body.
//! * Load shedding (`concurrency_limit`, `priority_shedding`): 503 + `Retry-After`.
//! * Upstream failures: 503 (with `Retry-After` while a breaker is open), or
//!   504 on timeout; no route: 404. Never a 500.
//!
//! The route's [`ResponseContract`] adds what Envoy does not: an upward
//! jitter on `Retry-After`, the IETF draft-10 `RateLimit` /
//! `RateLimit-Policy` fields, and an RFC 9457 problem body with
//! `violated-policies`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tollgate_protocol::rls::Jitter;
use tollgate_protocol::rls::headers::{limit_item, policy_item, retry_after_seconds};

use crate::body::{ProxyBody, full_body};
use crate::error::ProxyError;
use crate::forward::error::UpstreamError;
use crate::local_ratelimit::{BucketReport, LOCAL_RATE_LIMITED_BODY};

/// The problem type of a quota denial (IETF draft-10 registry).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The dialect a reply is made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Plain HTTP: the status and body of each error.
    Http,
    /// gRPC: HTTP 200 with `grpc-status` and `grpc-message`.
    Grpc,
}

impl Dialect {
    /// The dialect of a request with `headers`: gRPC when its `content-type` is `application/grpc…`.
    pub fn of(headers: &HeaderMap) -> Self {
        let grpc = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        if grpc { Dialect::Grpc } else { Dialect::Http }
    }
}

/// A route's 429/503 contract beyond Envoy's fields.
#[derive(Clone, Debug)]
pub struct ResponseContract {
    /// The most upward jitter added to `Retry-After`.
    pub retry_after_jitter: Duration,
    /// `RateLimit` and `RateLimit-Policy` fields.
    pub ietf_headers: bool,
    /// An RFC 9457 problem body.
    pub problem_json: bool,
    /// The jitter source.
    pub jitter: Arc<Jitter>,
}

impl Default for ResponseContract {
    fn default() -> Self {
        ResponseContract {
            retry_after_jitter: Duration::ZERO,
            ietf_headers: false,
            problem_json: false,
            jitter: Arc::new(Jitter::random()),
        }
    }
}

impl ResponseContract {
    fn retry_after(&self, wait: Duration) -> u64 {
        retry_after_seconds(wait, self.jitter.sample(self.retry_after_jitter)).max(1)
    }
}

/// The IETF fields for local bucket reports.
pub fn ietf_local(report: &BucketReport) -> [(HeaderName, HeaderValue); 2] {
    let policy = policy_item(&report.name, report.limit, report.window);
    let item = limit_item(&report.name, report.remaining, report.reset_seconds());
    [
        (
            HeaderName::from_static("ratelimit-policy"),
            HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("")),
        ),
        (
            HeaderName::from_static("ratelimit"),
            HeaderValue::from_str(&item).unwrap_or(HeaderValue::from_static("")),
        ),
    ]
}

fn problem(status: StatusCode, detail: &str, violated: &[String]) -> Vec<u8> {
    serde_json::json!({
        "type": QUOTA_EXCEEDED,
        "title": status.canonical_reason().unwrap_or("Too Many Requests"),
        "status": status.as_u16(),
        "detail": detail,
        "violated-policies": violated,
    })
    .to_string()
    .into_bytes()
}

fn grpc_reply(grpc_status: u8, message: &str, mut headers: HeaderMap) -> Response<ProxyBody> {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(u16::from(grpc_status)));
    if let Ok(m) = HeaderValue::from_str(message) {
        headers.insert("grpc-message", m);
    }
    let mut response = Response::new(full_body(Vec::new()));
    *response.headers_mut() = headers;
    response
}

fn reply(status: StatusCode, headers: HeaderMap, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut response = Response::new(full_body(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// The response for `error`, in the request's `dialect`.
pub fn render(
    error: ProxyError,
    dialect: Dialect,
    contract: &ResponseContract,
) -> Response<ProxyBody> {
    match error {
        ProxyError::LocalRateLimited(denial) => {
            let mut headers = denial.headers;
            if contract.ietf_headers
                && let Some(report) = &denial.report
            {
                for (n, v) in ietf_local(report) {
                    headers.insert(n, v);
                }
            }
            if dialect == Dialect::Grpc {
                return grpc_reply(denial.grpc_status, LOCAL_RATE_LIMITED_BODY, headers);
            }
            if denial.retry_after
                && denial.status == StatusCode::TOO_MANY_REQUESTS
                && let Some(report) = &denial.report
            {
                headers.insert(
                    RETRY_AFTER,
                    HeaderValue::from(contract.retry_after(report.next_token)),
                );
            }
            let body = if contract.problem_json {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/problem+json"),
                );
                let violated: Vec<String> =
                    denial.report.iter().map(|r| r.name.to_string()).collect();
                Bytes::from(problem(
                    denial.status,
                    "local rate limit exceeded",
                    &violated,
                ))
            } else {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                Bytes::from_static(LOCAL_RATE_LIMITED_BODY.as_bytes())
            };
            reply(denial.status, headers, body)
        }
        ProxyError::GlobalRateLimited(denial) => {
            let ietf = if contract.ietf_headers {
                denial.ietf_fields()
            } else {
                Vec::new()
            };
            let violated = denial.violated_policies();
            let mut headers = denial.headers;
            for (n, v) in ietf {
                headers.insert(n, v);
            }
            if dialect == Dialect::Grpc {
                return grpc_reply(denial.grpc_status, "request_rate_limited", headers);
            }
            if let Some(wait) = denial.retry_after {
                headers.insert(RETRY_AFTER, HeaderValue::from(contract.retry_after(wait)));
            }
            let body = if contract.problem_json && denial.body.is_empty() {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/problem+json"),
                );
                problem(denial.status, "global rate limit exceeded", &violated)
            } else {
                if !denial.body.is_empty() && !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                }
                denial.body
            };
            reply(denial.status, headers, body)
        }
        ProxyError::LimitReqRejected(rejected) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(contract.retry_after(rejected.retry_after)),
            );
            if dialect == Dialect::Grpc {
                return grpc_reply(14, "request_rate_limited", headers);
            }
            let body = if contract.problem_json {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/problem+json"),
                );
                problem(rejected.status, &rejected.to_string(), &[])
            } else {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                rejected.to_string().into_bytes()
            };
            reply(rejected.status, headers, body)
        }
        ProxyError::RateLimitServiceFailed(failure) => {
            if dialect == Dialect::Grpc {
                return grpc_reply(14, "rate_limiter_error", HeaderMap::new());
            }
            reply(failure.status, HeaderMap::new(), Vec::new())
        }
        ProxyError::Shed(shed) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(contract.retry_after(shed.retry_after())),
            );
            if dialect == Dialect::Grpc {
                return grpc_reply(14, "overloaded", headers);
            }
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                headers,
                format!("overloaded: {shed}").into_bytes(),
            )
        }
        ProxyError::Upstream(e) => {
            let status = match e {
                UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            let mut headers = HeaderMap::new();
            if let UpstreamError::Unavailable(pick) = &e
                && let Some(wait) = pick.retry_after()
            {
                headers.insert(RETRY_AFTER, HeaderValue::from(contract.retry_after(wait)));
            }
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            reply(status, headers, e.to_string().into_bytes())
        }
        ProxyError::NoRoute => {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            reply(StatusCode::NOT_FOUND, headers, Vec::new())
        }
        error @ (ProxyError::BadRequest(_) | ProxyError::HeadersTooLarge { .. }) => {
            let status = match error {
                ProxyError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            };
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            reply(status, headers, error.to_string().into_bytes())
        }
        ProxyError::Internal(m) => {
            tracing::error!(message = %m, "internal error");
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            reply(StatusCode::SERVICE_UNAVAILABLE, headers, m.into_bytes())
        }
    }
}

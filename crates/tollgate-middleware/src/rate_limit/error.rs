//! [`Rejection`]: why the layer answered instead of the app, and the handler that turns it into a response (by default an RFC 9457 problem).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tollgate_store::StoreError;

use crate::key::NoClientAddress;

/// Why a request was answered by the layer rather than the app.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// Over a limit: 429.
    OverLimit {
        /// The limits that refused, by name.
        limits: Vec<String>,
        /// `Retry-After` (when the request can ever pass), `RateLimit-Limit` /
        /// `-Remaining` / `-Reset`, `RateLimit-Policy` and `RateLimit`.
        headers: HeaderMap,
        /// The exact wait before the request could pass (the longest of the
        /// refusing limits'; `Retry-After` is it rounded up to seconds, plus
        /// any jitter). `None` when it never can (a cost above a quota).
        retry_after: Option<Duration>,
    },
    /// The counter store failed (and the layer denies on store errors): 503 with `Retry-After: 1`.
    StoreUnavailable(StoreError),
    /// The layer is keyed by client address and the request has none: 500.
    /// A server set-up error, logged once; never a shared bucket.
    NoClientAddress(NoClientAddress),
}

impl Rejection {
    /// The status of the default answer: 429, 503 or 500.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::OverLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            Rejection::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::NoClientAddress(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The headers the answer should carry whatever its body: the rate
    /// limit headers of a 429, `Retry-After: 1` for a 503, none for a 500.
    pub fn headers(&self) -> HeaderMap {
        match self {
            Rejection::OverLimit { headers, .. } => headers.clone(),
            Rejection::StoreUnavailable(_) => {
                let mut map = HeaderMap::new();
                map.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
                map
            }
            Rejection::NoClientAddress(_) => HeaderMap::new(),
        }
    }

    /// The default answer: [`status`](Self::status), [`headers`](Self::headers)
    /// and an RFC 9457 `application/problem+json` body whose `detail` says why.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate_middleware::Rejection;
    ///
    /// let rejection = Rejection::OverLimit {
    ///     limits: vec!["per-second".into()],
    ///     headers: Default::default(),
    ///     retry_after: None,
    /// };
    /// let response = rejection.problem_response();
    /// assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(response.headers()["content-type"], "application/problem+json");
    /// let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    /// assert_eq!(body["status"], 429);
    /// assert_eq!(body["detail"], "over the rate limit \"per-second\"");
    /// ```
    pub fn problem_response(&self) -> Response<Bytes> {
        let status = self.status();
        let problem = serde_json::json!({
            "type": "about:blank",
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": status.as_u16(),
            "detail": self.to_string(),
        });
        let mut response = Response::new(Bytes::from(problem.to_string()));
        *response.status_mut() = status;
        let map = response.headers_mut();
        map.extend(self.headers());
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::OverLimit { limits, .. } => {
                let names: Vec<String> = limits.iter().map(|n| format!("{n:?}")).collect();
                write!(f, "over the rate limit {}", names.join(", "))
            }
            Rejection::StoreUnavailable(_) => f.write_str("the rate limit store is unavailable"),
            Rejection::NoClientAddress(error) => error.fmt(f),
        }
    }
}

/// Turns a [`Rejection`] into the app's own answer (its JSON error, an HTML
/// page, a gRPC status); the default is [`Rejection::problem_response`].
/// Any `Fn(&Rejection) -> Response<Bytes>` closure is one.
pub trait RejectionHandler: Send + Sync + 'static {
    /// The answer to a request the layer rejected.
    fn respond(&self, rejection: &Rejection) -> Response<Bytes>;
}

impl<F> RejectionHandler for F
where
    F: Fn(&Rejection) -> Response<Bytes> + Send + Sync + 'static,
{
    fn respond(&self, rejection: &Rejection) -> Response<Bytes> {
        self(rejection)
    }
}

/// The handler a layer uses.
pub(super) type SharedHandler = Arc<dyn RejectionHandler>;

/// The default handler: [`Rejection::problem_response`].
pub(super) fn default_handler() -> SharedHandler {
    Arc::new(|rejection: &Rejection| rejection.problem_response())
}

/// Rendered `(name, value)` pairs as a map (the renderers only write valid names and values).
pub(crate) fn header_map(headers: Vec<(String, String)>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    append_headers(&mut map, headers);
    map
}

/// Adds rendered `(name, value)` pairs to `map`.
pub(super) fn append_headers(map: &mut HeaderMap, headers: Vec<(String, String)>) {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::try_from(value),
        ) {
            map.append(name, value);
        }
    }
}

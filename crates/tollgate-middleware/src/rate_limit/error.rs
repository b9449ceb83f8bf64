//! [`Rejection`]: why the layer answered instead of the app, turned into a response in one place.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use tollgate_protocol::rls::headers::Rendered;
use tollgate_store::StoreError;

/// Why a request was answered by the layer.
#[derive(Debug)]
pub enum Rejection {
    /// Over a limit: 429 with the rendered headers.
    OverLimit(Rendered),
    /// The counter store failed: 503 with `Retry-After: 1`.
    StoreUnavailable(StoreError),
}

impl Rejection {
    /// The response for this rejection.
    pub fn into_response<B: From<Bytes>>(self) -> Response<B> {
        let (status, headers, body) = match self {
            Rejection::OverLimit(rendered) => (
                StatusCode::TOO_MANY_REQUESTS,
                rendered.headers,
                "rate limited\n",
            ),
            Rejection::StoreUnavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                vec![("Retry-After".to_owned(), "1".to_owned())],
                "rate limit store unavailable\n",
            ),
        };
        let mut response = Response::new(B::from(Bytes::from_static(body.as_bytes())));
        *response.status_mut() = status;
        let map = response.headers_mut();
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        append_headers(map, headers);
        response
    }
}

/// Adds rendered `(name, value)` pairs to `map` (the renderers only write valid names and values).
pub(super) fn append_headers(map: &mut http::HeaderMap, headers: Vec<(String, String)>) {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::try_from(value),
        ) {
            map.append(name, value);
        }
    }
}

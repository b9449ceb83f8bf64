//! A header a descriptor action or a cost reads from a request: one of the pseudo-headers, or a header by name.

use http::HeaderName;
use http::request::Parts;

use crate::config::{ConfigPath, FieldError};

/// A header an action reads: one of the pseudo-headers, or a named header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestHeader {
    /// `:method`.
    Method,
    /// `:path` (with the query).
    Path,
    /// `:authority`: the Host header, else the URI's authority.
    Authority,
    /// `:scheme` (`http` unless the URI says otherwise).
    Scheme,
    /// A header by name.
    Named(HeaderName),
}

impl RequestHeader {
    /// The header `name` (any case) names, checked as an HTTP header name; the error is at `at`.
    pub fn parse(name: &str, at: &ConfigPath) -> Result<Self, FieldError> {
        match name {
            ":method" => Ok(RequestHeader::Method),
            ":path" => Ok(RequestHeader::Path),
            ":authority" => Ok(RequestHeader::Authority),
            ":scheme" => Ok(RequestHeader::Scheme),
            _ => HeaderName::from_bytes(name.as_bytes())
                .map(RequestHeader::Named)
                .map_err(|_| at.error(format!("`{name}` is not a header name"))),
        }
    }

    /// The header's first value in a request.
    pub fn value(&self, parts: &Parts) -> Option<String> {
        match self {
            RequestHeader::Method => Some(parts.method.as_str().to_owned()),
            RequestHeader::Path => Some(
                parts
                    .uri
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_owned(),
            ),
            RequestHeader::Authority => parts
                .headers
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned())),
            RequestHeader::Scheme => Some(parts.uri.scheme_str().unwrap_or("http").to_owned()),
            RequestHeader::Named(name) => parts.headers.get(name).map(header_text),
        }
    }

    /// Every value of the header in a request, in the order sent (a pseudo-header has at most one).
    pub fn values(&self, parts: &Parts) -> Vec<String> {
        match self {
            RequestHeader::Named(name) => parts
                .headers
                .get_all(name)
                .iter()
                .map(header_text)
                .collect(),
            _ => self.value(parts).into_iter().collect(),
        }
    }
}

/// A header value as text, any byte that is not UTF-8 replaced.
fn header_text(value: &http::HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).into_owned()
}

impl std::fmt::Display for RequestHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RequestHeader::Method => ":method",
            RequestHeader::Path => ":path",
            RequestHeader::Authority => ":authority",
            RequestHeader::Scheme => ":scheme",
            RequestHeader::Named(name) => name.as_str(),
        })
    }
}

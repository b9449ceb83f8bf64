//! The body types of the proxy's responses: [`ProxyBody`], streamed from upstream or made here, and [`full_body`].

use bytes::Bytes;
use http_body_util::BodyExt;

/// The body of every response the proxy sends: streamed from upstream or made here.
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// Any error a body can carry.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A complete body from bytes.
pub fn full_body(bytes: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

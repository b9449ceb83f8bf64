//! The global rate limit's response future: the RLS call, then the inner service.

use std::future::Future;
use std::pin::Pin;

use http::Response;

use crate::error::ProxyError;

/// Waits for the RLS answer, then for the inner response (or resolves to the denial).
pub type ResponseFuture<B> =
    Pin<Box<dyn Future<Output = Result<Response<B>, ProxyError>> + Send + 'static>>;

//! The boxed response future of the layers that await something before the inner service: the global rate limit (an RLS answer) and `limit_req` (a shaping delay).

use std::future::Future;
use std::pin::Pin;

use http::Response;

use crate::error::ProxyError;

/// Resolves to the inner service's response, or to the layer's refusal.
pub type ResponseFuture<B> =
    Pin<Box<dyn Future<Output = Result<Response<B>, ProxyError>> + Send + 'static>>;

//! The boxed response future of the layers that await something before the inner service: the global rate limit (an RLS answer) and `limit_req` (a shaping delay).

use std::future::Future;
use std::pin::Pin;

use http::Response;

/// Resolves to the inner service's response, or to the error `E` (the inner service's, or the layer's refusal converted into it).
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send + 'static>>;

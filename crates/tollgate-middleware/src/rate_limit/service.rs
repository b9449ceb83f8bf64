//! [`RateLimit`]: the middleware service; each call decides, then answers or calls the app.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tollgate_store::CounterStore;
use tower::Service;

use super::future::ResponseFuture;
use super::policy::Policy;
use crate::cost::Cost;

/// The rate limit middleware: the service a [`RateLimitLayer`](crate::RateLimitLayer) wraps an app's service in.
pub struct RateLimit<S, St> {
    inner: S,
    policy: Arc<Policy<St>>,
}

impl<S: Clone, St> Clone for RateLimit<S, St> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            policy: Arc::clone(&self.policy),
        }
    }
}

impl<S, St> RateLimit<S, St> {
    pub(super) fn new(inner: S, policy: Arc<Policy<St>>) -> Self {
        RateLimit { inner, policy }
    }
}

impl<S, St, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    St: CounterStore + 'static,
    ReqB: Send + 'static,
    ResB: From<Bytes> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // Call the service that was made ready; keep a fresh clone for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        let key = self.policy.key.extract(&parts);
        let request = Request::from_parts(parts, body);
        let cost = Cost::of(&request);
        ResponseFuture::new(inner, Arc::clone(&self.policy), request, key, cost)
    }
}

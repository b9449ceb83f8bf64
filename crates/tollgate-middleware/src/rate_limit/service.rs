//! [`RateLimit`]: the middleware service; each call decides, then answers or calls the app.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tollgate_store::CounterStore;
use tower::Service;

use super::error::Rejection;
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
        start(&mut self.inner, &self.policy, request, Policy::respond)
    }
}

/// Starts deciding `request` for the ready service `inner`, which is
/// called if it passes (a fresh clone takes its place for the next call);
/// a rejection is answered by `respond`.
pub(super) fn start<S, St, ReqB, B, R>(
    inner: &mut S,
    policy: &Arc<Policy<St>>,
    request: Request<ReqB>,
    respond: R,
) -> ResponseFuture<B, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    St: CounterStore + 'static,
    ReqB: Send + 'static,
    B: Send + 'static,
    R: FnOnce(&Policy<St>, &Rejection) -> Response<B> + Send + 'static,
{
    let clone = inner.clone();
    let inner = std::mem::replace(inner, clone);
    let (parts, body) = request.into_parts();
    let key = policy.key.extract(&parts);
    let request = Request::from_parts(parts, body);
    let cost = Cost::of(&request);
    ResponseFuture::new(inner, Arc::clone(policy), request, key, cost, respond)
}

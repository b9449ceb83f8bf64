//! [`RateLimit`]: the middleware service; each call decides, then answers or calls the app.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tollgate_store::CounterStore;
use tower::Service;

use super::error::Rejection;
use super::future::ResponseFuture;
use super::policy::{Policy, Verdict};
use crate::cost::Cost;
use crate::key::KeyBytes;

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
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        start(&mut self.inner, &self.policy, request, Policy::respond)
    }
}

/// Decides `request` for the ready service `inner`, which is called if it
/// passes: at once when the store decides at once (in memory), else in a
/// boxed future (a fresh clone then takes `inner`'s place for the next
/// call); a rejection is answered by `respond`.
pub(super) fn start<S, St, ReqB, B, R>(
    inner: &mut S,
    policy: &Arc<Policy<St>>,
    request: Request<ReqB>,
    respond: R,
) -> ResponseFuture<S::Future>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    St: CounterStore + 'static,
    ReqB: Send + 'static,
    B: Send + 'static,
    R: FnOnce(&Policy<St>, &Rejection) -> Response<B> + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let mut keys = KeyBytes::new();
    let key = policy.counter_keys(&parts, &mut keys);
    let request = Request::from_parts(parts, body);
    let key = match key {
        Ok(key) => key,
        Err(error) => {
            policy.report_no_address(error);
            let rejection = Rejection::NoClientAddress(error);
            return ResponseFuture::answered(Ok(respond(policy, &rejection)));
        }
    };
    let cost = Cost::of(&request);
    match policy.decide_now(&keys, key.clone(), cost) {
        Some(Verdict::Pass(headers)) => ResponseFuture::calling(inner.call(request), headers),
        Some(Verdict::Reject(rejection)) => {
            ResponseFuture::answered(Ok(respond(policy, &rejection)))
        }
        None => {
            let clone = inner.clone();
            let mut inner = std::mem::replace(inner, clone);
            let policy = Arc::clone(policy);
            ResponseFuture::deciding(Box::pin(async move {
                let headers = match policy.decide(&keys, key, cost).await {
                    Verdict::Pass(headers) => headers,
                    Verdict::Reject(rejection) => return Ok(respond(&policy, &rejection)),
                };
                let mut response = inner.call(request).await?;
                headers.add_to(response.headers_mut());
                Ok(response)
            }))
        }
    }
}

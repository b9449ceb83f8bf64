//! [`RateLimit`]: the middleware service; each call decides, then answers or calls the app.

use std::ops::Range;
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
use crate::key::{KeyBytes, NoClientAddress};

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
///
/// Only the admitted path of a store that decides at once is in line: a
/// missing client address, a rejection and a store that takes a call are
/// each a function of their own, so the common path's code stays short.
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
        Err(error) => return no_address::<S, St, ReqB, B, R>(policy, error, respond),
    };
    let cost = Cost::of(&request);
    match policy.decide_now(&keys, key.clone(), cost) {
        Some(Verdict::Pass(headers)) => ResponseFuture::calling(inner.call(request), headers),
        Some(Verdict::Reject(rejection)) => {
            rejected::<S, St, ReqB, B, R>(policy, &rejection, respond)
        }
        None => deciding(inner, policy, request, keys, key, cost, respond),
    }
}

/// The answer to a request without a client address (logged, [`Rejection::NoClientAddress`]).
#[cold]
#[inline(never)]
fn no_address<S, St, ReqB, B, R>(
    policy: &Policy<St>,
    error: NoClientAddress,
    respond: R,
) -> ResponseFuture<S::Future>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    R: FnOnce(&Policy<St>, &Rejection) -> Response<B>,
{
    policy.report_no_address(error);
    rejected::<S, St, ReqB, B, R>(policy, &Rejection::NoClientAddress(error), respond)
}

/// The layer's answer to a refused request, made by `respond`.
#[cold]
#[inline(never)]
fn rejected<S, St, ReqB, B, R>(
    policy: &Policy<St>,
    rejection: &Rejection,
    respond: R,
) -> ResponseFuture<S::Future>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    R: FnOnce(&Policy<St>, &Rejection) -> Response<B>,
{
    ResponseFuture::answered(Ok(respond(policy, rejection)))
}

/// The decision on a store that takes a call (Redis), and the call of the
/// app after it, in a boxed future; a fresh clone of `inner` takes its
/// place for the next call.
#[inline(never)]
fn deciding<S, St, ReqB, B, R>(
    inner: &mut S,
    policy: &Arc<Policy<St>>,
    request: Request<ReqB>,
    keys: KeyBytes,
    key: Range<usize>,
    cost: u64,
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

//! [`LimitReqService`]: decides each request with the route's `limit_req`, waits out its delay, then passes it on.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use tower::{Service, ServiceExt};

use tollgate_protocol::rls::headers::DELAY_HEADER;

use super::error::LimitReqError;
use super::policy::{LimitReqPolicy, Verdict};
use crate::context::RequestContext;
use crate::response_future::ResponseFuture;

/// `limit_req` in front of `S`.
#[derive(Clone, Debug)]
pub struct LimitReqService<S> {
    inner: S,
    policy: Arc<LimitReqPolicy>,
}

impl<S> LimitReqService<S> {
    /// `inner` behind `policy`.
    pub fn new(inner: S, policy: Arc<LimitReqPolicy>) -> Self {
        LimitReqService { inner, policy }
    }
}

impl<S, B, RB> Service<Request<B>> for LimitReqService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: From<LimitReqError> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = ResponseFuture<RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let client = match RequestContext::of(request.extensions()) {
            Ok(context) => context.client,
            Err(missing) => {
                return Box::pin(async move { Err(LimitReqError::from(missing).into()) });
            }
        };
        let mut waiter = self.inner.clone();
        match self.policy.decide(client, request.headers()) {
            Verdict::Pass => Box::pin(inner.call(request)),
            Verdict::Reject(rejected) => {
                Box::pin(async move { Err(LimitReqError::Rejected(rejected).into()) })
            }
            Verdict::Wait(delay, slot) => Box::pin(async move {
                // The ready service is not held while waiting: a layer below
                // may reserve capacity when it is ready.
                drop(inner);
                tokio::time::sleep(delay).await;
                drop(slot);
                let mut response = waiter.ready().await?.call(request).await?;
                response.headers_mut().insert(
                    DELAY_HEADER,
                    HeaderValue::from(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
                );
                Ok(response)
            }),
        }
    }
}

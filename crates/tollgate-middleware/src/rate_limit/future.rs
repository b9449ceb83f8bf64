//! [`ResponseFuture`]: decide, then answer the rejection (as HTTP or gRPC) or call the app and add the headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate_store::CounterStore;
use tower::Service;

use super::error::Rejection;
use super::policy::{Policy, Verdict};
use crate::key::NoClientAddress;

/// What a call ends with.
type Outcome<B, E> = Result<Response<B>, E>;

/// The response of a [`RateLimit`](super::RateLimit) call (and of a
/// `GrpcRateLimit` call with the `tonic` feature).
pub struct ResponseFuture<B, E> {
    inner: Pin<Box<dyn Future<Output = Outcome<B, E>> + Send>>,
}

impl<B, E> ResponseFuture<B, E> {
    /// Decides `request` with `policy`; a rejection is answered by `respond`.
    pub(super) fn new<S, St, ReqB, R>(
        mut service: S,
        policy: Arc<Policy<St>>,
        request: Request<ReqB>,
        key: Result<String, NoClientAddress>,
        cost: u64,
        respond: R,
    ) -> Self
    where
        S: Service<Request<ReqB>, Response = Response<B>, Error = E> + Send + 'static,
        S::Future: Send,
        St: CounterStore + 'static,
        ReqB: Send + 'static,
        B: Send + 'static,
        R: FnOnce(&Policy<St>, &Rejection) -> Response<B> + Send + 'static,
    {
        ResponseFuture {
            inner: Box::pin(async move {
                let key = match key {
                    Ok(key) => key,
                    Err(error) => {
                        policy.report_no_address(error);
                        return Ok(respond(&policy, &Rejection::NoClientAddress(error)));
                    }
                };
                let headers = match policy.decide(&key, cost).await {
                    Verdict::Pass(headers) => headers,
                    Verdict::Reject(rejection) => return Ok(respond(&policy, &rejection)),
                };
                let mut response = service.call(request).await?;
                policy.add_pass_headers(headers, response.headers_mut());
                Ok(response)
            }),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Outcome<B, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

//! [`ResponseFuture`]: decide, then answer the rejection or call the app and add the headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tollgate_store::CounterStore;
use tower::Service;

use super::error::{Rejection, append_headers};
use super::policy::{Policy, Verdict};

/// What a call ends with.
type Outcome<B, E> = Result<Response<B>, E>;

/// The response of a [`RateLimit`](super::RateLimit) call.
pub struct ResponseFuture<B, E> {
    inner: Pin<Box<dyn Future<Output = Outcome<B, E>> + Send>>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(super) fn new<S, St, ReqB>(
        mut service: S,
        policy: Arc<Policy<St>>,
        request: Request<ReqB>,
        key: String,
        cost: u64,
    ) -> Self
    where
        S: Service<Request<ReqB>, Response = Response<B>, Error = E> + Send + 'static,
        S::Future: Send,
        St: CounterStore + 'static,
        ReqB: Send + 'static,
        B: From<Bytes> + Send + 'static,
    {
        ResponseFuture {
            inner: Box::pin(async move {
                let headers = match policy.decide(&key, cost).await {
                    Verdict::Pass(headers) => headers,
                    Verdict::OverLimit(rendered) => {
                        return Ok(Rejection::OverLimit(rendered).into_response());
                    }
                    Verdict::StoreFailed(error) => {
                        return Ok(Rejection::StoreUnavailable(error).into_response());
                    }
                };
                let mut response = service.call(request).await?;
                append_headers(response.headers_mut(), headers);
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

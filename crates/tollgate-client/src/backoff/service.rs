//! [`Backoff`]: the client service; each call runs [`ResponseFuture`]'s loop.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::error::ClientError;
use super::future::ResponseFuture;
use super::policy::Shared;

/// A client service that paces, retries, breaks and throttles as [`BackoffLayer`](crate::BackoffLayer) configures it.
#[derive(Clone)]
pub struct Backoff<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Backoff<S> {
    pub(super) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Backoff { inner, shared }
    }

    /// The current local rejection probability of the adaptive throttle (0 when it is off).
    pub fn rejection_probability(&self) -> f64 {
        self.shared.rejection_probability()
    }
}

impl<S, B, R> Service<Request<B>> for Backoff<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Clone + Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = ClientError<S::Error>;
    type Future = ResponseFuture<R, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited per attempt, on a clone, inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        ResponseFuture::new(self.inner.clone(), Arc::clone(&self.shared), request)
    }
}

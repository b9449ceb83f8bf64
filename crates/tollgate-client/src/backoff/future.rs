//! [`ResponseFuture`]: one request's attempts through a tower service (the loop is in `attempts`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::attempts::{TowerTransport, attempts};
use super::error::ClientError;
use super::policy::Shared;

/// What a call ends with.
type Outcome<R, E> = Result<Response<R>, ClientError<E>>;

/// The response of a [`Backoff`](super::Backoff) call.
pub struct ResponseFuture<R, E> {
    inner: Pin<Box<dyn Future<Output = Outcome<R, E>> + Send>>,
}

impl<R, E> ResponseFuture<R, E> {
    pub(super) fn new<S, B>(service: S, shared: Arc<Shared>, request: Request<B>) -> Self
    where
        S: Service<Request<B>, Response = Response<R>, Error = E> + Send + 'static,
        S::Future: Send,
        B: Clone + Send + 'static,
        R: Send + 'static,
        E: Send + 'static,
    {
        ResponseFuture {
            inner: Box::pin(async move {
                attempts(&mut TowerTransport(service), &shared, request).await
            }),
        }
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<Response<R>, ClientError<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

//! [`ResponseFuture`]: one request's attempts, paced, admitted, throttled, sent and maybe retried.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Service, ServiceExt};

use super::error::ClientError;
use super::policy::{Shared, Verdict};

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
            inner: Box::pin(attempts(service, shared, request)),
        }
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<Response<R>, ClientError<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

async fn attempts<S, B, R>(
    mut service: S,
    shared: Arc<Shared>,
    request: Request<B>,
) -> Result<Response<R>, ClientError<S::Error>>
where
    S: Service<Request<B>, Response = Response<R>>,
    B: Clone,
{
    shared.deposit();
    let mut last: Option<Response<R>> = None;
    for retry in 0.. {
        let wait = shared.reserve_start();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let admission = match shared.admit() {
            Ok(admission) => admission,
            // Break: return the 503 that opened the breaker, or refuse outright.
            Err(retry_in) => return last.ok_or(ClientError::CircuitOpen { retry_in }),
        };
        // The application's request is drawn against the throttle once; its
        // retries are held by the retry budget instead.
        if retry == 0
            && let Err(probability) = shared.throttle()
        {
            shared.unsent(admission);
            return Err(ClientError::Throttled { probability });
        }
        let sent = match service.ready().await {
            Ok(ready) => ready.call(request.clone()).await,
            Err(error) => Err(error),
        };
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                shared.failed(admission);
                return Err(ClientError::Inner(error));
            }
        };
        match shared.answered(admission, response.status(), response.headers(), retry) {
            Verdict::Accepted | Verdict::GiveUp => return Ok(response),
            Verdict::Retry(_) => last = Some(response),
        }
    }
    unreachable!("the retry counter does not run out")
}

//! One request's attempts: paced, admitted by the breaker, throttled, sent and maybe retried, for any transport.
//!
//! The loop is the client's one copy of its per-request rules; the tower
//! [`Backoff`](super::Backoff) service and the `reqwest` middleware each
//! give it a [`Transport`] that sends one attempt.

use std::future::Future;

use http::{HeaderMap, Request, Response, StatusCode};
use tower::{Service, ServiceExt};

use super::error::ClientError;
use super::policy::{Shared, Verdict};

/// What the loop reads of an answer.
pub(crate) trait Answer {
    /// The status code.
    fn status(&self) -> StatusCode;
    /// The header fields (`Retry-After`, `RateLimit*`).
    fn headers(&self) -> &HeaderMap;
}

impl<R> Answer for Response<R> {
    fn status(&self) -> StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        Response::headers(self)
    }
}

/// A request that may be sent again.
pub(crate) trait Resend: Sized {
    /// A copy to send, or `None` when it can be sent only once (a streamed body).
    fn resend(&self) -> Option<Self>;
}

impl<B: Clone> Resend for Request<B> {
    fn resend(&self) -> Option<Self> {
        Some(self.clone())
    }
}

/// Sends one attempt of a request of type `Q`.
pub(crate) trait Transport<Q> {
    /// The answer.
    type Answer: Answer;
    /// Why there is no answer.
    type Error;
    /// Sends `request` once.
    fn send(&mut self, request: Q) -> impl Future<Output = Result<Self::Answer, Self::Error>>;
}

/// A tower service as a [`Transport`]: each attempt waits for readiness, then calls.
pub(crate) struct TowerTransport<S>(pub(crate) S);

impl<S, B, R> Transport<Request<B>> for TowerTransport<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Answer = Response<R>;
    type Error = S::Error;

    async fn send(&mut self, request: Request<B>) -> Result<Response<R>, S::Error> {
        self.0.ready().await?.call(request).await
    }
}

/// Sends `request` through `transport` as the [module docs](super) say:
/// the answer to return, or why there is none. A request that cannot be
/// sent again is sent once, and its answer returned whatever it is.
pub(crate) async fn attempts<T, Q>(
    transport: &mut T,
    shared: &Shared,
    request: Q,
) -> Result<T::Answer, ClientError<T::Error>>
where
    T: Transport<Q>,
    Q: Resend,
{
    shared.deposit();
    let mut last: Option<T::Answer> = None;
    let mut request = request;
    let mut retry = 0;
    loop {
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
        // A copy while the request can be sent again; else the request itself, once.
        let (attempt, kept) = match request.resend() {
            Some(copy) => (copy, Some(request)),
            None => (request, None),
        };
        let answer = match transport.send(attempt).await {
            Ok(answer) => answer,
            Err(error) => {
                shared.failed(admission);
                return Err(ClientError::Inner(error));
            }
        };
        match (
            shared.answered(admission, answer.status(), answer.headers(), retry),
            kept,
        ) {
            (Verdict::Retry(_), Some(kept)) => {
                last = Some(answer);
                request = kept;
                retry = retry.saturating_add(1);
            }
            _ => return Ok(answer),
        }
    }
}

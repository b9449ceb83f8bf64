//! [`ResponseFuture`]: the app's answer with the rate limit headers added, a rejection's answer, or a decision still waiting on the store.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use super::policy::Passed;

/// A decision and what follows it, still waiting on the store (Redis).
type Deciding<F> = Pin<Box<dyn Future<Output = <F as Future>::Output> + Send>>;

pin_project! {
    /// The response of a [`RateLimit`](super::RateLimit) call (and of a
    /// `GrpcRateLimit` call with the `tonic` feature), over the app's
    /// service future `F`.
    ///
    /// A store that decides at once (in memory) decides in `call`: the
    /// future is then the app's own with the headers to add, or the
    /// rejection's answer, with nothing boxed. A store that takes a call
    /// (Redis) decides, and calls the app, in a boxed future.
    pub struct ResponseFuture<F: Future> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F: Future> {
        /// Admitted: the app's future, and the headers to add to its answer.
        Calling { #[pin] future: F, headers: Option<Passed> },
        /// Answered by the layer (`None` once taken).
        Answered { response: Option<F::Output> },
        /// Deciding on a store that takes a call.
        Deciding { future: Deciding<F> },
    }
}

impl<F: Future> ResponseFuture<F> {
    /// The app's answer from `future`, with `headers` added.
    pub(super) fn calling(future: F, headers: Passed) -> Self {
        ResponseFuture {
            state: State::Calling {
                future,
                headers: Some(headers),
            },
        }
    }

    /// The layer's own answer.
    pub(super) fn answered(response: F::Output) -> Self {
        ResponseFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    /// A decision (and the call after it) that waits on the store.
    pub(super) fn deciding(future: Deciding<F>) -> Self {
        ResponseFuture {
            state: State::Deciding { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Calling { future, headers } => {
                let mut response = ready!(future.poll(cx))?;
                if let Some(headers) = headers.take() {
                    headers.add_to(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            // Polled again after it answered: it never answers twice.
            StateProjection::Answered { response } => {
                response.take().map_or(Poll::Pending, Poll::Ready)
            }
            StateProjection::Deciding { future } => future.as_mut().poll(cx),
        }
    }
}

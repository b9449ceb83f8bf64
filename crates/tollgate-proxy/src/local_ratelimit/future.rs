//! The local rate limit's response future: the denial, or the inner response with headers added.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue, Response};
use pin_project_lite::pin_project;

use super::error::LocalRateLimitError;

pin_project! {
    /// Resolves to the denial at once (converted into the inner service's error), or to the inner response with the rate-limit headers added.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Denied before the inner service was called.
        Denied { error: Option<LocalRateLimitError> },
        // Passed on; `headers` are added to the response.
        Inner { #[pin] future: F, headers: Vec<(HeaderName, HeaderValue)> },
    }
}

impl<F> ResponseFuture<F> {
    /// A future that fails with `error`.
    pub fn denied(error: LocalRateLimitError) -> Self {
        ResponseFuture {
            state: State::Denied { error: Some(error) },
        }
    }

    /// A future for the inner response, adding `headers` to it.
    pub fn inner(future: F, headers: Vec<(HeaderName, HeaderValue)>) -> Self {
        ResponseFuture {
            state: State::Inner { future, headers },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: From<LocalRateLimitError>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Denied { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or(LocalRateLimitError::PolledAfterCompletion)
                .into())),
            StateProj::Inner { future, headers } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                for (name, value) in headers.drain(..) {
                    response.headers_mut().insert(name, value);
                }
                Poll::Ready(Ok(response))
            }
        }
    }
}

//! [`RetryPolicy`]: the client's retries as a `tower::retry::Policy`, for a stack built on tower's own `Retry` layer.
//!
//! `tower::retry::RetryLayer::new(RetryPolicy::new(policy))` retries what a
//! [`Backoff`](crate::Backoff) would: a 429 or a 503, after the server's
//! wait spread by the policy's [`RetryJitter`](crate::RetryJitter), held by
//! the [`Pacer`](crate::Pacer) (never before a `Retry-After` or an empty
//! window's reset, and at the server's pace across it), at most
//! `max_retries` times and inside the retry budget. Clones share one state,
//! as the layer's do.
//!
//! What a retry policy cannot do, the layer does: tower's `Retry` sends the
//! first try of every request at once, so there is no waiting for the pacer
//! before it, no circuit breaker and no adaptive throttling (both refuse a
//! request before it is sent). Transport errors are not retried.

use std::sync::Arc;

use http::{Request, Response};
use tokio::time::Sleep;

use crate::backoff::{ClientPolicy, Shared, Verdict};

/// The client's retry rules as a `tower::retry::Policy` (module docs).
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tollgate_client::{ClientPolicy, RetryPolicy};
/// use tower::ServiceExt;
/// use tower::retry::RetryLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let policy = RetryPolicy::new(ClientPolicy::default());
/// let server = tower::service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("ok")))
/// });
/// let client = tower::ServiceBuilder::new().layer(RetryLayer::new(policy)).service(server);
/// let response = client.oneshot(Request::new(String::new())).await.unwrap();
/// assert_eq!(response.into_body(), "ok");
/// # }
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    shared: Arc<Shared>,
    /// Retries made so far of the request this copy follows.
    retries: u32,
}

impl RetryPolicy {
    /// A retry policy with `policy`'s retries, jitter, pacing and budget.
    pub fn new(policy: ClientPolicy) -> Self {
        RetryPolicy {
            shared: Arc::new(Shared::new(policy)),
            retries: 0,
        }
    }
}

impl<B, R, E> tower::retry::Policy<Request<B>, Response<R>, E> for RetryPolicy
where
    B: Clone,
{
    type Future = Sleep;

    fn retry(
        &mut self,
        _request: &mut Request<B>,
        result: &mut Result<Response<R>, E>,
    ) -> Option<Sleep> {
        let response = result.as_ref().ok()?;
        match self
            .shared
            .judge(response.status(), response.headers(), self.retries)
        {
            Verdict::Accepted | Verdict::GiveUp => None,
            Verdict::Retry(_) => {
                self.retries += 1;
                // The pacer holds the retry until its wait is over, or later.
                Some(tokio::time::sleep(self.shared.reserve_start()))
            }
        }
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        if self.retries == 0 {
            // tower's `Retry` clones the request once before its first try.
            self.shared.deposit();
        }
        let mut clone = Request::new(request.body().clone());
        *clone.method_mut() = request.method().clone();
        *clone.uri_mut() = request.uri().clone();
        *clone.version_mut() = request.version();
        *clone.headers_mut() = request.headers().clone();
        *clone.extensions_mut() = request.extensions().clone();
        Some(clone)
    }
}

//! [`BackoffMiddleware`]: the client's pacing, retries, breaker and throttle as `reqwest-middleware` middleware.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Extensions, HeaderMap, StatusCode};
use reqwest_middleware::reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::backoff::{Answer, ClientError, ClientPolicy, Resend, Shared, Transport, attempts};

/// A [`ClientPolicy`] for a `reqwest_middleware::ClientWithMiddleware`:
/// each request is paced, admitted, throttled, sent and retried exactly as
/// through a [`Backoff`](crate::Backoff) service (the same loop): a 429 or
/// 503 is retried after the server's wait `T` spread over `[T, 2T]` (the
/// policy's [`RetryJitter`](crate::RetryJitter)), at most `max_retries`
/// times and inside the retry budget, never before a `Retry-After` or an
/// empty window's reset. Clones share one state: one client, one pace.
///
/// A request whose body cannot be cloned (a stream) is sent once. When
/// the breaker is open or the throttle rejects a request locally, the
/// error is `reqwest_middleware::Error::Middleware` holding a
/// `ClientError<Infallible>` (`error.downcast_ref()` on the `anyhow::Error`).
/// Retries see the extensions as the middlewares before this one left them.
///
/// ```no_run
/// use tollgate_client::{BackoffMiddleware, ClientPolicy};
///
/// # async fn run() -> Result<(), reqwest_middleware::Error> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest_middleware::reqwest::Client::new())
///     .with(BackoffMiddleware::new(ClientPolicy::default().with_max_retries(5)))
///     .build();
/// let response = client.get("http://127.0.0.1:3000/").send().await?;
/// println!("{}", response.status());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BackoffMiddleware {
    shared: Arc<Shared>,
}

impl BackoffMiddleware {
    /// Middleware with `policy`'s retries, jitter, pacing, budget, breaker and throttle.
    pub fn new(policy: ClientPolicy) -> Self {
        BackoffMiddleware {
            shared: Arc::new(Shared::new(policy)),
        }
    }
}

impl Default for BackoffMiddleware {
    /// [`ClientPolicy::default`].
    fn default() -> Self {
        BackoffMiddleware::new(ClientPolicy::default())
    }
}

impl Answer for Response {
    fn status(&self) -> StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        Response::headers(self)
    }
}

impl Resend for Request {
    fn resend(&self) -> Option<Self> {
        self.try_clone()
    }
}

/// The rest of the middleware chain, then reqwest, as the attempts' transport.
struct NextTransport<'a, 'e> {
    next: Next<'a>,
    extensions: &'e mut Extensions,
}

impl Transport<Request> for NextTransport<'_, '_> {
    type Answer = Response;
    type Error = reqwest_middleware::Error;

    async fn send(&mut self, request: Request) -> reqwest_middleware::Result<Response> {
        self.next.clone().run(request, self.extensions).await
    }
}

#[async_trait::async_trait]
impl Middleware for BackoffMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let mut transport = NextTransport { next, extensions };
        match attempts(&mut transport, &self.shared, request).await {
            Ok(response) => Ok(response),
            Err(ClientError::Inner(error)) => Err(error),
            Err(ClientError::Throttled { probability }) => {
                Err(reqwest_middleware::Error::middleware(ClientError::<
                    Infallible,
                >::Throttled {
                    probability,
                }))
            }
            Err(ClientError::CircuitOpen { retry_in }) => {
                Err(reqwest_middleware::Error::middleware(ClientError::<
                    Infallible,
                >::CircuitOpen {
                    retry_in,
                }))
            }
        }
    }
}

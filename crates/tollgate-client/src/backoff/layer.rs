//! [`BackoffLayer`]: wraps a client service in [`Backoff`].

use std::sync::Arc;

use tower::Layer;

use super::policy::{ClientPolicy, Shared};
use super::service::Backoff;

/// Wraps services in [`Backoff`]; all of them share one pace, breaker, throttle and budget.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use tollgate_client::{BackoffLayer, ClientPolicy};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A server over its limit at the first call, asking for 2 s.
/// let calls = Arc::new(AtomicU32::new(0));
/// let server = {
///     let calls = Arc::clone(&calls);
///     tower::service_fn(move |_: http::Request<()>| {
///         let first = calls.fetch_add(1, Ordering::Relaxed) == 0;
///         async move {
///             let response = if first {
///                 http::Response::builder().status(429).header("retry-after", "2").body(())
///             } else {
///                 http::Response::builder().body(())
///             };
///             Ok::<_, std::convert::Infallible>(response.unwrap())
///         }
///     })
/// };
/// let client = BackoffLayer::new(ClientPolicy::default()).layer(server);
/// let started = tokio::time::Instant::now();
/// let response = client.oneshot(http::Request::new(())).await.unwrap();
/// assert_eq!(response.status(), 200);
/// assert_eq!(calls.load(Ordering::Relaxed), 2);
/// // Retried no sooner than the server said, spread over [T, 2T] by default.
/// let waited = started.elapsed();
/// assert!(waited >= Duration::from_secs(2) && waited <= Duration::from_secs(4), "{waited:?}");
/// # }
/// ```
#[derive(Clone)]
pub struct BackoffLayer {
    shared: Arc<Shared>,
}

impl BackoffLayer {
    /// A layer with `policy`.
    pub fn new(policy: ClientPolicy) -> Self {
        BackoffLayer {
            shared: Arc::new(Shared::new(policy)),
        }
    }
}

impl Default for BackoffLayer {
    /// [`ClientPolicy::default`].
    fn default() -> Self {
        BackoffLayer::new(ClientPolicy::default())
    }
}

impl<S> Layer<S> for BackoffLayer {
    type Service = Backoff<S>;

    fn layer(&self, inner: S) -> Backoff<S> {
        Backoff::new(inner, Arc::clone(&self.shared))
    }
}

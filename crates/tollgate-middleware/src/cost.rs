//! [`Cost`]: what a request costs, set by the app in a request extension.

/// What a request costs against every limit, read from the request's extensions (1 when absent).
///
/// A handler-side layer that knows the price of a request inserts it before
/// the rate limit layer runs, for example a GraphQL server that computed
/// the query's cost: `request.extensions_mut().insert(Cost(42))`. `Cost(0)`
/// checks without consuming. A cost above a limit's quota can never pass:
/// it is answered 429 without `Retry-After`.
///
/// ```
/// use std::net::SocketAddr;
/// use std::time::Duration;
/// use tollgate_middleware::{Cost, KeyExtractor, Limit, RateLimitLayer};
/// use tollgate_store::StoreConfig;
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let limits = RateLimitLayer::builder(KeyExtractor::client_address())
///     // 100 points, refilled 100 an hour (a refused query spends nothing;
///     // a fixed window would count it, as envoyproxy/ratelimit does).
///     .limit(Limit::token_bucket("points", 100, 100, Duration::from_secs(3600)).unwrap())
///     .in_memory(StoreConfig::with_max_keys(1_000));
/// let app = limits.layer(tower::service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::new()))
/// }));
/// let query = |cost| {
///     let mut request = http::Request::new(());
///     request.extensions_mut().insert("192.0.2.7:50000".parse::<SocketAddr>().unwrap());
///     request.extensions_mut().insert(Cost(cost));
///     request
/// };
/// // A query priced 60 points passes; a second one finds 40 left.
/// assert_eq!(app.clone().oneshot(query(60)).await.unwrap().status(), 200);
/// let refused = app.clone().oneshot(query(60)).await.unwrap();
/// assert_eq!(refused.status(), 429);
/// assert_eq!(refused.headers()["ratelimit-remaining"], "40");
/// // A query of 40 still fits.
/// assert_eq!(app.oneshot(query(40)).await.unwrap().status(), 200);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cost(pub u64);

impl Default for Cost {
    fn default() -> Self {
        Cost(1)
    }
}

impl Cost {
    /// The cost of `request`.
    pub fn of<B>(request: &http::Request<B>) -> u64 {
        request
            .extensions()
            .get::<Cost>()
            .copied()
            .unwrap_or_default()
            .0
    }
}

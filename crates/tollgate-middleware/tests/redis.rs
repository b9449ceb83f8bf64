//! Two replicas of an app, each with its own layer, sharing one limit through a real Redis:
//! exactly in the exact mode (`RedisStore`), never past it in the leased mode (`LeasedStore`).

#![cfg(feature = "redis")]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use tollgate_core::lease::LeasePolicy;
use tollgate_core::{Clock, MonotonicClock};
use tollgate_middleware::{KeyExtractor, LeasedStore, Limit, RateLimitLayer, RedisStore};
use tollgate_store::CounterStore;
use tollgate_testkit::redis::RedisServer;
use tower::{Layer, Service, ServiceExt};

/// Redis calls in these tests may wait this long (a loaded CI machine).
const TIMEOUT: Duration = Duration::from_secs(2);

fn app() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_request: Request<Body>| async { Ok(Response::new(Body::from("ok"))) })
}

/// A limit of `tokens` for the test's whole run: one token back per day.
fn shared_limit(tokens: u64) -> Limit {
    Limit::token_bucket("shared", tokens, 1, Duration::from_secs(86_400)).unwrap()
}

/// One replica's layer: every caller of the app on the key "tenant" (the header), over `store`.
fn replica<St: CounterStore + 'static>(store: St, tokens: u64) -> RateLimitLayer<St> {
    RateLimitLayer::builder(KeyExtractor::Header(http::HeaderName::from_static(
        "x-tenant",
    )))
    .limit(shared_limit(tokens))
    .store(Arc::new(store))
}

/// `n` requests of tenant "acme", sent in turn to each replica; their statuses in order.
async fn alternate<St: CounterStore + 'static>(
    replicas: &[RateLimitLayer<St>],
    n: usize,
) -> Vec<u16> {
    let services: Vec<_> = replicas.iter().map(|layer| layer.layer(app())).collect();
    let mut statuses = Vec::with_capacity(n);
    for i in 0..n {
        let mut request = Request::get("/")
            .header("x-tenant", "acme")
            .body(Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert("10.0.0.1:1".parse::<SocketAddr>().unwrap());
        let response = services[i % services.len()]
            .clone()
            .oneshot(request)
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    statuses
}

fn admitted(statuses: &[u16]) -> usize {
    statuses.iter().filter(|&&s| s == 200).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_in_the_exact_mode_share_one_limit_exactly() {
    let redis = RedisServer::start();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(&redis.url(), TIMEOUT).await.unwrap();
        replicas.push(replica(store, 20));
    }
    let statuses = alternate(&replicas, 30).await;
    // The 21st request is refused whichever replica it reaches: one count in Redis.
    let mut expected = vec![200; 20];
    expected.extend([429; 10]);
    assert_eq!(statuses, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_in_the_leased_mode_never_pass_the_limit_and_spare_redis_calls() {
    let redis = RedisServer::start();
    const TOKENS: u64 = 100;
    let policy = LeasePolicy::for_fleet(Duration::from_secs(1), 2);
    // The clock the layers spend leases by, and the shutdown gives them back at.
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    let mut stores = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = Arc::new(LeasedStore::new(
            RedisStore::connect(&redis.url(), TIMEOUT).await.unwrap(),
            policy,
            1_000,
        ));
        stores.push(Arc::clone(&store));
        replicas.push(
            RateLimitLayer::builder(KeyExtractor::Header(http::HeaderName::from_static(
                "x-tenant",
            )))
            .limit(shared_limit(TOKENS))
            .clock(Arc::clone(&clock))
            .store(store),
        );
    }
    let calls_before = redis.script_calls();
    let leased_phase = alternate(&replicas, 300).await;
    let calls = redis.script_calls() - calls_before;
    let from_leases: u64 = stores
        .iter()
        .map(|s| s.book().stats().leased_decisions.load(Ordering::Relaxed))
        .sum();
    assert!(
        from_leases > 0 && calls < 300,
        "leases answered {from_leases} requests; Redis ran {calls} calls for 300"
    );
    let in_leases = admitted(&leased_phase);
    let held: u64 = stores
        .iter()
        .map(|s| s.book().outstanding(clock.now()))
        .sum();
    assert!(
        in_leases as u64 + held <= TOKENS,
        "{in_leases} admitted and {held} units still leased, of a limit of {TOKENS}"
    );
    // What the leases did not spend goes back where it safely can (a token
    // bucket's lease only while it is the last one granted); an exact
    // replica then finds at most the rest: the two modes together never
    // pass the limit either.
    for store in &stores {
        store.return_leases(clock.now()).await;
    }
    let exact = replica(
        RedisStore::connect(&redis.url(), TIMEOUT).await.unwrap(),
        TOKENS,
    );
    let rest = admitted(&alternate(&[exact], 200).await);
    assert!(
        in_leases + rest <= TOKENS as usize,
        "{in_leases} admitted from leases and Redis, {rest} more after the leases were returned"
    );
    assert!(
        in_leases + rest >= TOKENS as usize / 2,
        "{in_leases} + {rest} admitted of {TOKENS}: leases stranded most of the budget"
    );
}

#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_books_size_and_bound_are_gauges_in_the_apps_registry() {
    use tollgate_middleware::{LeaseBookGauges, Metrics};

    /// The value of the gauge `name` in the registry's text.
    fn gauge(registry: &prometheus_client::registry::Registry, name: &str) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let prefix = format!("{name} ");
        let line = text.lines().find(|l| l.starts_with(&prefix));
        let value = line.unwrap_or_else(|| panic!("no {name} in {text}"));
        value[prefix.len()..].parse().unwrap()
    }

    let redis = RedisServer::start();
    const MAX_KEYS: usize = 2;
    let store = Arc::new(LeasedStore::new(
        RedisStore::connect(&redis.url(), TIMEOUT).await.unwrap(),
        LeasePolicy::for_fleet(Duration::from_secs(1), 1),
        MAX_KEYS,
    ));
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new();
    metrics.register(&mut registry);
    LeaseBookGauges::new(Arc::clone(&store)).register(&mut registry);
    let layer = RateLimitLayer::builder(KeyExtractor::Header(http::HeaderName::from_static(
        "x-tenant",
    )))
    .limit(shared_limit(100))
    .metrics(&metrics)
    .store(store);
    let service = layer.layer(app());
    let keys = |registry| gauge(registry, "ratelimit_store_lease_keys");
    assert_eq!(keys(&registry), 0);
    assert_eq!(
        gauge(&registry, "ratelimit_store_lease_keys_limit"),
        MAX_KEYS as u64
    );
    // Each tenant's first admitted request puts its counter in the book;
    // five tenants, and the book holds at most two.
    for (tenant, expected) in ["a", "b", "c", "d", "e"].into_iter().zip([1, 2, 2, 2, 2]) {
        let request = Request::get("/")
            .header("x-tenant", tenant)
            .body(Body::empty())
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(keys(&registry), expected, "after tenant {tenant}");
    }
}

//! An axum app with Tollgate's rate limit middleware: the router [`app`] builds, which `main` serves.
//!
//! * `GET /` — 5 requests per second and 100 per minute per client address;
//! * `POST /graphql?cost=N` — the same limits, charged `N` per request
//!   through the [`Cost`] extension a real GraphQL server would set from
//!   the query's computed cost;
//! * `GET /metrics` — the middleware's counters in the Prometheus text format (not limited).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tollgate_middleware::{Cost, KeyExtractor, Limit, Metrics, RateLimitLayer};
use tollgate_store::StoreConfig;

/// Requests per second per client.
pub const PER_SECOND: u64 = 5;

/// The app's router: limited routes, and `/metrics` beside them.
pub fn app() -> Router {
    let metrics = Metrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let limits = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(
            Limit::fixed_window("per-second", PER_SECOND, Duration::from_secs(1))
                .expect("a valid limit"),
        )
        .limit(
            Limit::fixed_window("per-minute", 100, Duration::from_secs(60)).expect("a valid limit"),
        )
        .metrics(&metrics)
        .in_memory(StoreConfig::with_max_keys(100_000));
    let limited = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/graphql", post(|| async { "{\"data\":{}}\n" }))
        .layer(limits)
        // Runs first: prices the request before the limits see it.
        .layer(middleware::from_fn(price_query));
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(Arc::new(registry))
        .merge(limited)
}

/// Sets the [`Cost`] of a `/graphql` request from its `cost` query parameter.
async fn price_query(mut request: Request, next: Next) -> Response {
    let cost = request
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("cost="))
        .and_then(|n| n.parse().ok());
    if let Some(cost) = cost {
        request.extensions_mut().insert(Cost(cost));
    }
    next.run(request).await
}

async fn render_metrics(State(registry): State<Arc<Registry>>) -> String {
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String");
    text
}

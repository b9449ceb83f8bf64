//! An axum app with Tollgate's rate limit middleware: the router [`app`] builds, which `main` serves.
//!
//! * `GET /` — 5 requests per second and 100 per minute per client address;
//! * `POST /graphql?cost=N` — the same limits, charged `N` per request
//!   through the [`Cost`] extension a real GraphQL server would set from
//!   the query's computed cost;
//! * `GET /api/orders` — limited per **tenant**, a key of the app's own: the
//!   `x-api-key` header looked up in the app's table of keys
//!   ([`API_KEYS`]), so every key of one tenant shares its token bucket of
//!   [`TENANT_BURST`] refilled one per minute; refusals are answered in the
//!   app's own JSON (`{"error":"rate_limited","retry_after_seconds":60}`)
//!   with the rate limit headers kept;
//! * `GET /metrics` — the middleware's counters in the Prometheus text format (not limited).
//!
//! [`client`] is the other side: a reqwest client with tollgate-client's
//! backoff middleware (`cargo run -p axum-app --bin client`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{self, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tollgate_middleware::{Cost, KeyExtractor, Limit, Metrics, RateLimitLayer, Rejection};
use tollgate_store::{MemoryCounters, StoreConfig};

pub mod client;

/// The app's API keys and the tenant each belongs to (a real app reads them from its database).
pub const API_KEYS: [(&str, &str); 3] = [
    ("key-acme-1", "acme"),
    ("key-acme-2", "acme"),
    ("key-globex", "globex"),
];

/// The requests a tenant may make at once; one more comes back each minute.
pub const TENANT_BURST: u64 = 3;

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
    let per_tenant = Router::new()
        .route("/api/orders", get(|| async { "[]\n" }))
        .layer(tenant_limits(&metrics));
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(Arc::new(registry))
        .merge(limited)
        .merge(per_tenant)
}

/// The per-tenant limit: the app's own key and the app's own rejection.
fn tenant_limits(metrics: &Metrics) -> RateLimitLayer<MemoryCounters> {
    let tenants: HashMap<&str, &str> = API_KEYS.into_iter().collect();
    // A request without a key counts against the shared key `anonymous`;
    // one with a key the app does not know, against `unknown-key`.
    let by_tenant = KeyExtractor::custom(move |parts: &Parts| {
        let key = parts.headers.get("x-api-key")?.to_str().ok()?;
        Some(
            tenants
                .get(key)
                .map_or_else(|| "unknown-key".to_owned(), |t| format!("tenant {t}")),
        )
    });
    RateLimitLayer::builder(by_tenant)
        .limit(
            Limit::token_bucket("per-tenant", TENANT_BURST, 1, Duration::from_secs(60))
                .expect("a valid limit"),
        )
        .on_rejection(json_rejection)
        .metrics(metrics)
        .in_memory(StoreConfig::with_max_keys(10_000))
}

/// The app's own error body, with the status and headers the layer would send.
fn json_rejection(rejection: &Rejection) -> http::Response<Bytes> {
    let headers = rejection.headers();
    let retry_after: Option<u64> = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let error = match rejection {
        Rejection::OverLimit { .. } => "rate_limited",
        _ => "unavailable",
    };
    let body = serde_json::json!({ "error": error, "retry_after_seconds": retry_after });
    let mut response = http::Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = rejection.status();
    *response.headers_mut() = headers;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
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

//! Overhead per request of rate limiting in an axum app: no layer, Tollgate's `RateLimitLayer`
//! (in memory, two limits per client address) and `tower_governor`, in the same run.
//!
//! Every request is admitted (the limits are far above what a run sends), so
//! this measures the admit path: key extraction, the check, the headers.
//! Run: `cargo bench -p tollgate-middleware --bench overhead`.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer};
use tollgate_store::StoreConfig;
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// Far more than a run sends, so every request passes.
const PLENTY: u64 = 16_000_000;

fn plain() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

fn with_tollgate() -> Router {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::fixed_window("per-second", PLENTY, Duration::from_secs(1)).expect("valid"))
        .limit(Limit::sliding_window("per-minute", PLENTY, Duration::from_secs(60)).expect("valid"))
        .in_memory(StoreConfig::with_max_keys(100_000));
    plain().layer(layer)
}

fn with_governor() -> Router {
    let config = GovernorConfigBuilder::default()
        .per_millisecond(1)
        .burst_size(u32::MAX)
        .finish()
        .expect("a valid governor config");
    plain().layer(GovernorLayer::new(config))
}

fn request() -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).expect("a request");
    let peer: SocketAddr = "10.0.0.1:40000".parse().expect("an address");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

fn overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("axum_request");
    for (name, app) in [
        ("no_layer", plain()),
        ("tollgate_middleware", with_tollgate()),
        ("tower_governor", with_governor()),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                let app = app.clone();
                async move {
                    let response = app.oneshot(request()).await.expect("infallible");
                    assert_eq!(response.status(), 200);
                    response
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);

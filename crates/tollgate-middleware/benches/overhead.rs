//! Overhead per request of rate limiting in an axum app: no layer, Tollgate's `RateLimitLayer`
//! and `tower_governor`, in the same run.
//!
//! Two pairs are compared. As an app would set them up: the layer with two
//! limits per client address (a fixed and a sliding window) and its
//! `RateLimit*` headers (its default), `tower_governor` with one GCRA quota
//! and no headers (its default). Like for like: the layer with one GCRA
//! limit per client address and its headers, `tower_governor` with its
//! `x-ratelimit-*` headers on (`use_headers`); and the layer with one GCRA
//! limit and its headers off (`admitted_headers(false)`) against
//! `tower_governor` as it ships, without headers.
//!
//! Every request is admitted (the limits are far above what a run sends), so
//! this measures the admit path: key extraction, the check, the headers.
//! Run: `cargo bench -p tollgate-middleware --bench overhead`; profile one
//! router with `valgrind --tool=callgrind <bench binary> --bench --profile-time 3 axum_request/<router>`.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
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

/// One GCRA limit per client address, as `tower_governor` keeps one quota.
fn with_tollgate_gcra() -> Router {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::gcra("per-second", PLENTY, Duration::from_secs(1), PLENTY).expect("valid"))
        .in_memory(StoreConfig::with_max_keys(100_000));
    plain().layer(layer)
}

/// One GCRA limit per client address without the headers on admitted
/// answers (`admitted_headers(false)`), as `tower_governor` ships.
fn with_tollgate_gcra_no_headers() -> Router {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::gcra("per-second", PLENTY, Duration::from_secs(1), PLENTY).expect("valid"))
        .admitted_headers(false)
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

/// `tower_governor` adding its `x-ratelimit-limit` and `-remaining` headers to every answer.
fn with_governor_headers() -> Router {
    let config = GovernorConfigBuilder::default()
        .per_millisecond(1)
        .burst_size(u32::MAX)
        .use_headers()
        .finish()
        .expect("a valid governor config");
    plain().layer(GovernorLayer::new(config))
}

/// A request from one client. Never inlined, so a profile counts the requests
/// by its calls: criterion's loop (`AsyncBencher::iter`, inclusive) divided by
/// them is one request's instructions.
#[inline(never)]
fn request() -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).expect("a request");
    let peer: SocketAddr = "10.0.0.1:40000".parse().expect("an address");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// One request through `app`, its answer dropped (so dropping the headers counts).
async fn serve(app: Router, request: Request<Body>) -> StatusCode {
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    response.status()
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
        ("tollgate_one_gcra", with_tollgate_gcra()),
        ("tower_governor_headers", with_governor_headers()),
        (
            "tollgate_one_gcra_no_headers",
            with_tollgate_gcra_no_headers(),
        ),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| serve(app.clone(), request()));
        });
    }
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);

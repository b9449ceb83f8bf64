//! The layer around a plain tower service: key extractors (built in and the app's own), every algorithm,
//! several limits all-or-nothing, shadow mode, the problem body and the app's own rejection, and no
//! shared bucket for requests without a client address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tollgate_core::{ManualClock, Timestamp};
#[cfg(feature = "metrics")]
use tollgate_middleware::Metrics;
use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer, Rejection};
use tollgate_store::StoreConfig;
use tower::{Layer, ServiceExt};

fn app() -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_request: Request<Body>| async { Ok(Response::new(Body::from("ok"))) })
}

fn request(peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::get("/things/7");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    request
}

const HOUR: Duration = Duration::from_secs(3600);

/// The key `extractor` finds for `request`.
fn key(extractor: &KeyExtractor, request: Request<Body>) -> String {
    let (parts, _) = request.into_parts();
    extractor.extract(&parts).unwrap()
}

#[test]
fn keys_come_from_the_trusted_address_a_header_an_api_key_and_the_route() {
    let spoofed = || request("10.0.0.1:1", &[("x-forwarded-for", "1.2.3.4, 192.0.2.7")]);
    let behind_one = KeyExtractor::ClientAddress { trusted_hops: 1 };
    assert_eq!(key(&behind_one, spoofed()), "192.0.2.7");
    assert_eq!(key(&KeyExtractor::client_address(), spoofed()), "10.0.0.1");
    let tenant = KeyExtractor::Header(HeaderName::from_static("x-tenant"));
    assert_eq!(
        key(&tenant, request("10.0.0.1:1", &[("x-tenant", "acme")])),
        "acme"
    );
    assert_eq!(
        key(&tenant, request("10.0.0.1:1", &[])),
        tollgate_middleware::ANONYMOUS
    );
    let api_key = KeyExtractor::ApiKey {
        header: HeaderName::from_static("x-api-key"),
    };
    let bearer = request(
        "10.0.0.1:1",
        &[("authorization", "Bearer k1"), ("x-api-key", "k2")],
    );
    assert_eq!(key(&api_key, bearer), "k1");
    assert_eq!(
        key(&api_key, request("10.0.0.1:1", &[("x-api-key", "k2")])),
        "k2"
    );
    let route = KeyExtractor::RouteAnd(Box::new(KeyExtractor::client_address()));
    assert_eq!(key(&route, spoofed()), "/things/7 10.0.0.1");
}

#[tokio::test]
async fn every_limit_of_a_key_is_checked_and_the_429_names_the_one_that_refused() {
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::gcra("small", 2, HOUR, 2).unwrap())
        .limit(Limit::gcra("large", 3, HOUR, 3).unwrap())
        .in_memory(StoreConfig::with_max_keys(1_000));
    let service = layer.layer(app());
    let mut statuses = Vec::new();
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let response = service
            .clone()
            .oneshot(request("10.0.0.1:1", &[]))
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        remaining.push(
            response.headers()["ratelimit-policy"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    // The refusal names the limit that refused.
    let response = service
        .clone()
        .oneshot(request("10.0.0.1:1", &[]))
        .await
        .unwrap();
    let ratelimit = response.headers()["ratelimit"].to_str().unwrap();
    assert!(ratelimit.starts_with("\"small\";r=0;"), "{ratelimit}");
    assert_eq!(remaining[0], "\"small\";q=2;w=3600, \"large\";q=3;w=3600");
}

#[tokio::test]
async fn each_limit_counts_each_client_apart() {
    // The smaller limit second: its counters are the ones a key written
    // once and copied after each limit's prefix must keep apart (two
    // addresses of one length, so only the bytes tell them apart).
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::gcra("large", 5, HOUR, 5).unwrap())
        .limit(Limit::fixed_window("small", 2, HOUR).unwrap())
        .in_memory(StoreConfig::with_max_keys(1_000));
    let service = layer.layer(app());
    let mut statuses = Vec::new();
    for peer in ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3", "10.0.0.2:1"] {
        let response = service.clone().oneshot(request(peer, &[])).await.unwrap();
        statuses.push(response.status().as_u16());
    }
    let response = service
        .clone()
        .oneshot(request("10.0.0.2:1", &[]))
        .await
        .unwrap();
    statuses.push(response.status().as_u16());
    let small = response.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert_eq!(statuses, [200, 200, 429, 200, 200]);
    assert!(small.starts_with("\"small\";r=0;"), "{small}");
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn shadow_mode_counts_what_it_would_refuse_and_refuses_nothing() {
    let metrics = Metrics::new();
    let layer = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::fixed_window("tiny", 1, HOUR).unwrap())
        .shadow(true)
        .metrics(&metrics)
        .in_memory(StoreConfig::with_max_keys(1_000));
    let service = layer.layer(app());
    for _ in 0..3 {
        let response = service
            .clone()
            .oneshot(request("10.0.0.1:1", &[]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("ratelimit").is_none());
    }
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            "tollgate_middleware_decisions_total{limit=\"tiny\",outcome=\"shadow_denied\"} 2"
        ),
        "{text}"
    );
}

/// A layer holding each client address to `limit`, in memory.
fn per_client(limit: Limit) -> RateLimitLayer<tollgate_store::MemoryCounters> {
    RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(limit)
        .in_memory(StoreConfig::with_max_keys(1_000))
}

/// The RFC 9457 problem in `response`'s body, after checking its content type.
async fn problem(response: Response<Body>) -> serde_json::Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

/// The statuses of `n` requests from one client through `layer`.
async fn statuses<St>(layer: &RateLimitLayer<St>, n: usize) -> Vec<u16>
where
    St: tollgate_store::CounterStore + 'static,
{
    let service = layer.layer(app());
    let mut statuses = Vec::new();
    for _ in 0..n {
        let response = service
            .clone()
            .oneshot(request("10.0.0.1:1", &[]))
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn the_token_bucket_sliding_log_and_leaky_bucket_limit_as_the_others_do() {
    let limits = [
        Limit::token_bucket("bucket", 3, 1, HOUR).unwrap(),
        Limit::sliding_log("log", 3, HOUR).unwrap(),
        Limit::leaky_bucket("leaky", 1, HOUR, 2).unwrap(),
    ];
    for limit in limits {
        let name = limit.name().to_owned();
        let layer = per_client(limit);
        // Three at once pass (capacity 3, quota 3, burst 2 + 1), the fourth is refused.
        assert_eq!(statuses(&layer, 4).await, [200, 200, 200, 429], "{name}");
    }
}

#[tokio::test]
async fn a_request_without_a_client_address_is_a_500_never_a_shared_bucket() {
    let layer = per_client(Limit::fixed_window("per-hour", 100, HOUR).unwrap());
    // Served without connection info: no `SocketAddr`, no `ConnectInfo`.
    let response = layer
        .layer(app())
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let problem = problem(response).await;
    assert_eq!(problem["status"], 500);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("no peer address")
            && detail.contains("into_make_service_with_connect_info"),
        "{detail}"
    );
    // It never reached the app, and took nothing from any client's limit.
    let served = statuses(&layer, 100).await;
    assert!(served.iter().all(|s| *s == 200), "{served:?}");
}

#[tokio::test]
async fn axums_connect_info_is_the_client_address_only_with_the_axum_feature() {
    let layer = per_client(Limit::fixed_window("per-hour", 100, HOUR).unwrap());
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    let peer: SocketAddr = "10.0.0.1:1".parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    let response = layer.layer(app()).oneshot(request).await.unwrap();
    if cfg!(feature = "axum") {
        assert_eq!(response.status(), StatusCode::OK);
    } else {
        // An axum app that forgot the feature: told so, never a shared bucket.
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let problem = problem(response).await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("the `axum` feature"), "{detail}");
    }
}

#[tokio::test]
async fn a_custom_key_and_the_apps_own_rejection() {
    // The tenant is the first path segment; the app answers refusals in its own JSON.
    let by_tenant = KeyExtractor::custom(|parts: &http::request::Parts| {
        parts.uri.path().split('/').nth(1).map(str::to_owned)
    });
    let layer = RateLimitLayer::builder(by_tenant)
        .limit(Limit::fixed_window("per-tenant", 1, HOUR).unwrap())
        .on_rejection(|rejection: &Rejection| {
            let mut response = Response::new(Bytes::from(format!(
                "{{\"error\":\"slow down\",\"code\":{}}}",
                rejection.status().as_u16()
            )));
            *response.status_mut() = rejection.status();
            response.headers_mut().extend(rejection.headers());
            response
        })
        .in_memory(StoreConfig::with_max_keys(1_000));
    let service = layer.layer(app());
    let call = |path: &str| {
        service
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
    };
    assert_eq!(call("/acme/a").await.unwrap().status(), StatusCode::OK);
    assert_eq!(call("/globex/a").await.unwrap().status(), StatusCode::OK);
    let refused = call("/acme/b").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(
        refused.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"per-tenant\";r=0;")
    );
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"error":"slow down","code":429}"#);
}

#[tokio::test]
async fn the_default_429_is_an_rfc_9457_problem_naming_the_limit() {
    let layer = per_client(Limit::fixed_window("tiny", 1, HOUR).unwrap());
    assert_eq!(statuses(&layer, 1).await, [200]);
    let refused = layer
        .layer(app())
        .oneshot(request("10.0.0.1:1", &[]))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["ratelimit-remaining"], "0");
    let problem = problem(refused).await;
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["detail"], "over the rate limit \"tiny\"");
}

#[tokio::test]
async fn admitted_answers_carry_the_headers_unless_turned_off_and_refusals_always_do() {
    const HEADERS: [&str; 5] = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit-policy",
        "ratelimit",
    ];
    for admitted_headers in [None, Some(true), Some(false)] {
        let builder = RateLimitLayer::builder(KeyExtractor::client_address())
            .limit(Limit::gcra("per-hour", 2, HOUR, 2).unwrap());
        let builder = match admitted_headers {
            Some(on) => builder.admitted_headers(on),
            None => builder,
        };
        let service = builder
            .in_memory(StoreConfig::with_max_keys(1_000))
            .layer(app());
        let on = admitted_headers.unwrap_or(true);
        for remaining in ["1", "0"] {
            let admitted = service
                .clone()
                .oneshot(request("10.0.0.1:1", &[]))
                .await
                .unwrap();
            assert_eq!(admitted.status(), StatusCode::OK);
            for name in HEADERS {
                assert_eq!(admitted.headers().contains_key(name), on, "{name}");
            }
            if on {
                assert_eq!(admitted.headers()["ratelimit-remaining"], remaining);
                assert_eq!(admitted.headers()["ratelimit-limit"], "2");
            }
        }
        // Off or on, the two admitted requests were counted, and the refusal
        // carries the whole 429 contract.
        let refused = service
            .clone()
            .oneshot(request("10.0.0.1:1", &[]))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        for name in HEADERS.iter().chain(&["retry-after"]) {
            assert!(refused.headers().contains_key(*name), "{name}");
        }
        assert_eq!(refused.headers()["ratelimit-remaining"], "0");
    }
}

/// The `RateLimit*` and `Retry-After` headers of `response`, in the order they were added.
fn rate_limit_headers(response: &Response<Body>) -> Vec<(String, String)> {
    response
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("ratelimit") || *name == "retry-after")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn admitted_and_refused_answers_carry_exactly_these_header_bytes() {
    let clock = Arc::new(ManualClock::new(Timestamp::from_nanos(1_000_000_000_000)));
    let service = RateLimitLayer::builder(KeyExtractor::client_address())
        .limit(Limit::fixed_window("per \"ten\" seconds", 2, Duration::from_secs(10)).unwrap())
        .limit(Limit::gcra("burst", 5, Duration::from_secs(60), 3).unwrap())
        .clock(clock.clone())
        .in_memory(StoreConfig::with_max_keys(1_000))
        .layer(app());
    let policy = r#""per \"ten\" seconds";q=2;w=10, "burst";q=5;w=60"#;
    let expected = |remaining: &str, reset: &str, retry_after: Option<&str>| {
        let item = format!(r#""per \"ten\" seconds";r={remaining};t={reset}"#);
        let mut headers = vec![
            ("ratelimit-limit", "2".to_owned()),
            ("ratelimit-remaining", remaining.to_owned()),
            ("ratelimit-reset", reset.to_owned()),
            ("ratelimit-policy", policy.to_owned()),
            ("ratelimit", item),
        ];
        headers.extend(retry_after.map(|after| ("retry-after", after.to_owned())));
        headers
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect::<Vec<_>>()
    };
    // At 0 s, 3 s and 3 s into the fixed window: two admitted, the third refused.
    for (advance, status, headers) in [
        (0, 200, expected("1", "10", None)),
        (3, 200, expected("0", "7", None)),
        (0, 429, expected("0", "7", Some("7"))),
    ] {
        clock.advance(Duration::from_secs(advance));
        let response = service
            .clone()
            .oneshot(request("10.0.0.1:1", &[]))
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(rate_limit_headers(&response), headers);
    }
}

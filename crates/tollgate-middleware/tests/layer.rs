//! The layer around a plain tower service: key extractors, several limits all-or-nothing, shadow mode.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderName, Request, Response, StatusCode};
use tollgate_middleware::{KeyExtractor, Limit, Metrics, RateLimitLayer};
use tollgate_store::StoreConfig;
use tower::{Layer, ServiceExt};

fn app()
-> impl tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future = impl Send>
+ Clone
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

#[test]
fn keys_come_from_the_trusted_address_a_header_an_api_key_and_the_route() {
    let behind_one = KeyExtractor::ClientAddress { trusted_hops: 1 };
    let spoofed = request("10.0.0.1:1", &[("x-forwarded-for", "1.2.3.4, 192.0.2.7")]);
    assert_eq!(behind_one.extract(&spoofed), "192.0.2.7");
    assert_eq!(KeyExtractor::client_address().extract(&spoofed), "10.0.0.1");
    let tenant = KeyExtractor::Header(HeaderName::from_static("x-tenant"));
    assert_eq!(
        tenant.extract(&request("10.0.0.1:1", &[("x-tenant", "acme")])),
        "acme"
    );
    assert_eq!(
        tenant.extract(&request("10.0.0.1:1", &[])),
        tollgate_middleware::ANONYMOUS
    );
    let api_key = KeyExtractor::ApiKey {
        header: HeaderName::from_static("x-api-key"),
    };
    let bearer = request(
        "10.0.0.1:1",
        &[("authorization", "Bearer k1"), ("x-api-key", "k2")],
    );
    assert_eq!(api_key.extract(&bearer), "k1");
    assert_eq!(
        api_key.extract(&request("10.0.0.1:1", &[("x-api-key", "k2")])),
        "k2"
    );
    let route = KeyExtractor::RouteAnd(Box::new(KeyExtractor::client_address()));
    assert_eq!(route.extract(&spoofed), "/things/7 10.0.0.1");
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
